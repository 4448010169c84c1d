package paymock

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"idemshop/internal/platform/problem"
)

// Bounds of the chaos settings; they keep a typo from launching a callback storm.
const (
	MaxDuplicates     = 20
	MaxJitterMS       = 60_000
	MaxDelaySuccessMS = 60_000
)

// Chaos is the misbehaviour of the platform, read and set through GET/PUT /admin/chaos.
//
//   - Duplicates (1..20): every event is sent this many times, as separate deliveries with the same
//     event_id and body; Parallel sends them at once, otherwise one after the other finishes.
//   - JitterMS (0..60000): each attempt waits a random 0..JitterMS ms more before it is sent.
//   - Reorder: after a SUCCESS event has been delivered, a stale FAILED event for the same payment (a new
//     event_id, occurred_at = the payment's created_at) is delivered too.
//   - AckLossRate (0..1): a successful answer is treated as lost with this probability, so the delivery
//     is retried although the receiver applied it.
//   - CreateTimeoutRate (0..1): POST /v1/payments commits, then answers a timeout (see Config).
//   - ResetRate (0..1): POST /v1/payments commits, then closes the connection without any answer.
//   - ErrorRate (0..1): POST /v1/payments answers 503 chaos_error and stores nothing.
//   - DelaySuccessMS (0..60000): each delivery of a SUCCESS event from a settlement waits this long
//     before its first attempt, so that a refund made meanwhile is delivered first. A fixed delay, no draw.
//   - Seed: seeds the one RNG every decision above draws from.
//
// One create draws for ErrorRate, CreateTimeoutRate and ResetRate, and the first that hits wins in that
// order: a create that failed stored nothing, so it cannot also time out or reset.
type Chaos struct {
	Duplicates        int     `json:"duplicates"`
	Parallel          bool    `json:"parallel"`
	JitterMS          int64   `json:"jitter_ms"`
	Reorder           bool    `json:"reorder"`
	AckLossRate       float64 `json:"ack_loss_rate"`
	CreateTimeoutRate float64 `json:"create_timeout_rate"`
	ResetRate         float64 `json:"reset_rate"`
	ErrorRate         float64 `json:"error_rate"`
	DelaySuccessMS    int64   `json:"delay_success_ms"`
	Seed              uint64  `json:"seed"`
}

// Validate returns a KindInvalid *problem.Error naming the first field out of range.
func (c Chaos) Validate() error {
	switch {
	case c.Duplicates < 1 || c.Duplicates > MaxDuplicates:
		return problem.Newf(problem.KindInvalid, ErrValidation.Code, "duplicates must be 1..%d", MaxDuplicates)
	case c.JitterMS < 0 || c.JitterMS > MaxJitterMS:
		return problem.Newf(problem.KindInvalid, ErrValidation.Code, "jitter_ms must be 0..%d", MaxJitterMS)
	case c.DelaySuccessMS < 0 || c.DelaySuccessMS > MaxDelaySuccessMS:
		return problem.Newf(problem.KindInvalid, ErrValidation.Code, "delay_success_ms must be 0..%d", MaxDelaySuccessMS)
	}
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"ack_loss_rate", c.AckLossRate}, {"create_timeout_rate", c.CreateTimeoutRate},
		{"reset_rate", c.ResetRate}, {"error_rate", c.ErrorRate},
	} {
		// The negated form also refuses NaN, which fails every comparison.
		if !(r.v >= 0 && r.v <= 1) {
			return problem.Newf(problem.KindInvalid, ErrValidation.Code, "%s must be 0..1", r.name)
		}
	}
	return nil
}

// chaosPatch is the PUT /admin/chaos body: omitted fields keep their value. A seed that is present
// re-seeds the RNG even when it equals the current one, so a run can be restarted from the top.
type chaosPatch struct {
	Duplicates        *int     `json:"duplicates"`
	Parallel          *bool    `json:"parallel"`
	JitterMS          *int64   `json:"jitter_ms"`
	Reorder           *bool    `json:"reorder"`
	AckLossRate       *float64 `json:"ack_loss_rate"`
	CreateTimeoutRate *float64 `json:"create_timeout_rate"`
	ResetRate         *float64 `json:"reset_rate"`
	ErrorRate         *float64 `json:"error_rate"`
	DelaySuccessMS    *int64   `json:"delay_success_ms"`
	Seed              *uint64  `json:"seed"`
}

