#!/usr/bin/env bash
# The advisory mutation report (docs/testing.md): gremlins, a general-purpose mutation tool, over the
# pattern packages. Unlike `make mutants` it knows nothing of our guards: it flips every comparison,
# boundary and arithmetic operator it finds in code the package's own tests cover, and reports how
# many of those mutants the package's tests kill. A LIVED mutant is a question ("does a test need to
# notice this?"), not a failure: this script always exits 0 once the report is written.
#
#   scripts/gremlins.sh                               # the default packages (about half an hour)
#   GREMLINS_PKGS="./internal/paysig" scripts/gremlins.sh
#
# It needs the services of `make test` (the packages' tests use PostgreSQL, Redis and RabbitMQ).
set -euo pipefail
cd "$(dirname "$0")/.."

GREMLINS="${GREMLINS:-github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0}"
PKGS="${GREMLINS_PKGS:-./internal/paysig ./internal/orders ./internal/formtoken ./internal/lock ./internal/idempotency}"
OUT="${GREMLINS_OUT:-bin/gremlins}"
mkdir -p "$OUT"

for pkg in $PKGS; do
	name="$(basename "$pkg")"
	echo "== gremlins: $pkg"
	# One worker: the tests share one PostgreSQL and two cores. The timeout coefficient is generous
	# because the packages' tests wait on real services.
	go run "$GREMLINS" unleash --workers 1 --timeout-coefficient 10 --silent \
		-o "$OUT/$name.json" "$pkg" || echo "gremlins: $pkg: the run itself failed (exit $?)"
done

# One line per package: mutants killed of those the tests cover, and the lived ones by position.
python3 - "$OUT" $PKGS <<'PY'
import json, os, sys
out, pkgs = sys.argv[1], sys.argv[2:]
print(f"\n{'PACKAGE':<24} {'KILLED':>6} {'LIVED':>6} {'NOT COV':>7} {'EFFICACY':>8}")
for pkg in pkgs:
    path = os.path.join(out, os.path.basename(pkg) + ".json")
    if not os.path.exists(path):
        print(f"{pkg:<24} (no report)")
        continue
    d = json.load(open(path))
    print(f"{pkg:<24} {d['mutants_killed']:>6} {d['mutants_lived']:>6} {d['mutants_not_covered']:>7} {d['test_efficacy']:>7.1f}%")
    for f in d.get("files", []):
        for m in f["mutations"]:
            if m["status"] == "LIVED":
                print(f"    lived: {m['type']:<22} {f['file_name']}:{m['line']}:{m['column']}")
PY
echo "reports: $OUT/*.json"
