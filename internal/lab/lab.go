// Package lab reproduces the seed failures of DESIGN.md's lab table: each scenario runs once against the
// deliberately unsafe variant and once against the guarded one, and reports what it measured. Unsafe
// variants exist only in lab mode (ORDERS_LAB=true); they sit beside their guarded twins in the code
// (e.g. internal/callback/callback_unsafe.go beside callback.go).
//
// A scenario sets up its own data (a fresh lab user and product per side) and removes it afterwards, so
// the lab can run against a shared demo database; with Env.Keep it leaves the rows for inspection. A
// side's user is named "lab-<scenario>-<side>-<hex>" (e.g. lab-S1-guarded-3f2a9c0d1e2b4a5f), so a query
// of its own finds that side's orders, stock, ledger, keys and callbacks by the user's name.
package lab

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
)

// Env is what scenarios run against: running services plus direct access to the stores, for setup and
// for checking invariants on the rows themselves rather than on the answers alone.
type Env struct {
	OrdersURL   string // orders with ORDERS_LAB=true
	PaymentsURL string // payments-mock; its admin routes must be reachable (loopback or AdminToken)
	AdminToken  string // payments-mock ADMIN_TOKEN, if set
	DB          *gorm.DB
	Redis       *redis.Client
	RedisPrefix string // the REDIS_KEY_PREFIX orders and points-consumer use
	AMQPURL     string
	AMQPPrefix  string // the AMQP_NAME_PREFIX orders and points-consumer use
	DatabaseURL string // for scenarios that start their own in-process services
	RedisURL    string
	Secret      []byte // PAYMENT_WEBHOOK_SECRET
	HTTP        *http.Client
	Log         *slog.Logger
	Seed        uint64
	// Quiet is how long to wait for asynchronous effects (callbacks, outbox, consumer) to settle.
	Quiet time.Duration
	// Keep, when true, makes Fixture.Close leave a scenario's rows in place (its user, products, orders,
	// idempotency keys, callbacks, outbox rows, refunds, ledger, coupons), so that they can be inspected
	// afterwards: by a test's own queries, or by a trainer with psql, who finds a side's rows by its user's
	// name (users.name LIKE 'lab-S1-guarded-%'). The lab's own numbers are read before Close and do not
	// change. Redis keys and broker objects a scenario made for itself are removed either way.
	Keep bool
}

// Side is one half of a scenario's result. Measured holds the numbers behind the verdict.
type Side struct {
	Measured map[string]int64 `json:"measured"`
	Detail   string           `json:"detail"`
}

// Unsafe is the unsafe half: Reproduced says the failure showed. NoTwin marks a scenario that has no
// unsafe variant at all (S9: Redis is an efficiency layer, so there is no unguarded handler to run
// without it): nothing ran on that side, Reproduced stays false, and the verdict rests on the guarded
// side alone. It is a state of its own rather than a Reproduced set to true, so that the report can say
// "no twin" instead of claiming a failure it never showed.
type Unsafe struct {
	Reproduced bool `json:"reproduced"`
	NoTwin     bool `json:"no_twin,omitempty"`
	Side
}

// Guarded is the guarded half: OK says every invariant held.
type Guarded struct {
	OK bool `json:"ok"`
	Side
}

// Result is one scenario's line of the report.
type Result struct {
	ID      string  `json:"id"`
	Title   string  `json:"title"`
	Unsafe  Unsafe  `json:"unsafe"`
	Guarded Guarded `json:"guarded"`
	Error   string  `json:"error"` // "" when the scenario ran; always present, as docs/design.md lists it
	Seconds float64 `json:"seconds"`
}

// Passed: the unsafe side reproduced the failure (or the scenario has no unsafe twin) and the guarded
// side held.
func (r Result) Passed() bool {
	return r.Error == "" && (r.Unsafe.Reproduced || r.Unsafe.NoTwin) && r.Guarded.OK
}

