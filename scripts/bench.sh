#!/usr/bin/env bash
# make bench-quick: build the binaries, start orders (lab mode, for the no-key baseline route),
# payments-mock and points-consumer against the local PostgreSQL, Redis and RabbitMQ with a fresh
# database, run `loadtest bench` (short durations, HTML report), stop everything, and exit with its
# status (0 only if every invariant held). Extra arguments go to `loadtest bench`, e.g.
#   BENCH_DURATION=10s scripts/bench.sh --growth
set -uo pipefail
cd "$(dirname "$0")/.."

run_id="bench_$(date +%s)_$$"
bin="${BIN:-bin}"
pg_server="${BENCH_PG_SERVER:-postgres://postgres@127.0.0.1:5432}"
orders_port="${BENCH_ORDERS_PORT:-8080}"
payments_port="${BENCH_PAYMENTS_PORT:-8081}"
points_port="${BENCH_POINTS_PORT:-8082}"
duration="${BENCH_DURATION:-3s}"
html="${BENCH_HTML:-bench.html}"
logs="$(mktemp -d /tmp/idemshop-bench.XXXXXX)"

export DATABASE_URL="$pg_server/idemshop_$run_id?sslmode=disable"
export REDIS_KEY_PREFIX="$run_id:"
export AMQP_NAME_PREFIX="$run_id:"
export ORDERS_LAB=true
export ORDERS_URL="http://127.0.0.1:$orders_port"
export PAYMENTS_URL="http://127.0.0.1:$payments_port"
export CALLBACK_URL="http://127.0.0.1:$orders_port/v1/payments/callback"
export LOG_LEVEL="${LOG_LEVEL:-warn}"
# The relay's idle poll bounds the outbox lag (docs/performance.md); the default is 200ms.
export OUTBOX_POLL_INTERVAL="${OUTBOX_POLL_INTERVAL:-50ms}"

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
echo "== loadtest bench --duration $duration --html $html $*"
"$bin/loadtest" bench --duration "$duration" --html "$html" --points-url "http://127.0.0.1:$points_port" "$@"
rc=$?
echo "== bench exit $rc"
exit "$rc"
