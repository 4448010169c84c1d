package ordersapp_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
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

	// The customer sees the partial refund on the order, once.
	got := rp.call(http.MethodGet, "/v1/orders/"+strconv.FormatInt(id, 10), alice, "", nil)
	require.Equal(t, http.StatusOK, got.Status)
	var view struct {
		Status        string `json:"status"`
		RefundedCents int64  `json:"refunded_cents"`
	}
	require.NoError(t, json.Unmarshal(got.Body, &view))
	assert.Equal(t, "PAID", view.Status)
	assert.Equal(t, amount/2, view.RefundedCents)
}

// Refunds that add up to more than was paid (the real platform refuses them; a broken or forged sender
// does not): each event is recorded with its own amount, the order's total stops at the amount, the
// order is refunded once (stock back once, one order.refunded row), and the event that went over says
// so in its audit row and in an ALERT log line.
func TestOverRefundIsRecordedCappedAndAlerted(t *testing.T) {
	t.Parallel()
	o := newPaidOrderWithLogs(t)
	part := o.amount*2/3 + 1 // two of them exceed the amount

	assertAcked(t, []response{o.rp.postCallback(callbackFor(o.id, callback.StatusRefunded, part, "evt-refund-a"))})
	assert.NotContains(t, o.logs.String(), "over_refund")
	assertAcked(t, []response{o.rp.postCallback(callbackFor(o.id, callback.StatusRefunded, part, "evt-refund-b"))})

	o.assertOverRefund(t, 2*part, "evt-refund-b", "applied")
}

// A further refund after the order was refunded in full (past the amount paid: a broken or forged
// sender) is recorded and alerted like any over-refund, not answered duplicate from the order's
// status: the order stays REFUNDED, refunded once. A resend of the event that refunded it stays a
// duplicate that records nothing.
func TestRefundAfterTheOrderWasRefundedIsRecordedAndAlerted(t *testing.T) {
	t.Parallel()
	o := newPaidOrderWithLogs(t)
	full := callbackFor(o.id, callback.StatusRefunded, o.amount, "evt-refund-full")
	assertAcked(t, []response{o.rp.postCallback(full)})
	require.Equal(t, "REFUNDED", statusOf(t, o.env.DB, o.id))
	require.NotContains(t, o.logs.String(), "over_refund")

	assertAcked(t, []response{o.rp.postCallback(callbackFor(o.id, callback.StatusRefunded, 100, "evt-refund-more"))})
	assertAcked(t, []response{o.rp.postCallback(full)}) // a resend

	o.assertOverRefund(t, o.amount+100, "evt-refund-more", "recorded")
	assert.EqualValues(t, 1, count(t, o.env.DB, "payment_callbacks",
		"order_id = ? AND event_id = 'evt-refund-full' AND outcome = 'duplicate'", o.id), "the resend")
}

// paidOrderWithLogs is an order of product 1 paid by a SUCCESS callback, on a replica whose log is
// kept, with the product's stock after the payment.
type paidOrderWithLogs struct {
	env               *testenv.Env
	rp                *replica
	logs              *testenv.Output
	id, amount, stock int64
}

func newPaidOrderWithLogs(t *testing.T) paidOrderWithLogs {
	t.Helper()
	o := paidOrderWithLogs{env: testenv.New(t), logs: &testenv.Output{}}
	o.rp = newReplica(t, o.env, replicaOpts{logger: slog.New(slog.NewTextHandler(o.logs, nil))})
	o.id, o.amount = o.rp.newOrder(alice, 1, 1)
	assertAcked(t, []response{o.rp.postCallback(callbackFor(o.id, callback.StatusSuccess, o.amount, "evt-paid"))})
	o.stock = stockOf(t, o.env.DB, 1)
	return o
}