func (p chaosPatch) applyTo(c Chaos) Chaos {
	set(&c.Duplicates, p.Duplicates)
	set(&c.Parallel, p.Parallel)
	set(&c.JitterMS, p.JitterMS)
	set(&c.Reorder, p.Reorder)
	set(&c.AckLossRate, p.AckLossRate)
	set(&c.CreateTimeoutRate, p.CreateTimeoutRate)
	set(&c.ResetRate, p.ResetRate)
	set(&c.ErrorRate, p.ErrorRate)
	set(&c.DelaySuccessMS, p.DelaySuccessMS)
	set(&c.Seed, p.Seed)
	return c
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// chaosEngine owns the settings and the single RNG. Reproducibility is the point: every decision draws
// from one PCG stream under one mutex, and each decision point draws a fixed number of values whatever
// the settings, so the same seed and the same sequence of calls give the same decisions.
//
// Delivery decisions are drawn when an event is dispatched (in the request that caused it), never inside
// the delivery goroutines, whose interleaving the scheduler decides.
type chaosEngine struct {
	mu  sync.Mutex
	cfg Chaos
	rng *rand.Rand
}

func newRNG(seed uint64) *rand.Rand {
	// The second PCG word is a fixed stream selector; the seed alone picks the sequence.
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

func newChaosEngine(c Chaos) (*chaosEngine, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return &chaosEngine{cfg: c, rng: newRNG(c.Seed)}, nil
}

func (ce *chaosEngine) settings() Chaos {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	return ce.cfg
}

// apply validates and installs a patch; nothing changes when it is invalid.
func (ce *chaosEngine) apply(p chaosPatch) (Chaos, error) {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	next := p.applyTo(ce.cfg)
	if err := next.Validate(); err != nil {
		return ce.cfg, err
	}
	ce.cfg = next
	if p.Seed != nil {
		ce.rng = newRNG(next.Seed)
	}
	return ce.cfg, nil
}

// createFate is what chaos does to one POST /v1/payments.
type createFate int

const (
	createNormal  createFate = iota
	createFail               // 503 chaos_error, nothing stored
	createTimeout            // stored, then a held 504
	createReset              // stored, then the connection is closed without an answer
)

// createDecision draws the fate of one POST /v1/payments. It always draws three values (fail, timeout,
// reset) so that the RNG's position after a create does not depend on the rates or on which one hit.
// Precedence: error first (it stores nothing, so nothing else can follow), then timeout, then reset.
func (ce *chaosEngine) createDecision() createFate {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	f, t, r := ce.rng.Float64(), ce.rng.Float64(), ce.rng.Float64()
	switch {
	case f < ce.cfg.ErrorRate:
		return createFail
	case t < ce.cfg.CreateTimeoutRate:
		return createTimeout
	case r < ce.cfg.ResetRate:
		return createReset
	default:
		return createNormal
	}
}

// copyPlan is the pre-drawn fate of one delivery: per attempt, the extra jitter and whether a
// successful answer is treated as lost.
type copyPlan struct {
	jitter  []time.Duration
	ackLost []bool
}

// dispatchPlan is everything chaos decides about one event when it is dispatched.
type dispatchPlan struct {
	copies       []copyPlan
	parallel     bool
	reorder      bool          // follow a delivered SUCCESS with a stale event
	stale        copyPlan      // the plan of that stale event's single delivery
	delaySuccess time.Duration // the hold of a settled SUCCESS, as configured when it was dispatched
}

// planDispatch draws the plan for one event. copies <= 0 means "the configured duplicates" (a replay
// passes its own count, parallel likewise overrides when non-nil). maxAttempts is per delivery. The
// number of draws depends only on the copy count and maxAttempts, never on the rates.
func (ce *chaosEngine) planDispatch(copies int, parallel *bool, maxAttempts int) dispatchPlan {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	if copies <= 0 {
		copies = ce.cfg.Duplicates
	}
	plan := dispatchPlan{
		parallel: ce.cfg.Parallel, reorder: ce.cfg.Reorder,
		delaySuccess: time.Duration(ce.cfg.DelaySuccessMS) * time.Millisecond,
	}
	if parallel != nil {
		plan.parallel = *parallel
	}
	for range copies {
		plan.copies = append(plan.copies, ce.drawCopyLocked(maxAttempts))
	}
	plan.stale = ce.drawCopyLocked(maxAttempts)
	return plan
}

func (ce *chaosEngine) drawCopyLocked(maxAttempts int) copyPlan {
	cp := copyPlan{jitter: make([]time.Duration, maxAttempts), ackLost: make([]bool, maxAttempts)}
	for i := range maxAttempts {
		j, a := ce.rng.Float64(), ce.rng.Float64()
		cp.jitter[i] = time.Duration(j*float64(ce.cfg.JitterMS+1)) * time.Millisecond
		cp.ackLost[i] = a < ce.cfg.AckLossRate
	}
	return cp
}
