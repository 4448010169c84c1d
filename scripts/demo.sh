#!/usr/bin/env bash
# make demo: build the three binaries and loadtest, start them against the local PostgreSQL, Redis and
# RabbitMQ with a fresh database in lab mode, run `loadtest incident` then `loadtest lab all`, print both
# reports, stop everything, and exit with their status (0 only if both passed).
set -uo pipefail
cd "$(dirname "$0")/.."

run_id="demo_$(date +%s)_$$"
bin="${BIN:-bin}"
pg_server="${DEMO_PG_SERVER:-postgres://postgres@127.0.0.1:5432}"
orders_port="${DEMO_ORDERS_PORT:-8080}"
payments_port="${DEMO_PAYMENTS_PORT:-8081}"
points_port="${DEMO_POINTS_PORT:-8082}"
logs="$(mktemp -d /tmp/idemshop-demo.XXXXXX)"

export DATABASE_URL="$pg_server/idemshop_$run_id?sslmode=disable"
export REDIS_KEY_PREFIX="$run_id:"
export AMQP_NAME_PREFIX="$run_id:"
export ORDERS_LAB=true
export ORDERS_URL="http://127.0.0.1:$orders_port"
export PAYMENTS_URL="http://127.0.0.1:$payments_port"
export CALLBACK_URL="http://127.0.0.1:$orders_port/v1/payments/callback"
export SWEEP_INTERVAL="${SWEEP_INTERVAL:-500ms}"
export LOG_LEVEL="${LOG_LEVEL:-warn}"

echo "== building"
go build -o "$bin/" ./cmd/... || exit 2

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  psql "$pg_server/postgres?sslmode=disable" -qc "DROP DATABASE IF EXISTS \"idemshop_$run_id\" WITH (FORCE)" >/dev/null 2>&1
  echo "== stopped; logs in $logs"
}
trap cleanup EXIT

wait_ready() { # name url
  for _ in $(seq 120); do
    curl -fsS -o /dev/null "$2/readyz" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "$1 did not become ready; its log:"; tail -n 30 "$logs/$1.log"; return 1
}

echo "== starting payments-mock, orders (lab mode) and points-consumer (run $run_id)"
HTTP_ADDR="127.0.0.1:$payments_port" "$bin/payments-mock" >"$logs/payments-mock.log" 2>&1 & pids+=($!)
HTTP_ADDR="127.0.0.1:$orders_port" "$bin/orders" >"$logs/orders.log" 2>&1 & pids+=($!)
wait_ready payments-mock "$PAYMENTS_URL" || exit 2
wait_ready orders "$ORDERS_URL" || exit 2
HTTP_ADDR="127.0.0.1:$points_port" "$bin/points-consumer" >"$logs/points-consumer.log" 2>&1 & pids+=($!)
wait_ready points-consumer "http://127.0.0.1:$points_port" || exit 2

echo
echo "== loadtest incident"
"$bin/loadtest" incident
incident=$?
echo
echo "== loadtest lab all"
"$bin/loadtest" lab all
labrc=$?
echo
echo "== incident exit $incident, lab exit $labrc"
[ "$incident" -eq 0 ] && [ "$labrc" -eq 0 ]
