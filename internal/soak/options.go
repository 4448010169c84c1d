// Package soak is `loadtest soak`: it starts the shop (payments-mock, orders, points-consumer) on a
// database and broker/Redis names of its own, drives it with seeded virtual clients while it injects
// faults (payments-mock chaos, kill -9 of orders and points-consumer), stops the faults, waits for
// quiescence and then checks that the shop converged to the payment platform's own records
// (docs/design.md, "Convergence"; docs/reliability.md). Every random choice descends from one seeded PCG,
// and the seed is printed, so a failing run can be replayed with SOAK_SEED.
package soak

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Fault families (SOAK_FAULTS).
const (
	FaultsNone    = "none"    // no process or infra faults (chaos still applies unless SOAK_CHAOS=false)
	FaultsProcess = "process" // kill -9 and restart orders and points-consumer
	FaultsInfra   = "infra"   // restart / disconnect the soak's private PostgreSQL, Redis, RabbitMQ
	FaultsAll     = "all"     // process + infra
)

// ParseFaults validates SOAK_FAULTS.
func ParseFaults(s string) (string, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	switch s {
	case FaultsNone, FaultsProcess, FaultsInfra, FaultsAll:
		return s, nil
	}
	return s, fmt.Errorf("SOAK_FAULTS must be none, process, infra or all, got %q", s)
}

// ParseSeed reads SOAK_SEED: an unsigned 64-bit integer, or empty for a random seed (random=true).
func ParseSeed(s string) (seed uint64, random bool, err error) {
	if strings.TrimSpace(s) == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return binary.LittleEndian.Uint64(b[:]), true, nil
	}
	seed, err = strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("SOAK_SEED must be an unsigned 64-bit integer, got %q", s)
	}
	return seed, false, nil
}

// Options is one soak run, resolved from the environment by loadtest (loadtest/soak.go).
type Options struct {
	Seed     uint64
	Duration time.Duration // clients create orders and faults fire for this long
	Grace    time.Duration // a client may go on retrying its current request this long after Duration
	Converge time.Duration // bound of the wait for quiescence after the faults stop
	Faults   string        // FaultsNone, FaultsProcess, FaultsInfra or FaultsAll
	Chaos    bool          // set payments-mock chaos (false: calm all run long)
	// RequireInfra makes a fault that cannot be injected (no private instance of its service) a
	// set-up error instead of a line of the report.
	RequireInfra bool

	Bin           string // directory of the orders, payments-mock and points-consumer binaries
	RunID         string // names the database (idemshop_<run id>) and the Redis/AMQP prefixes ("<run id>:")
	Logs          string // directory for the services' logs ("" = a temporary one)
	ChildLogLevel string

	PostgresURL string // any database on the server; the soak uses idemshop_<run id> on the same server
	RedisURL    string
	AMQPURL     string
	Secret      string // PAYMENT_WEBHOOK_SECRET, shared by orders and payments-mock
	AdminToken  string // payments-mock ADMIN_TOKEN ("" = loopback admin)
	HTTPTimeout time.Duration

	Log      *slog.Logger
	Progress func(string) // one-line progress; may be nil

	// private: the services the soak started a private instance of (infra faults); the stack's
	// cleanup leaves those to the instance's removal.
	private map[string]bool
}

// pcgStream is the fixed second PCG word of every soak RNG; the seed alone picks the sequence.
const pcgStream = 0x736f616b5f726e67 // "soak_rng"

// newRNG is the run's one RNG, seeded by SOAK_SEED.
func newRNG(seed uint64) *mrand.Rand { return mrand.New(mrand.NewPCG(seed, pcgStream)) }

// derive draws the seed of a child stream from r. Each client gets a stream of its own, drawn from the
// run's RNG before anything runs, so its choices do not depend on how the scheduler interleaves clients.
func derive(r *mrand.Rand) *mrand.Rand { return mrand.New(mrand.NewPCG(r.Uint64(), r.Uint64())) }

// between draws a duration uniformly in [lo, hi].
func between(r *mrand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}