// Scenario is one row of the lab table.
type Scenario struct {
	ID      string
	Title   string
	Unsafe  string // the failure the unsafe variant shows
	Guarded string // what the guard guarantees
	// Run measures both sides. A scenario without an unsafe variant (S9) reports Unsafe.NoTwin.
	Run func(ctx context.Context, env *Env) (Unsafe, Guarded, error)
}

// Scenarios lists the lab table of DESIGN.md, in order.
func Scenarios() []Scenario {
	return []Scenario{
		{"S1", "triple payment callback, in parallel (the incident); and forged copies of it", "stock -3q, points +3x", "stock -q, points +x; each forged copy 401, nothing applied", runS1},
		{"S2", "double submit / client retry of create order", "two orders", "one order, replayed response", runS2},
		{"S3", "idempotency row inserted, then the business step fails (no shared tx)", "retry blocked forever", "rolled back; retry succeeds", runS3},
		{"S4", "form token deleted before the business step, then a failure", "user can never submit", "retry succeeds once", runS4},
		{"S5", "lock expires during a slow DB step (flash sale)", "oversell, stock < 0", "stock never < 0", runS5},
		{"S6", "consumer crashes after crediting, before ack; redelivery", "points twice", "points once", runS6},
		{"S7", "pay RPC succeeded, caller crashed before recording it", "second charge on retry", "sweeper finds the payment; one charge", runS7},
		{"S8", "sweeper and live retry race; stale holder writes late", "newer result overwritten", "stale write rejected by fence", runS8},
		{"S9", "Redis down during a callback storm", "(n/a)", "no duplicate effects; degraded latency", runS9},
		{"S10", "same key, different payload", "second payload silently replays", "422", runS10},
		{"S11", "SETNX claim, then crash before commit (claim-first dedup)", "message dropped, points lost", "lease expires; credited once", runS11},
		{"S12", "a refund delivered before the SUCCESS it refunds", "order ends PAID, stock taken, points credited, though the platform refunded it", "order REFUNDED; stock and points back once", runS12},
	}
}

// Select returns the scenarios named by ids ("all" or none: every one), in table order.
func Select(ids []string) ([]Scenario, error) {
	all := Scenarios()
	if len(ids) == 0 || (len(ids) == 1 && strings.EqualFold(ids[0], "all")) {
		return all, nil
	}
	var out []Scenario
	for _, id := range ids {
		if strings.EqualFold(id, "all") {
			return nil, fmt.Errorf("all runs every scenario: give it alone, or only scenario names (got %s)", strings.Join(ids, " "))
		}
		i := slices.IndexFunc(all, func(s Scenario) bool { return strings.EqualFold(s.ID, id) })
		if i < 0 && strings.HasPrefix(id, "-") {
			// `loadtest replay FILE --unsafe` takes its flag after the file; lab's flag parser stops
			// at the first scenario name (a newcomer's, 2026-12-06).
			return nil, fmt.Errorf("unknown scenario %q: flags come before the scenario names (loadtest lab %s %s)",
				id, id, strings.Join(slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == id }), " "))
		}
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q (want all or S1..S12)", id)
		}
		if slices.ContainsFunc(out, func(s Scenario) bool { return s.ID == all[i].ID }) {
			return nil, fmt.Errorf("scenario %s is named twice", all[i].ID)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// Run runs each scenario in turn and returns their results. progress, if not nil, is told about each.
func Run(ctx context.Context, env *Env, scenarios []Scenario, progress func(Result)) []Result {
	var results []Result
	for _, s := range scenarios {
		start := time.Now()
		// Each scenario starts from a calm platform: chaos set by hand or from /lab would otherwise
		// fail it for reasons of its own (a reset_rate breaks S5's payment calls).
		var u Unsafe
		var g Guarded
		err := env.CalmChaos(ctx)
		if err == nil {
			u, g, err = s.Run(ctx, env)
		}
		r := Result{ID: s.ID, Title: s.Title, Unsafe: u, Guarded: g, Seconds: time.Since(start).Seconds()}
		if err != nil {
			r.Error = err.Error()
		}
		if progress != nil {
			progress(r)
		}
		results = append(results, r)
	}
	return results
}
