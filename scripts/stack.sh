# Sourced by demo.sh and bench.sh: build the binaries and start payments-mock, orders (lab mode) and
# points-consumer against the local PostgreSQL, Redis and RabbitMQ, on a fresh database and fresh
# Redis/AMQP name prefixes; on exit (a failure or Ctrl-C too) stop them, drop the database and delete the
# Redis keys and RabbitMQ objects under the run's prefix (scripts/cleanup.sh).
#
# Callers set: kind (a word for names), and may set BIN, <KIND>_PG_SERVER and <KIND>_*_PORT.

source scripts/cleanup.sh
run_id="${kind}_$(date +%s)_$$"
bin="${BIN:-bin}"
upper=$(echo "$kind" | tr '[:lower:]' '[:upper:]')
var() { local v="${upper}_$1"; echo "${!v:-$2}"; }
pg_server=$(var PG_SERVER postgres://postgres@127.0.0.1:5432)
orders_port=$(var ORDERS_PORT 8080)
payments_port=$(var PAYMENTS_PORT 8081)
points_port=$(var POINTS_PORT 8082)
# listening PORT: something accepts connections on 127.0.0.1:PORT.
listening() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
# Another program on a port (another stack, a workshop's) would answer the ready checks for a binary
# that could not bind it, and the demo or the bench would then run against that program (a workshop
# walker's finding, 2026-12-07; scripts/workshop.sh already refused).
for spec in "payments-mock $payments_port PAYMENTS_PORT" "orders $orders_port ORDERS_PORT" "points-consumer $points_port POINTS_PORT"; do
  read -r name port v <<<"$spec"
  if listening "$port"; then
    echo "port $port ($name) is taken by another program; give the stack others (${upper}_$v)"
    exit 2
  fi
done
logs="$(mktemp -d "/tmp/idemshop-$kind.XXXXXX")"

export DATABASE_URL="$pg_server/idemshop_$run_id?sslmode=disable"
export REDIS_KEY_PREFIX="$run_id:"
export AMQP_NAME_PREFIX="$run_id:"
export ORDERS_LAB=true
export ORDERS_URL="http://127.0.0.1:$orders_port"
export PAYMENTS_URL="http://127.0.0.1:$payments_port"
export POINTS_URL="http://127.0.0.1:$points_port"
export POINTS_METRICS_URL="$POINTS_URL/metrics" # /lab polls it: this stack's consumer, not 8082's
export CALLBACK_URL="http://127.0.0.1:$orders_port/v1/payments/callback"
export LOG_LEVEL="${LOG_LEVEL:-warn}"

echo "== building"
go build -o "$bin/" ./cmd/... ./loadtest || exit 2

pids=()
stop_stack() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  cleanup_run "$pg_server" "idemshop_$run_id" "$run_id:"
  echo "== stopped; database idemshop_$run_id and everything under $run_id: cleaned up; logs in $logs"
}
trap stop_stack EXIT

wait_ready() { # name url pid: ready means answered while our own process runs (not one that exited)
  for _ in $(seq 120); do
    kill -0 "$3" 2>/dev/null || { echo "$1 exited; its log:"; tail -n 30 "$logs/$1.log"; return 1; }
    curl -fsS -m 2 -o /dev/null "$2/readyz" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "$1 did not become ready; its log:"; tail -n 30 "$logs/$1.log"; return 1
}

echo "== starting payments-mock, orders (lab mode) and points-consumer (run $run_id)"
HTTP_ADDR="127.0.0.1:$payments_port" "$bin/payments-mock" >"$logs/payments-mock.log" 2>&1 & pids+=($!)
HTTP_ADDR="127.0.0.1:$orders_port" "$bin/orders" >"$logs/orders.log" 2>&1 & pids+=($!)
wait_ready payments-mock "$PAYMENTS_URL" "${pids[0]}" || exit 2
wait_ready orders "$ORDERS_URL" "${pids[1]}" || exit 2
HTTP_ADDR="127.0.0.1:$points_port" "$bin/points-consumer" >"$logs/points-consumer.log" 2>&1 & pids+=($!)
wait_ready points-consumer "$POINTS_URL" "${pids[2]}" || exit 2
