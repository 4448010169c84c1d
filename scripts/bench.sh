#!/usr/bin/env bash
# make bench-quick: start the stack as make demo does (orders in lab mode, for the no-key baseline
# route), run `loadtest bench` (short durations, HTML report), stop everything, and exit with its status
# (0 only if every invariant held). Extra arguments go to `loadtest bench`, e.g.
#   BENCH_DURATION=10s scripts/bench.sh --growth
# BENCH_JSON=path also writes the JSON report there (relative to the repository root), so that a run
# can be compared with the last: BENCH_JSON=bench.json make bench-quick.
# Ports: BENCH_ORDERS_PORT, BENCH_PAYMENTS_PORT, BENCH_POINTS_PORT (8080-8082).
set -uo pipefail
cd "$(dirname "$0")/.."
kind=bench
duration="${BENCH_DURATION:-3s}"
html="${BENCH_HTML:-bench.html}"
out=(--html "$html")
if [ -n "${BENCH_JSON:-}" ]; then out+=(--json-file "$BENCH_JSON"); fi
source scripts/stack.sh

echo
echo "== loadtest bench --duration $duration ${out[*]} $*"
"$bin/loadtest" bench --duration "$duration" "${out[@]}" --points-url "$POINTS_URL" "$@"
rc=$?
echo "== bench exit $rc"
exit "$rc"
