#!/usr/bin/env bash
# make bench-quick: start the stack as make demo does (orders in lab mode, for the no-key baseline
# route), run `loadtest bench` (short durations, HTML report), stop everything, and exit with its status
# (0 only if every invariant held). Extra arguments go to `loadtest bench`, e.g.
#   BENCH_DURATION=10s scripts/bench.sh --growth
# BENCH_JSON=path also writes the JSON report there (relative to the repository root), so that a run
# can be compared with the last: BENCH_JSON=bench.json make bench-quick.
# BENCH_RUNS=N runs `loadtest bench` N times on the one stack (each run on fixtures of its own), then
# prints each figure's range over the runs and how many met their target (loadtest bench-summary);
# with BENCH_JSON, run K's report goes to <path without .json>-K.json (BENCH_RUNS=1 writes BENCH_JSON
# itself), without it to the stack's log directory; BENCH_HTML is the last run's page. The exit status
# is the worst run's.
# Ports: BENCH_ORDERS_PORT, BENCH_PAYMENTS_PORT, BENCH_POINTS_PORT (8080-8082).
set -uo pipefail
cd "$(dirname "$0")/.."
kind=bench
duration="${BENCH_DURATION:-3s}"
html="${BENCH_HTML:-bench.html}"
runs="${BENCH_RUNS:-1}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "BENCH_RUNS must be a whole number >= 1 without leading zeros, got '$runs'" >&2
  exit 2
fi
source scripts/stack.sh

if [ "$runs" = 1 ]; then
  out=(--html "$html")
  if [ -n "${BENCH_JSON:-}" ]; then out+=(--json-file "$BENCH_JSON"); fi
  echo
  echo "== loadtest bench --duration $duration ${out[*]} $*"
  "$bin/loadtest" bench --duration "$duration" "${out[@]}" --points-url "$POINTS_URL" "$@"
  rc=$?
  echo "== bench exit $rc"
  exit "$rc"
fi

# Several runs: the reports go to BENCH_JSON-derived names, or to the stack's log directory.
base="${BENCH_JSON:+${BENCH_JSON%.json}}"
base="${base:-$logs/bench}"
rc=0
files=()
for k in $(seq 1 "$runs"); do
  out=(--html "$html" --json-file "$base-$k.json")
  echo
  echo "== run $k of $runs: loadtest bench --duration $duration ${out[*]} $*"
  "$bin/loadtest" bench --duration "$duration" "${out[@]}" --points-url "$POINTS_URL" "$@"
  r=$?
  echo "== bench exit $r"
  [ "$r" -gt "$rc" ] && rc=$r
  [ -s "$base-$k.json" ] && files+=("$base-$k.json")
done
echo
echo "== $runs runs (reports: ${files[*]})"
if [ "${#files[@]}" -gt 0 ]; then
  "$bin/loadtest" bench-summary "${files[@]}"
  r=$?
  [ "$r" -gt "$rc" ] && rc=$r
fi
exit "$rc"
