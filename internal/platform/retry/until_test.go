package retry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/retry"
)

var quick = retry.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond, AttemptTimeout: time.Second}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Until tries again after each failure, reports every failure, and returns nil on the first success.
func TestUntilRetriesUntilSuccess(t *testing.T) {
	t.Parallel()
	var calls, failed int
	err := retry.Until(context.Background(), discard(), "thing", quick, func(error) { failed++ },
		func(ctx context.Context) error {
			calls++
			_, ok := ctx.Deadline()
			require.True(t, ok, "each attempt is bounded")
			if calls < 4 {
				return errors.New("not yet")
			}
			return nil
		})
	require.NoError(t, err)
	assert.Equal(t, 4, calls)
	assert.Equal(t, 3, failed)
}

// A Permanent error ends the wait at once, unwrapped.
func TestUntilStopsOnPermanent(t *testing.T) {
	t.Parallel()
	bad := errors.New("malformed")
	calls := 0
	err := retry.Until(context.Background(), discard(), "thing", quick, nil, func(context.Context) error {
		calls++
		return retry.Permanent(bad)
	})
	assert.Equal(t, bad, err)
	assert.Equal(t, 1, calls)
}

// Cancelling the context ends the wait promptly, also in the middle of a long backoff.
func TestUntilEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	slow := retry.Backoff{Min: time.Hour, Max: time.Hour, AttemptTimeout: time.Second}
	done := make(chan error, 1)
	go func() {
		done <- retry.Until(ctx, discard(), "thing", slow, func(error) { cancel() },
			func(context.Context) error { return errors.New("down") })
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("Until did not return after its context ended")
	}
}
