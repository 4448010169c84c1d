package paymock_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/paymock"
)

func TestCloseDropsPendingRetriesAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *paymock.Config) { c.RetrySchedule = []time.Duration{time.Hour} })
	rcv := newReceiver(t, func(int) (int, string) { return http.StatusServiceUnavailable, "" })
	p := h.create(t, "order-close", 1000, rcv.url())
	h.approve(t, p.ID)
	waitFor(t, patience, func() bool { return rcv.count() == 1 }, "first attempt made; the next is an hour away")

	// The next attempt is an hour away, so a Close that waited for it would run into its minute.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	start := time.Now()
	require.NoError(t, h.p.Close(ctx))
	assert.Less(t, time.Since(start), patience/2, "the backoff wait ended with Close")

	// After Close nothing new is sent.
	status, raw := h.call(t, http.MethodPost, "/admin/payments/"+p.ID+"/replay", `{"times":1}`)
	requireProblem(t, status, raw, http.StatusServiceUnavailable, "unavailable")
	assert.Equal(t, 1, rcv.count())
}

func TestCloseCancelsAnAttemptPastItsDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	h := newHarness(t, nil)
	rcv := newReceiver(t, func(int) (int, string) {
		<-release // a receiver that never answers in time
		return http.StatusOK, ack
	})
	defer close(release)
	p := h.create(t, "order-hang", 1000, rcv.url())
	h.approve(t, p.ID)
	waitFor(t, patience, func() bool { return rcv.count() == 1 }, "the attempt is on the wire")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := h.p.Close(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	log := h.deliveries(t, "")
	require.Len(t, log, 1)
	assert.Equal(t, paymock.OutcomeError, log[0].Outcome, "the cancelled attempt is logged as an error")
}
