// Package retry holds the two waiting helpers the long-running workers share: a sleep that ends with
// its context, and the reconnect loop of a broker session.
package retry

import (
	"context"
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

// Sessions runs session again and again until ctx ends, waiting an exponential backoff between min and
// max (jittered by 30%) after each one that ended. A session calls progress once it has proven healthy
// (connected and working), which resets the backoff: the next outage starts again from min. Sessions
// never spins on a session that fails at once, and returns when ctx is done.
func Sessions(ctx context.Context, logger *slog.Logger, min, max time.Duration,
	session func(ctx context.Context, progress func()) error) {
	bo := &backoff.ExponentialBackOff{InitialInterval: min, MaxInterval: max, Multiplier: 2, RandomizationFactor: 0.3}
	bo.Reset()
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
