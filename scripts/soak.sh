#!/usr/bin/env bash
# make soak: build the binaries, then run `loadtest soak`, which starts payments-mock, orders and
# points-consumer itself on a fresh database (idemshop_<run id>) with fresh Redis and AMQP prefixes,
# drives them with seeded clients while it sets payments-mock chaos and kill -9s orders and
# points-consumer (SOAK_FAULTS=process), or restarts and disconnects a PostgreSQL, Redis and RabbitMQ of
# its own (SOAK_FAULTS=infra; all = both), stops the faults, waits for quiescence and checks that the
# shop converged to the platform's records. It removes everything it created on exit, Ctrl-C included.
# Exit: 0 converged with no violation, 1 violations, 2 set-up error.
#
#   SOAK_SEED=<n> SOAK_DURATION=60s SOAK_FAULTS=process make soak     (docs/reliability.md)
#   SOAK_SEED=<n> SOAK_DURATION=60s SOAK_FAULTS=infra make soak
#
# Server: SOAK_PG_SERVER (postgres://postgres@127.0.0.1:5432); REDIS_URL and AMQP_URL as for the services.
set -uo pipefail
cd "$(dirname "$0")/.."
bin="${BIN:-bin}"
pg_server="${SOAK_PG_SERVER:-postgres://postgres@127.0.0.1:5432}"
export SOAK_BIN="${SOAK_BIN:-$bin}"
export SOAK_RUN_ID="${SOAK_RUN_ID:-soak_$(date +%s)_$$}"
export DATABASE_URL="$pg_server/postgres?sslmode=disable" # the server; the soak uses idemshop_<run id>
export LOG_LEVEL="${LOG_LEVEL:-info}"                       # loadtest's own lines; services: SOAK_CHILD_LOG_LEVEL

echo "== building"
go build -o "$bin/" ./cmd/... ./loadtest || exit 2

# The soak drops its database, deletes its Redis keys and RabbitMQ topology and removes its private
# PostgreSQL/Redis/RabbitMQ (SOAK_FAULTS=infra|all) itself, on Ctrl-C too; this catches a soak that was
# killed outright, and anything else declared under its prefix (scripts/cleanup.sh).
source scripts/cleanup.sh
cleanup() {
  cleanup_run "$pg_server" "idemshop_$SOAK_RUN_ID" "$SOAK_RUN_ID:"
  if [ -d "${TMPDIR:-/tmp}/idemshop-soak-infra-$SOAK_RUN_ID" ]; then
    timeout 60 "$bin/loadtest" soak --cleanup
  fi
}
trap cleanup EXIT

echo "== loadtest soak (run $SOAK_RUN_ID)"
"$bin/loadtest" soak "$@"
