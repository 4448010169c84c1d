# idemshop: `make help` lists the targets.
GO      ?= go
BIN     ?= bin
PKGS    ?= ./...
# The whole suite runs with the race detector; keep it well under CI's 10-minute budget. -vet=off:
# `make test` has already run the whole of `go vet ./...` in lint, of which go test's own vet step is a
# subset (about 26 CPU-s on a cold cache, 2026-12-02).
TESTFLAGS ?= -race -count=1 -timeout 8m -vet=off
# -trimpath for every go command make runs (and the ones it starts: mutants, soak, testenv.Build): the
# build cache's keys then leave out the checkout's directory, so a clean clone (CI's) reuses what an
# earlier checkout of the same code compiled instead of compiling the module's packages again.
# `.ci/run` in a new clone after another clone's run: 11m18s without it, 5m56s with it (2026-12-03/04).
# A fresh cache gains nothing (16m04s, most of it compiling).
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

.DEFAULT_GOAL := help
.PHONY: help demo build test test-short lint fmt vet staticcheck mutants-check bench bench-quick migrate run-orders

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-20s %s\n", $$1, $$2}'

demo: ## build, start the three binaries in lab mode on a fresh database, run loadtest incident, replay, lab all
	BIN=$(BIN) ./scripts/demo.sh

build: ## build every binary (cmd/* and loadtest) into ./bin
	$(GO) build -o $(BIN)/ ./cmd/... ./loadtest

# The suite's longest test packages first (go test starts its packages in the order named, -p at a
# time, and drops the second naming): the last of ./... was loadtest, whose 50 s ran mostly alone.
# 3m46s against 4m08s warm, 2026-12-07. A name that no longer exists fails the run: keep it current.
LONGEST_FIRST := ./internal/ordersapp ./loadtest ./internal/points ./cmd/orders ./internal/outbox ./internal/lab

test: lint ## the whole suite (what CI runs): lint, every test with -race on real services, then mutants beside soak-ci
	$(GO) test $(TESTFLAGS) $(if $(filter ./...,$(PKGS)),$(LONGEST_FIRST)) $(PKGS)
	$(MAKE) -j 2 --output-sync=target mutants soak-ci

test-short: ## unit tests only; tests needing PostgreSQL, Redis or RabbitMQ skip
	$(GO) test -short -count=1 $(PKGS)

lint: fmt vet staticcheck mutants-check ## gofmt, go vet, staticcheck, and every mutant still applies

mutants-check: ## every curated mutant's snippet still occurs exactly once (no services, a second)
	$(GO) run ./cmd/mutants -check

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(GO) tool staticcheck $(PKGS)

bench: ## Go benchmarks of the guarded paths against their baselines (same run)
	$(GO) test -run '^$$' -bench . -benchtime 3s -count 1 ./internal/ordersapp/

# Guard mutants (docs/testing.md): each breaks one guard (the mutated file is swapped in with
# `go test -overlay`; the tree is never written), and the tests named for it must fail. Part of
# `make test`, after the suite; without -race, so they reuse the build cache `go vet` filled.
.PHONY: mutants
mutants: ## break each guard on purpose; its tests must fail (ONLY=<id>,<id>; the list: internal/mutants)
	$(GO) run ./cmd/mutants $(if $(ONLY),-only $(ONLY))

# The advisory report: gremlins flips every operator it finds in covered code (GREMLINS_PKGS; reports
# in bin/gremlins). Not part of `make test`, and never red: a LIVED mutant is a question to look at.
.PHONY: mutants-advisory
mutants-advisory: ## gremlins over the pattern packages, an advisory report beside `make mutants` (slow)
	./scripts/gremlins.sh

.PHONY: soak
soak: ## soak the shop: chaos + kill -9 on a fresh database, then check convergence (SOAK_SEED, SOAK_DURATION, SOAK_FAULTS)
	BIN=$(BIN) ./scripts/soak.sh

# The CI soak (the last step of `make test`): every fault family on a fixed seed for 60 s. The infra
# faults hit a private PostgreSQL, Redis and RabbitMQ that the soak starts and removes itself; one that
# cannot be injected fails the run (SOAK_INFRA_REQUIRED). 60 s, not 30: each fault waits for the
# recovery of the one before, and 30 s (even 45 s) left some of the 7-10 faults of `all` unfired.
SOAK_CI_SEED ?= 20261130
.PHONY: soak-ci
soak-ci: ## CI soak: SOAK_FAULTS=all (kill -9 + private PostgreSQL/Redis/RabbitMQ faults), fixed seed, 60 s
	SOAK_FAULTS=all SOAK_SEED=$(SOAK_CI_SEED) SOAK_DURATION=60s SOAK_GRACE=15s SOAK_CONVERGE_TIMEOUT=90s \
	SOAK_INFRA_REQUIRED=true BIN=$(BIN) ./scripts/soak.sh

bench-quick: ## start the stack on a fresh database, run loadtest bench (3s per side, bench.html), stop it
	BIN=$(BIN) ./scripts/bench.sh

migrate: ## create the database if missing and apply migrations (DATABASE_URL)
	$(GO) run ./cmd/orders migrate

run-orders: ## run the orders API on :8080 against the local services
	$(GO) run ./cmd/orders

.PHONY: run-payments-mock
run-payments-mock: ## run the flaky payment platform on :8081 (chaos via CHAOS_* env, see docs/payments-mock.md)
	$(GO) run ./cmd/payments-mock

.PHONY: run-points-consumer
run-points-consumer: ## run the points consumer (health and metrics on :8082)
	$(GO) run ./cmd/points-consumer
