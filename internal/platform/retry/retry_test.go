package retry_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/retry"
)

func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	assert.True(t, retry.Sleep(ctx, time.Millisecond))
	assert.True(t, retry.Sleep(ctx, 0))
	cancel()
	assert.False(t, retry.Sleep(ctx, time.Hour), "a cancelled context ends an hour's sleep at once")
	assert.False(t, retry.Sleep(ctx, 0))
}

// A session that fails at once is run again after a backoff, not in a spin; one that reports progress
// resets the backoff; Sessions returns once ctx is done.
func TestSessionsReconnectsUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	runs := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		retry.Sessions(ctx, slog.New(slog.DiscardHandler), time.Millisecond, 2*time.Millisecond,
			func(ctx context.Context, progress func()) error {
				runs++
				if runs == 2 {
					progress()
				}
				if runs == 5 {
					cancel()
				}
				return errors.New("connection lost")
			})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Sessions did not return after its context ended")
	}
	assert.Equal(t, 5, runs, "no session after the context ended")
}

// Every wait stays within max once the backoff reaches it, jitter included (backoff's own type jitters
// after its cap: a 30 s AMQP_RECONNECT_MAX waited 36 s), and none is shorter than 70% of min.
func TestExponentialNeverWaitsPastItsMax(t *testing.T) {
	t.Parallel()
	const lo, hi = 10 * time.Millisecond, 40 * time.Millisecond
	b := retry.NewExponential(lo, hi)
	atMax := 0
	for range 1000 {
		d := b.NextBackOff()
		require.LessOrEqual(t, d, hi)
		require.GreaterOrEqual(t, d, lo*7/10)
		if d == hi {
			atMax++
		}
	}
	// At the cap, about half the jittered waits would pass it; each is clipped to it instead.
	assert.Greater(t, atMax, 100, "the waits reached the cap")
}
