#!/usr/bin/env bash
# The workshop's long-running stack (docs/workshop.md):
#   scripts/workshop.sh start   build bin/*, start payments-mock, orders (lab mode) and points-consumer
#                               in the background, return once all three are ready
#   scripts/workshop.sh stop    stop them (SIGTERM, then SIGKILL after 15 s), whatever they started
#   scripts/workshop.sh status  print each one's /readyz; exit 1 unless this script started the three
#                               (on these ports) and all three are ready
# Each binary runs in a process group of its own, recorded in $WORKSHOP_DIR/pids, and stop signals the
# whole group: nothing is left listening on its ports (a `go run … &` would leave its child there).
# Ports: WORKSHOP_ORDERS_PORT, WORKSHOP_PAYMENTS_PORT, WORKSHOP_POINTS_PORT (8080-8082); each binary gets
# its own HTTP_ADDR, on 127.0.0.1 only, and CALLBACK_URL, PAYMENTS_URL and POINTS_METRICS_URL follow the
# ports unless set. WORKSHOP_DIR (default: one per user and orders port, so that a second stack on other
# ports is a stack of its own) holds the pids and the logs; stop and status take the same ports.
# The environment passes through: DATABASE_URL (default: the workshop database), REDIS_KEY_PREFIX and
# AMQP_NAME_PREFIX (a classroom sharing one server: docs/workshop.md), ORDERS_LAB (default true).
set -uo pipefail
cd "$(dirname "$0")/.."
bin="${BIN:-bin}"
export ORDERS_LAB="${ORDERS_LAB:-true}"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/workshop?sslmode=disable}"
orders_port="${WORKSHOP_ORDERS_PORT:-8080}"
payments_port="${WORKSHOP_PAYMENTS_PORT:-8081}"
points_port="${WORKSHOP_POINTS_PORT:-8082}"
# One per orders port: with one per user, a second stack on other ports was told "already started", and
# its stop would have stopped the first.
dir="${WORKSHOP_DIR:-${TMPDIR:-/tmp}/idemshop-workshop-$(id -u)-$orders_port}"
pids="$dir/pids"
# Set per binary below: an HTTP_ADDR exported for one of them must not send all three to one port.
unset HTTP_ADDR
export CALLBACK_URL="${CALLBACK_URL:-http://127.0.0.1:$orders_port/v1/payments/callback}"
export PAYMENTS_URL="${PAYMENTS_URL:-http://127.0.0.1:$payments_port}"
export POINTS_METRICS_URL="${POINTS_METRICS_URL:-http://127.0.0.1:$points_port/metrics}"
names=(payments-mock orders points-consumer)
ports=("$payments_port" "$orders_port" "$points_port")
urls=("http://127.0.0.1:$payments_port" "http://127.0.0.1:$orders_port" "http://127.0.0.1:$points_port")

stop() {
  [ -f "$pids" ] || { echo "not running (no $pids)"; return 0; }
  while read -r name pid; do kill -TERM -- "-$pid" 2>/dev/null && echo "stopping $name (group $pid)"; done <"$pids"
  while read -r name pid; do
    for _ in $(seq 150); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null && echo "$name did not stop in 15 s: killed"
  done <"$pids"
  rm -f "$pids"
}

status() {
  local rc=0 out code
  [ -f "$pids" ] || { echo "not started by this script on these ports (no $pids)"; rc=1; }
  for i in "${!names[@]}"; do
    out="$(curl -s -m 3 -w '\n%{http_code}' "${urls[$i]}/readyz")"
    code="${out##*$'\n'}"
    [ "$code" = 200 ] || rc=1
    [ "$code" = 000 ] && out=$'not answering\n'
    out="${out%$'\n'*}"
    printf '%-16s %s\n' "${names[$i]}" "${out%$'\n'}"
  done
  return "$rc"
}

# listening PORT: something accepts connections on 127.0.0.1:PORT.
listening() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

start() {
  [ -f "$pids" ] && { echo "already started ($pids); run: $0 stop"; return 1; }
  # Another program on a port would answer the ready checks below for a binary that could not bind it.
  for i in "${!names[@]}"; do
    listening "${ports[$i]}" && {
      echo "port ${ports[$i]} (${names[$i]}) is taken by another program; give the stack others (WORKSHOP_*_PORT)"
      return 1
    }
  done
  mkdir -p "$dir"
  echo "== building into $bin/"
  go build -o "$bin/" ./cmd/... ./loadtest || return 2
  # Started together: orders creates and migrates the database, points-consumer waits for it.
  local started=()
  for i in "${!names[@]}"; do
    # Loopback only: orders' lab routes reach payments-mock's admin API, which is for this machine alone.
    HTTP_ADDR="127.0.0.1:${ports[$i]}" setsid "$bin/${names[$i]}" >"$dir/${names[$i]}.log" 2>&1 </dev/null &
    started[i]=$!
    echo "${names[$i]} $!" >>"$pids"
  done
  # Ready means answered by our own process: one that exited (a port taken meanwhile, a bad setting)
  # is reported with its log at once.
  for i in "${!names[@]}"; do
    for _ in $(seq 120); do
      kill -0 "${started[$i]}" 2>/dev/null ||
        { echo "${names[$i]} exited; its log:"; tail -n 20 "$dir/${names[$i]}.log"; stop; return 1; }
      curl -fsS -m 2 -o /dev/null "${urls[$i]}/readyz" 2>/dev/null && break
      sleep 0.5
    done
    curl -fsS -m 2 -o /dev/null "${urls[$i]}/readyz" 2>/dev/null ||
      { echo "${names[$i]} not ready after 60 s; its log:"; tail -n 20 "$dir/${names[$i]}.log"; stop; return 1; }
  done
  echo "== ready; logs in $dir/*.log; stop with: $0 stop"
  [ "$orders_port$payments_port" = 80808081 ] ||
    echo "== for loadtest (lt): export ORDERS_URL=${urls[1]} PAYMENTS_URL=${urls[0]}"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
