package ordersapp_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/payclient"
	"idemshop/internal/paymock"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/testenv"
)

// End to end with the real payments-mock on loopback, sending every callback 3 times in parallel:
// 20 orders are paid at the platform (merchant_order_no = order id, notify_url = the callback route),
// auto-approved and called back. Each is PAID exactly once; stock and outbox counts are exact.
func TestPaymentsMockTripleCallbacksEndToEnd(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	const seed = 20261129
	t.Logf("chaos seed %d", seed)
	reg := prometheus.NewRegistry()
	platform, err := paymock.New(paymock.Config{
		Secret:             demoSecret,
		AutoApproveDelay:   10 * time.Millisecond,
		RetrySchedule:      []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond},
		CallbackTimeout:    5 * time.Second,
		CreateTimeoutDelay: time.Second,
		DeliveryLogLimit:   10000,
		Chaos:              paymock.Chaos{Duplicates: 3, Parallel: true, Seed: seed},
	}, slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	e := httpserver.New(slog.New(slog.DiscardHandler), reg, 1<<20)
	platform.Register(e)
	mock := httptest.NewServer(e)
	t.Cleanup(func() {
		mock.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = platform.Close(ctx)
	})
	client, err := payclient.New(mock.URL, 5*time.Second)
	require.NoError(t, err)

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

	eventually(t, 30*time.Second, "every delivery to be acknowledged", func() bool {
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
