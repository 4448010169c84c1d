package soak

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Fault is one injected failure: at At into the run, break Kind, wait Pause, heal. The soak then
// measures the shop's recovery from it (recovery.go) and fills the fields below Error.
type Fault struct {
	At     time.Duration `json:"-"`
	Pause  time.Duration `json:"-"`
	AtS    float64       `json:"at_s"`
	Kind   string        `json:"kind"`
	PauseS float64       `json:"pause_s"`
	Error  string        `json:"error,omitempty"`

	// Detail is what the injector did (commands, what they answered).
	Detail string `json:"detail,omitempty"`
	// NotInjected says why the fault could not be injected (a missing binary, no private instance);
	// such a fault is listed, never silently skipped.
	NotInjected string `json:"not_injected,omitempty"`

	Recovery *Recovery `json:"recovery,omitempty"`
}

// ErrNotInjected wraps the reason a fault could not be injected.
var ErrNotInjected = errors.New("not injected")

// Injector is one family of faults. The soak draws every injector's plan from the run's RNG before the
// run starts, fires each fault at its moment (one at a time), and calls Heal when the faults stop.
// Process faults (this file) and infra faults (infrafaults.go: PostgreSQL, Redis, RabbitMQ) are the
// two families.
type Injector interface {
	// Name is the family (SOAK_FAULTS value), e.g. "process".
	Name() string
	// Plan draws this family's faults for a run of length d. It must use r alone, so that a seed gives
	// the same plan.
	Plan(r *mrand.Rand, d time.Duration) []Fault
	// Inject breaks, waits f.Pause, and heals. It returns once healed (or with the error that kept it
	// from healing; an error wrapping ErrNotInjected when it could not break anything). It may set
	// f.Detail.
	Inject(ctx context.Context, f *Fault) error
	// Heal makes sure nothing this family breaks is still broken.
	Heal(ctx context.Context) error
}

// The process fault kinds.
const (
	KillOrders = "kill-orders"
	KillPoints = "kill-points-consumer"
	KillBoth   = "kill-both"
)

// processFaults kills orders and/or points-consumer with SIGKILL and restarts them (same binary, env
// and address) after a seeded pause. payments-mock is never killed: its memory is the platform's truth.
type processFaults struct {
	orders, points *proc
}

func (processFaults) Name() string { return FaultsProcess }

// Plan draws about one fault per 15 s of run (at least 2), at moments within 5%..85% of the run,
// with pauses of 0.2..2 s.
func (processFaults) Plan(r *mrand.Rand, d time.Duration) []Fault {
	n := max(2, int(d/(15*time.Second))) + r.IntN(2)
	out := make([]Fault, 0, n)
	for range n {
		f := Fault{At: between(r, d/20, d*85/100), Pause: between(r, 200*time.Millisecond, 2*time.Second)}
		switch k := r.IntN(20); {
		case k < 9:
			f.Kind = KillOrders
		case k < 16:
			f.Kind = KillPoints
		default:
			f.Kind = KillBoth
		}
		f.AtS, f.PauseS = round2(f.At.Seconds()), round2(f.Pause.Seconds())
		out = append(out, f)
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return int(a.At - b.At) })
	return out
}

func (p processFaults) targets(kind string) []*proc {
	switch kind {
	case KillOrders:
		return []*proc{p.orders}
	case KillPoints:
		return []*proc{p.points}
	case KillBoth:
		return []*proc{p.orders, p.points}
	}
	return nil
}

func (p processFaults) Inject(ctx context.Context, f *Fault) error {
	ts := p.targets(f.Kind)
	if ts == nil {
		return fmt.Errorf("unknown process fault %q", f.Kind)
	}
	var errs []error
	var names []string
	for _, t := range ts {
		names = append(names, t.name)
		if err := t.kill(); err != nil {
			errs = append(errs, err)
		}
	}
	// The pause is not cut short by ctx: the processes must come back in any case.
	time.Sleep(f.Pause)
	for _, t := range ts {
		if err := t.start(context.WithoutCancel(ctx)); err != nil {
			errs = append(errs, fmt.Errorf("restart after %s: %w", f.Kind, err))
		}
	}
	f.Detail = fmt.Sprintf("kill -9 %s, %.1fs later restarted (same binary, env, address) and /readyz 200",
		strings.Join(names, " and "), f.Pause.Seconds())
	return errors.Join(errs...)
}

func (p processFaults) Heal(ctx context.Context) error {
	var errs []error
	for _, t := range []*proc{p.orders, p.points} {
		if !t.running() {
			if err := t.start(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