// anotherPaidOrder is a second order of product 1 on o's replica, paid by a SUCCESS callback; it returns
// its id and amount.
func (o paidOrderWithLogs) anotherPaidOrder(t *testing.T) (int64, int64) {
	t.Helper()
	id, amount := o.rp.newOrder(alice, 1, 1)
	assertAcked(t, []response{o.rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-paid-other"))})
	return id, amount
}

// assertOverRefund checks the end state of refunds that went past the amount: the events recorded
// with their own amounts (recorded, in cents), the order's total capped at its amount, REFUNDED once
// (stock back once, one order.refunded row), and the event that went over (eventID, with outcome)
// saying by how much in its audit row and in an ALERT log line.
func (o paidOrderWithLogs) assertOverRefund(t *testing.T, recorded int64, eventID, outcome string) {
	t.Helper()
	var sum int64
	require.NoError(t, o.env.DB.Raw(`SELECT SUM(amount_cents) FROM order_refund_events WHERE order_id = ?`, o.id).Scan(&sum).Error)
	assert.Equal(t, recorded, sum, "each event recorded once, with its own amount")
	assert.EqualValues(t, 1, count(t, o.env.DB, "orders", "id = ? AND refunded_cents = ?", o.id, o.amount), "the total stops at the amount")
	assert.Equal(t, "REFUNDED", statusOf(t, o.env.DB, o.id))
	assert.Equal(t, o.stock+1, stockOf(t, o.env.DB, 1), "stock back once")
	assert.EqualValues(t, 1, refundedOutboxRows(t, o.env.DB, o.id))
	assert.EqualValues(t, 1, count(t, o.env.DB, "payment_callbacks", "order_id = ? AND event_id = ? AND outcome = ? AND reason LIKE ?",
		o.id, eventID, outcome, "%exceed the amount paid by "+strconv.FormatInt(recorded-o.amount, 10)+" cents"))
	assert.Contains(t, o.logs.String(), "alert=over_refund")
}

// Once the order knows its payment, an event about another payment is refused (400 payment_mismatch),
// audited and alerted, and changes nothing: applied, a refund of another payment refunded this order
// (stock and points back) while the platform refunded something else, and another payment's SUCCESS
// passed as a resend while a second charge went unnoticed. The order's own payment is still applied.
func TestEventsOfAnotherPaymentAreRefused(t *testing.T) {
	t.Parallel()
	o := newPaidOrderWithLogs(t)

	for _, cb := range []callback.Callback{
		callbackFor(o.id, callback.StatusRefunded, o.amount, "evt-other-refund"),
		callbackFor(o.id, callback.StatusSuccess, o.amount, "evt-other-success"),
	} {
		cb.PaymentID = "pay_other"
		r := o.rp.postCallback(cb)
		assert.Equal(t, http.StatusBadRequest, r.Status, cb.Status)
		assert.Contains(t, string(r.Body), `"code":"payment_mismatch"`, cb.Status)
		assert.EqualValues(t, 1, count(t, o.env.DB, "payment_callbacks",
			"order_id = ? AND event_id = ? AND outcome = 'rejected' AND reason LIKE 'payment mismatch%'", o.id, cb.EventID))
	}
	assert.Equal(t, "PAID", statusOf(t, o.env.DB, o.id))
	assert.Zero(t, count(t, o.env.DB, "order_refund_events", "order_id = ?", o.id))
	assert.EqualValues(t, 1, count(t, o.env.DB, "orders", "id = ? AND refunded_cents = 0 AND payment_id = ?", o.id,
		"pay_"+strconv.FormatInt(o.id, 10)))
	assert.Equal(t, o.stock, stockOf(t, o.env.DB, 1))
	assert.Zero(t, refundedOutboxRows(t, o.env.DB, o.id))
	assert.Equal(t, 2, strings.Count(o.logs.String(), "alert=payment_mismatch"))

	assertAcked(t, []response{o.rp.postCallback(callbackFor(o.id, callback.StatusRefunded, o.amount, "evt-own-refund"))})
	assert.Equal(t, "REFUNDED", statusOf(t, o.env.DB, o.id))
	assert.Equal(t, o.stock+1, stockOf(t, o.env.DB, 1))
}

// A refund under an event id already recorded for another refund (another order, or the same order
// with another amount) is not a resend: answered duplicate, it would be lost for good (the platform
// stops resending, and the reconciler sets only whole refunds). It is refused (422 event_id_reused),
// audited and alerted, and changes nothing; the true resend is still a duplicate.
func TestRefundUnderAReusedEventIDIsRefused(t *testing.T) {
	t.Parallel()
	o := newPaidOrderWithLogs(t)
	other, amount := o.anotherPaidOrder(t)
	half := callbackFor(o.id, callback.StatusRefunded, o.amount/2, "evt-refund-1")
	assertAcked(t, []response{o.rp.postCallback(half)})

	for _, cb := range []callback.Callback{
		callbackFor(other, callback.StatusRefunded, amount/2, half.EventID),
		callbackFor(o.id, callback.StatusRefunded, o.amount/3, half.EventID),
	} {
		r := o.rp.postCallback(cb)
		assert.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
		assert.Contains(t, string(r.Body), `"code":"event_id_reused"`)
		assert.EqualValues(t, 1, count(t, o.env.DB, "payment_callbacks",
			"order_id = ? AND event_id = ? AND amount_cents = ? AND outcome = 'rejected' AND reason LIKE ?",
			cb.MerchantOrderNo, cb.EventID, cb.AmountCents, "event id reused: refund event evt-refund-1 was first recorded for order "+
				strconv.FormatInt(o.id, 10)+", "+strconv.FormatInt(o.amount/2, 10)+" cents%"))
	}
	assert.Equal(t, 2, strings.Count(o.logs.String(), "alert=event_id_reused"))
	assert.EqualValues(t, 1, count(t, o.env.DB, "order_refund_events", "event_id = ? AND order_id = ? AND amount_cents = ?",
		half.EventID, o.id, o.amount/2))
	assert.EqualValues(t, 1, count(t, o.env.DB, "orders", "id = ? AND refunded_cents = ?", o.id, o.amount/2))
	assert.EqualValues(t, 1, count(t, o.env.DB, "orders", "id = ? AND refunded_cents = 0 AND status = 'PAID'", other))

	assertAcked(t, []response{o.rp.postCallback(half)}) // the resend
	assert.EqualValues(t, 1, count(t, o.env.DB, "payment_callbacks",
		"order_id = ? AND event_id = ? AND outcome = 'duplicate'", o.id, half.EventID))
	assert.EqualValues(t, 1, count(t, o.env.DB, "orders", "id = ? AND refunded_cents = ?", o.id, o.amount/2))
}

// Refunds under one event id, sent at once behind a barrier: two copies of one refund and two other
// refunds under its id (another order; the same order, another amount). Whichever committed first is
// the event: it is recorded once, its copies are answered 200, the others 422, and every order's
// refunded total is what was recorded for it.
func TestConcurrentRefundsUnderOneEventIDRecordOne(t *testing.T) {
	t.Parallel()
	o := newPaidOrderWithLogs(t)
	other, amount := o.anotherPaidOrder(t)
	const id = "evt-refund-shared"
	cbs := []callback.Callback{
		callbackFor(o.id, callback.StatusRefunded, o.amount/2, id),
		callbackFor(o.id, callback.StatusRefunded, o.amount/2, id),
		callbackFor(other, callback.StatusRefunded, amount/2, id),
		callbackFor(o.id, callback.StatusRefunded, o.amount/3, id),
	}
	rs := parallel(len(cbs), func(i int) response { return o.rp.postCallback(cbs[i]) })

	var first struct {
		OrderID     int64
		AmountCents int64
	}
	require.NoError(t, o.env.DB.Raw(`SELECT order_id, amount_cents FROM order_refund_events WHERE event_id = ?`, id).Scan(&first).Error)
	assert.EqualValues(t, 1, count(t, o.env.DB, "order_refund_events", "event_id = ?", id))
	for i, cb := range cbs {
		if cb.MerchantOrderNo == strconv.FormatInt(first.OrderID, 10) && cb.AmountCents == first.AmountCents {
			assert.Equal(t, http.StatusOK, rs[i].Status, "copy %d of the recorded refund: %s", i, rs[i].Body)
		} else {
			assert.Equal(t, http.StatusUnprocessableEntity, rs[i].Status, "refund %d under a taken id: %s", i, rs[i].Body)
		}
	}
	for _, order := range []int64{o.id, other} {
		want := int64(0)
		if order == first.OrderID {
			want = first.AmountCents
		}
		assert.EqualValues(t, 1, count(t, o.env.DB, "orders", "id = ? AND refunded_cents = ?", order, want), "order %d", order)
	}
}
