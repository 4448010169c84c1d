# syntax=docker/dockerfile:1
# One image for every idemshop process: orders, payments-mock, points-consumer, loadtest, and the
# healthcheck that docker-compose.yml runs inside the containers. docker-compose.yml picks the binary
# with `command:`; see docs/docker.md.

# --- build: static binaries (CGO off), module and build caches kept between builds ----------------
FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Migrations and web templates are embedded (go:embed), so the binaries are all the runtime needs.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/ \
      ./cmd/orders ./cmd/payments-mock ./cmd/points-consumer ./loadtest ./cmd/healthcheck

# --- runtime: distroless static, no shell, runs as the unprivileged user "nonroot" (65532) ----------
FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
EXPOSE 8080 8081 8082
# No ENTRYPOINT: each compose service names its binary, e.g. command: ["/usr/local/bin/orders"].
CMD ["/usr/local/bin/orders"]
