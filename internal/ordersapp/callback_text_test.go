package ordersapp_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/callback"
	"idemshop/internal/testenv"
)

// A signed callback's text reaches business tables: its payment_id goes to orders.payment_id, a
// REFUNDED event's id to order_refund_events. A NUL there (JSON "\u0000") would fail the statement,
// and then every resend of it, so the order would never move; cleaned, it is stored as U+FFFD.
func TestCallbackNULReachingBusinessTablesIsCleaned(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	id, amount := rp.newOrder(alice, 1, 1)

	paid := callbackFor(id, callback.StatusSuccess, amount, "evt-paid")
	paid.PaymentID = "pay\x00nul"
	assertAcked(t, []response{rp.postCallback(paid)})
	assert.Equal(t, "PAID", statusOf(t, env.DB, id))
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "id = ? AND payment_id = ?", id, "pay\uFFFDnul"))

	refund := callbackFor(id, callback.StatusRefunded, 1, "evt\x00refund")
	refund.PaymentID = paid.PaymentID // the order's payment (events of another one are refused)
	assertAcked(t, []response{rp.postCallback(refund)})
	assert.EqualValues(t, 1, count(t, env.DB, "order_refund_events", "order_id = ? AND event_id = ?", id, "evt\uFFFDrefund"))
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "id = ? AND refunded_cents = 1", id))
}
