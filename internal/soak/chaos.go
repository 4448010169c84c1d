package soak

import (
	"context"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ChaosSettings is one setting of payments-mock's chaos (PUT /admin/chaos).
type ChaosSettings struct {
	Duplicates        int     `json:"duplicates"`
	Parallel          bool    `json:"parallel"`
	JitterMS          int64   `json:"jitter_ms"`
	Reorder           bool    `json:"reorder"`
	AckLossRate       float64 `json:"ack_loss_rate"`
	CreateTimeoutRate float64 `json:"create_timeout_rate"`
	ErrorRate         float64 `json:"error_rate"`
	ResetRate         float64 `json:"reset_rate"`
	DelaySuccessMS    int64   `json:"delay_success_ms"`
	Seed              uint64  `json:"seed"`
}

// calmChaos is "no chaos": one copy of each callback, nothing lost, nothing failed. The seed is kept.
var calmChaos = ChaosSettings{Duplicates: 1, Parallel: true}

// body is the PUT /admin/chaos body. Without withSeed the platform keeps its RNG where it is.
func (c ChaosSettings) body(withSeed bool) map[string]any {
	m := map[string]any{
		"duplicates": c.Duplicates, "parallel": c.Parallel, "jitter_ms": c.JitterMS, "reorder": c.Reorder,
		"ack_loss_rate": c.AckLossRate, "create_timeout_rate": c.CreateTimeoutRate, "error_rate": c.ErrorRate,
		"reset_rate": c.ResetRate, "delay_success_ms": c.DelaySuccessMS,
	}
	if withSeed {
		m["seed"] = c.Seed
	}
	return m
}

// String is the compact form of the report.
func (c ChaosSettings) String() string {
	if c == (ChaosSettings{Duplicates: 1, Parallel: true, Seed: c.Seed}) {
		return "calm"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "dup=%d", c.Duplicates)
	if c.Duplicates > 1 && c.Parallel {
		b.WriteString(" parallel")
	}
	if c.JitterMS > 0 {
		fmt.Fprintf(&b, " jitter=%dms", c.JitterMS)
	}
	if c.Reorder {
		b.WriteString(" reorder")
	}
	for _, r := range []struct {
		n string
		v float64
	}{{"ack_loss", c.AckLossRate}, {"create_timeout", c.CreateTimeoutRate}, {"error", c.ErrorRate}, {"reset", c.ResetRate}} {
		if r.v > 0 {
			fmt.Fprintf(&b, " %s=%.2f", r.n, r.v)
		}
	}
	if c.DelaySuccessMS > 0 {
		fmt.Fprintf(&b, " delay_success=%dms", c.DelaySuccessMS)
	}
	return b.String()
}

// ChaosChange is one chaos setting applied during the run.
type ChaosChange struct {
	AtSeconds float64       `json:"at_s"`
	Settings  ChaosSettings `json:"settings"`
	Error     string        `json:"error,omitempty"`
}

type chaosStep struct {
	at time.Duration
	s  ChaosSettings
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// drawChaos draws one chaos setting within the soak's bounds.
func drawChaos(r *mrand.Rand) ChaosSettings {
	return ChaosSettings{
		Duplicates:        1 + r.IntN(3),
		Parallel:          r.IntN(2) == 0,
		JitterMS:          r.Int64N(201),
		Reorder:           r.IntN(2) == 0,
		AckLossRate:       round2(r.Float64() * 0.3),
		CreateTimeoutRate: round2(r.Float64() * 0.2),
		ErrorRate:         round2(r.Float64() * 0.2),
		ResetRate:         round2(r.Float64() * 0.2),
		DelaySuccessMS:    r.Int64N(501),
		Seed:              r.Uint64(),
	}
}

// planChaos draws the chaos of the run: one setting at the start and 2..4 more at seeded moments
// within the first 80% of d.
func planChaos(r *mrand.Rand, d time.Duration) []chaosStep {
	steps := []chaosStep{{0, drawChaos(r)}}
	n := 2 + r.IntN(3)
	for range n {
		steps = append(steps, chaosStep{between(r, d/10, d*8/10), drawChaos(r)})
	}
	slices.SortStableFunc(steps, func(a, b chaosStep) int { return int(a.at - b.at) })
	return steps
}

// chaosSetter applies chaos settings to the platform.
type chaosSetter struct {
	p *platform
}

func (cs *chaosSetter) set(ctx context.Context, s ChaosSettings, withSeed bool, at time.Duration) ChaosChange {
	ch := ChaosChange{AtSeconds: round2(at.Seconds()), Settings: s}
	if a := cs.p.putChaos(ctx, s.body(withSeed)); a.err != nil || a.status != http.StatusOK {
		ch.Error = "PUT /admin/chaos: " + a.brief()
	}
	return ch
}
