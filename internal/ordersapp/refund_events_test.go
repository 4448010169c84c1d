package ordersapp_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

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
