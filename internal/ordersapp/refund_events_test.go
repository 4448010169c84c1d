package ordersapp_test

import (
	"log/slog"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/callback"
	"idemshop/internal/testenv"
)

// A partial refund's callback resent to a PAID order (the resend fast path cannot skip it: the order
// is not REFUNDED) counts once: order_refund_events, keyed by event_id, records it once and only a new
// row adds to refunded_cents. Counted twice, half the amount would refund the whole order.
func TestPartialRefundResentCountsOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	id, amount := rp.newOrder(alice, 1, 1)
	assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-paid"))})
	before := stockOf(t, env.DB, 1)

	half := callbackFor(id, callback.StatusRefunded, amount/2, "evt-half")
	r1 := rp.postCallback(half)
	r2 := rp.postCallback(half)
	assertAcked(t, []response{r1, r2})
	assert.Equal(t, http.StatusOK, r2.Status)
	assert.EqualValues(t, 1, count(t, env.DB, "order_refund_events", "order_id = ?", id))
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "id = ? AND refunded_cents = ?", id, amount/2))
	assert.Equal(t, "PAID", statusOf(t, env.DB, id), "half the amount does not refund the order")
	assert.Equal(t, before, stockOf(t, env.DB, 1))
	assert.Zero(t, refundedOutboxRows(t, env.DB, id))
	assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks", "order_id = ? AND status = 'REFUNDED' AND outcome = 'duplicate'", id))
}

// Refunds that add up to more than was paid (the real platform refuses them; a broken or forged sender
// does not): each event is recorded with its own amount, the order's total stops at the amount, the
// order is refunded once (stock back once, one order.refunded row), and the event that went over says
// so in its audit row and in an ALERT log line.
func TestOverRefundIsRecordedCappedAndAlerted(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	logs := &testenv.Output{}
	rp := newReplica(t, env, replicaOpts{logger: slog.New(slog.NewTextHandler(logs, nil))})
	id, amount := rp.newOrder(alice, 1, 1)
	assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-paid"))})
	before := stockOf(t, env.DB, 1)
	part := amount*2/3 + 1 // two of them exceed the amount

	assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusRefunded, part, "evt-refund-a"))})
	assert.NotContains(t, logs.String(), "over_refund")
	assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusRefunded, part, "evt-refund-b"))})

	var recorded int64
	require.NoError(t, env.DB.Raw(`SELECT SUM(amount_cents) FROM order_refund_events WHERE order_id = ?`, id).Scan(&recorded).Error)
	assert.Equal(t, 2*part, recorded, "each event keeps its amount")
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "id = ? AND refunded_cents = ?", id, amount), "the total stops at the amount")
	assert.Equal(t, "REFUNDED", statusOf(t, env.DB, id))
	assert.Equal(t, before+1, stockOf(t, env.DB, 1), "stock back once")
	assert.EqualValues(t, 1, refundedOutboxRows(t, env.DB, id))
	assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks",
		"order_id = ? AND event_id = 'evt-refund-b' AND applied AND reason LIKE ?", id, "%exceed the amount paid by "+strconv.FormatInt(2*part-amount, 10)+" cents"))
	assert.Contains(t, logs.String(), "alert=over_refund")
}

// A further refund after the order was refunded in full (past the amount paid: a broken or forged
// sender) is recorded and alerted like any over-refund, not answered duplicate from the order's
// status: the order stays REFUNDED, refunded once. A resend of the event that refunded it stays a
// duplicate that records nothing.
func TestRefundAfterTheOrderWasRefundedIsRecordedAndAlerted(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	logs := &testenv.Output{}
	rp := newReplica(t, env, replicaOpts{logger: slog.New(slog.NewTextHandler(logs, nil))})
	id, amount := rp.newOrder(alice, 1, 1)
	assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-paid"))})
	before := stockOf(t, env.DB, 1)
	full := callbackFor(id, callback.StatusRefunded, amount, "evt-refund-full")
	assertAcked(t, []response{rp.postCallback(full)})
	require.Equal(t, "REFUNDED", statusOf(t, env.DB, id))
	require.NotContains(t, logs.String(), "over_refund")

	assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusRefunded, 100, "evt-refund-more"))})
	assertAcked(t, []response{rp.postCallback(full)}) // a resend

	var recorded int64
	require.NoError(t, env.DB.Raw(`SELECT SUM(amount_cents) FROM order_refund_events WHERE order_id = ?`, id).Scan(&recorded).Error)
	assert.Equal(t, amount+100, recorded, "both events recorded, each once")
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "id = ? AND refunded_cents = ?", id, amount), "the total stops at the amount")
	assert.Equal(t, "REFUNDED", statusOf(t, env.DB, id))
	assert.Equal(t, before+1, stockOf(t, env.DB, 1), "stock back once")
	assert.EqualValues(t, 1, refundedOutboxRows(t, env.DB, id))
	assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks",
		"order_id = ? AND event_id = 'evt-refund-more' AND outcome = 'recorded' AND reason LIKE ?", id, "%exceed the amount paid by 100 cents"))
	assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks",
		"order_id = ? AND event_id = 'evt-refund-full' AND outcome = 'duplicate'", id), "the resend")
	assert.Contains(t, logs.String(), "alert=over_refund")
}
