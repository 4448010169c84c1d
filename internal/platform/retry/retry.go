// Package retry holds the waiting helpers the long-running processes share: a sleep that ends with
// its context, the reconnect loop of a broker session, and the start-up wait for a dependency.
package retry

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Sleep waits d, or less if ctx ends first. It reports whether the whole d passed (false: ctx ended).
// A d <= 0 returns at once, true unless ctx has already ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Exponential is the backoff of every wait here: from its InitialInterval, doubling, to MaxInterval,
// each wait jittered by 30% and never longer than MaxInterval. backoff's ExponentialBackOff jitters
// after its cap, so a 30 s AMQP_RECONNECT_MAX waited up to 39 s (a helper saw 36 s, 2026-12-07). A wait
// the jitter would take past the cap is the cap: replicas that lost the broker together stay apart by
// the jitter of their earlier waits.
type Exponential struct {
	backoff.ExponentialBackOff
}

// NewExponential returns an Exponential from lo to hi, reset.
func NewExponential(lo, hi time.Duration) *Exponential {
	b := &Exponential{backoff.ExponentialBackOff{InitialInterval: lo, MaxInterval: hi, Multiplier: 2, RandomizationFactor: 0.3}}
	b.Reset()
	return b
}

// NextBackOff is the next wait, at most MaxInterval.
func (b *Exponential) NextBackOff() time.Duration {
	return min(b.ExponentialBackOff.NextBackOff(), b.MaxInterval)
}

// Sessions runs session again and again until ctx ends, waiting an exponential backoff between min and
// max (jittered by 30%, never past max) after each one that ended. A session calls progress once it has proven healthy
// (connected and working), which resets the backoff: the next outage starts again from min. Sessions
// never spins on a session that fails at once, and returns when ctx is done.
func Sessions(ctx context.Context, logger *slog.Logger, min, max time.Duration,
	session func(ctx context.Context, progress func()) error) {
	bo := NewExponential(min, max)
	for ctx.Err() == nil {
		err := session(ctx, bo.Reset)
		if ctx.Err() != nil {
			return
		}
		wait := bo.NextBackOff()
		logger.Warn("session ended; reconnecting", "err", err, "retry_in", wait)
		if !Sleep(ctx, wait) {
			return
		}
	}
}

// Backoff shapes a wait for a dependency: exponential from Min to Max (jittered by 30%), each attempt
// bounded by AttemptTimeout so that a server that accepts and then hangs cannot stall the wait.
type Backoff struct {
	Min, Max, AttemptTimeout time.Duration
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks an error that waiting cannot fix (a malformed URL, a refused password): Until
// returns it at once instead of trying again.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err: err}
}

// Until calls attempt until it succeeds, ctx ends or it fails with a Permanent error, and returns nil,
// ctx's error, or that error (unwrapped). After each failure it calls failed (when non-nil, so a
// readiness endpoint can say what the process waits for), logs one line naming what, the error and the
// next wait (the first at info: a dependency that is still starting is normal; later ones at warn),
// and waits b's backoff.
func Until(ctx context.Context, logger *slog.Logger, what string, b Backoff, failed func(error),
	attempt func(ctx context.Context) error) error {
	bo := NewExponential(b.Min, b.Max)
	start := time.Now()
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, b.AttemptTimeout)
		err := attempt(actx)
		cancel()
		if err == nil {
			if n > 1 {
				logger.Info("dependency is up", "dependency", what, "attempts", n, "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
		if failed != nil {
			failed(err)
		}
		wait := bo.NextBackOff()
		level := slog.LevelWarn
		if n == 1 {
			level = slog.LevelInfo
		}
		logger.Log(ctx, level, "waiting for a dependency", "dependency", what, "attempt", n, "err", err, "retry_in", wait)
		if !Sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// Every calls fn every interval until ctx is done; the first call is one interval after the start. A
// call that outlasts the interval delays the next one (the ticker drops the ticks it missed), so two
// calls never overlap.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
