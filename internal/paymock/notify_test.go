package paymock_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/paymock"
)

// A payment created without a notify_url is followed through the query API alone: its settlement and
// its refunds send no callback at all (the lab's S5 sends its callbacks itself and relies on this, so
// that the platform does not retry its own at a route nobody serves), and there is nothing to replay.
func TestNoNotifyURLSendsNoCallbacks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var silent paymock.Payment
	h.callJSON(t, http.MethodPost, "/v1/payments",
		`{"merchant_order_no":"order-silent","amount_cents":1000,"currency":"EUR"}`, http.StatusCreated, &silent)
	assert.Empty(t, silent.NotifyURL)
	assert.Equal(t, paymock.StatusSuccess, h.approve(t, silent.ID).Status)
	var ref refundAnswer
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(silent.ID, "r-silent", 1000), http.StatusCreated, &ref)
	assert.Equal(t, paymock.StatusRefunded, ref.Payment.Status, "the events happened; only nobody is told")
	status, raw := h.call(t, http.MethodPost, "/admin/payments/"+silent.ID+"/replay", `{"times":2}`)
	requireProblem(t, status, raw, http.StatusConflict, "no_notify_url")

	// Delivery ids are drawn when an event is dispatched, inside the API call: had the silent payment's
	// two events been dispatched, the next payment's first delivery would not be dlv_1.
	rcv := newReceiver(t, nil)
	loud := h.create(t, "order-loud", 500, rcv.url())
	h.approve(t, loud.ID)
	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 1 }, "the loud payment's callback ends")
	log := h.deliveries(t, "")
	require.Len(t, log, 1, "only the payment with a notify_url was delivered")
	assert.Equal(t, loud.ID, log[0].PaymentID)
	assert.Equal(t, "dlv_1", log[0].DeliveryID, "no delivery was ever made for the silent payment")
	assert.Empty(t, h.deliveries(t, "?payment_id="+silent.ID))
	assert.Equal(t, 1, rcv.count())
}
