#!/usr/bin/env bash
# make bench-quick: start the stack as make demo does (orders in lab mode, for the no-key baseline
# route), run `loadtest bench` (short durations, HTML report), stop everything, and exit with its status
# (0 only if every invariant held). Extra arguments go to `loadtest bench`, e.g.
#   BENCH_DURATION=10s scripts/bench.sh --growth
# Ports: BENCH_ORDERS_PORT, BENCH_PAYMENTS_PORT, BENCH_POINTS_PORT (8080-8082).
set -uo pipefail
cd "$(dirname "$0")/.."
kind=bench
duration="${BENCH_DURATION:-3s}"
html="${BENCH_HTML:-bench.html}"
source scripts/stack.sh

echo
echo "== loadtest bench --duration $duration --html $html $*"
"$bin/loadtest" bench --duration "$duration" --html "$html" --points-url "$POINTS_URL" "$@"
rc=$?
echo "== bench exit $rc"
exit "$rc"
