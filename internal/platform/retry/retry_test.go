package retry_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
