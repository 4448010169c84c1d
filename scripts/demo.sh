#!/usr/bin/env bash
# make demo: build the three binaries and loadtest, start them against the local PostgreSQL, Redis and
# RabbitMQ with a fresh database in lab mode, run `loadtest incident`, the incident's recording
# (`loadtest replay`, guarded) and `loadtest lab all`, print the reports, stop everything, and exit with
# their status (0 only if all passed).
# Ports: DEMO_ORDERS_PORT, DEMO_PAYMENTS_PORT, DEMO_POINTS_PORT (8080-8082).
set -uo pipefail
cd "$(dirname "$0")/.."
kind=demo
export SWEEP_INTERVAL="${SWEEP_INTERVAL:-500ms}"
source scripts/stack.sh

echo
echo "== loadtest incident"
"$bin/loadtest" incident
incident=$?
echo
echo "== loadtest replay loadtest/replays/incident-triple-callback.jsonl"
"$bin/loadtest" replay loadtest/replays/incident-triple-callback.jsonl
replayrc=$?
echo
echo "== loadtest lab all"
"$bin/loadtest" lab all
labrc=$?
echo
echo "== incident exit $incident, replay exit $replayrc, lab exit $labrc"
[ "$incident" -eq 0 ] && [ "$replayrc" -eq 0 ] && [ "$labrc" -eq 0 ]
