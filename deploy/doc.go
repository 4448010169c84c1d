// Package deploy holds what `docker compose up` needs beside the Dockerfile and docker-compose.yml:
// the Prometheus scrape config (prometheus/) and Grafana's provisioning and dashboard (grafana/).
//
// It has no Go code to run. Its tests check those files, docker-compose.yml, the Dockerfile and
// .dockerignore statically, against the code: the compose environment against the config defaults
// (internal/platform/config), and every metric the dashboard queries against the registries the
// binaries build. They need no Docker engine; docs/docker.md says what they cannot prove.
package deploy
