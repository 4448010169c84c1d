package ordersapp_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/payclient"
	"idemshop/internal/paymock"
	"idemshop/internal/testenv"
)

// End to end with the real payments-mock on loopback, sending every callback 3 times in parallel:
// 20 orders are paid at the platform (merchant_order_no = order id, notify_url = the callback route),
// auto-approved and called back. Each is PAID exactly once; stock and outbox counts are exact.
func TestPaymentsMockTripleCallbacksEndToEnd(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, queued) // a 503 would add an audit row to the 3 counted per order
	rp := newReplica(t, env, replicaOpts{})

	mock := newMock(t, func(c *paymock.Config) {
		c.AutoApproveDelay = 10 * time.Millisecond
		c.Chaos = paymock.Chaos{Duplicates: 3, Parallel: true, Seed: 20261129}
	})
	platform, client := mock.Platform, mock.client

	const n = 20
	ids := make([]int64, n)
	var units int64
	for i := range n {
		qty := i%2 + 1
		id, amount := rp.newOrder(carolToken, 4, qty)
		ids[i], units = id, units+int64(qty)
		_, created, err := client.CreatePayment(context.Background(), payclient.CreatePaymentRequest{
			MerchantOrderNo: strconv.FormatInt(id, 10), AmountCents: amount, Currency: "EUR",
			NotifyURL: rp.srv.URL + "/v1/payments/callback"})
		require.NoError(t, err)
		require.True(t, created)
	}

	eventually(t, patience, "every delivery to be acknowledged", func() bool {
		acked := 0
		for _, a := range platform.Deliveries() {
			if a.Final && a.Outcome == "success" {
				acked++
			}
		}
		return acked == 3*n
	})
	for _, id := range ids {
		assert.Equal(t, "PAID", statusOf(t, env.DB, id))
		assert.EqualValues(t, 1, outboxRows(t, env.DB, id))
		assert.EqualValues(t, 3, count(t, env.DB, "payment_callbacks", "order_id = ? AND signature_ok", id))
		assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks", "order_id = ? AND applied", id))
	}
	assert.EqualValues(t, 500-units, stockOf(t, env.DB, 4))
	assert.EqualValues(t, n, count(t, env.DB, "outbox"))
}
