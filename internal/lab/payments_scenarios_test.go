package lab_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
	"idemshop/internal/payments"
	"idemshop/internal/platform/config"
)

func TestS5(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil) // LAB_STOCK_LOCK_TTL at its default
	r := runScenario(t, env, "S5")
	u, g := r.Unsafe.Measured, r.Guarded.Measured
	assert.Less(t, u["stock_final"], int64(0), "oversold")
	assert.Greater(t, u["paid"], int64(10), "more orders PAID than units")
	assert.EqualValues(t, 0, u["non_200"])
	assert.EqualValues(t, 0, g["stock_final"])
	assert.EqualValues(t, 10, g["paid"])
	assert.EqualValues(t, 20, g["refund_required"])
	assert.EqualValues(t, 20, g["refund_requests"])
	assert.EqualValues(t, 10, g["outbox_rows"])
	assert.EqualValues(t, 30, g["callbacks_applied"])
	assert.EqualValues(t, 0, g["non_200"])
}

func TestS7(t *testing.T) {
	t.Parallel()
	// The platform holds a create_timeout answer for 2 s (newLabEnv); orders gives up after 300 ms, as
	// with the defaults (3 s against 10 s). A short lease lets the sweeper (every 200 ms) settle it soon.
	env := newLabEnv(t, func(c *config.Orders) {
		c.PaymentsTimeout = 300 * time.Millisecond
		c.PayLease = time.Second
	})
	r := runScenario(t, env, "S7")
	u, g := r.Unsafe.Measured, r.Guarded.Measured
	assert.EqualValues(t, http.StatusServiceUnavailable, u["first_status"])
	assert.EqualValues(t, http.StatusCreated, u["retry_status"])
	assert.EqualValues(t, 2, u["payments"], "two charges at the platform")
	assert.EqualValues(t, 2*2500, u["charged_cents"])
	assert.EqualValues(t, http.StatusServiceUnavailable, g["first_status"])
	assert.EqualValues(t, 1, g["first_outcome_unknown"])
	assert.EqualValues(t, http.StatusConflict, g["retry_status"], "PROCESSING under its lease")
	assert.EqualValues(t, 1, g["record_completed"])
	assert.GreaterOrEqual(t, g["record_takeovers"], int64(1), "the sweeper took the record over")
	assert.EqualValues(t, http.StatusCreated, g["final_status"])
	assert.EqualValues(t, 1, g["final_replayed"])
	assert.EqualValues(t, 1, g["payments"])
	assert.EqualValues(t, 2500, g["charged_cents"])
	assert.EqualValues(t, 1, g["replay_is_the_payment"])
}

func TestS8(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S8")
	u, g := r.Unsafe.Measured, r.Guarded.Measured
	assert.Greater(t, u["fence_b"], u["fence_a"])
	assert.EqualValues(t, 1, u["stored_is_a"], "the stale write overwrote B's result")
	assert.EqualValues(t, 0, u["stored_is_b"])
	assert.Greater(t, g["fence_b"], g["fence_a"])
	assert.EqualValues(t, 1, g["late_write_rejected"])
	assert.EqualValues(t, 1, g["stored_is_b"])
	assert.EqualValues(t, g["fence_b"], g["stored_fence"])
}

func TestS9(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S9")
	assert.Equal(t, "n/a", r.Unsafe.Detail)
	g := r.Guarded.Measured
	for _, side := range []string{"degraded_", "normal_"} {
		assert.EqualValues(t, 20, g[side+"paid"], side)
		assert.EqualValues(t, 20, g[side+"applied"], side)
		assert.EqualValues(t, 60, g[side+"received"], side)
		assert.EqualValues(t, 20, g[side+"outbox_rows"], side)
		assert.EqualValues(t, -20, g[side+"stock_delta"], side)
		assert.EqualValues(t, 0, g[side+"status_5xx"], side)
		assert.EqualValues(t, 0, g[side+"violations"], side)
		assert.Positive(t, g[side+"p50_us"], side)
		assert.GreaterOrEqual(t, g[side+"p99_us"], g[side+"p50_us"], side)
	}
}

// TestS12: a full refund delivered before the SUCCESS it refunds. Besides what the lab measured, the
// test sends the same two signed events itself, on an order of its own, through each route, and reads
// the rows back with a query of its own.
func TestS12(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S12")
	u, g := r.Unsafe.Measured, r.Guarded.Measured
	assert.EqualValues(t, 1, u["status_paid"])
	assert.EqualValues(t, -2, u["stock_delta"])
	assert.EqualValues(t, 1, u["order_paid_rows"])
	assert.EqualValues(t, 0, u["order_refunded_rows"])
	assert.EqualValues(t, 0, u["refund_events"], "the early refund was dropped")
	assert.EqualValues(t, 0, u["refunded_cents"])
	assert.EqualValues(t, 1, g["status_refunded"])
	assert.EqualValues(t, 0, g["stock_delta"])
	assert.EqualValues(t, 1, g["order_paid_rows"])
	assert.EqualValues(t, 1, g["order_refunded_rows"])
	assert.EqualValues(t, 1, g["refund_events"])
	assert.EqualValues(t, g["amount_cents"], g["refunded_cents"])
	assert.EqualValues(t, 0, g["points_delta"], "credited, then reversed")

	// Unsafe: the refund is answered "stale" and recorded nowhere; the SUCCESS pays, takes 2 units and
	// credits the points, and nothing gives them back.
	o, got := s12Replay(t, env, "/lab/unsafe/s12/payments/callback")
	assert.Equal(t, "PAID", got.Status)
	assert.Equal(t, "stale", got.RefundOutcome)
	assert.Equal(t, "applied", got.SuccessOutcome)
	assert.EqualValues(t, -2, got.Stock-100)
	assert.EqualValues(t, 1, got.PaidRows)
	assert.EqualValues(t, 0, got.RefundedRows)
	assert.EqualValues(t, 0, got.RefundedCents)
	assert.EqualValues(t, o.AmountCents/100, got.Balance)

	// Guarded: the refund is "recorded"; the SUCCESS pays and, finding it, refunds in the same
	// transaction: stock back, order.paid and order.refunded once each, points credited and reversed.
	o, got = s12Replay(t, env, "/v1/payments/callback")
	assert.Equal(t, "REFUNDED", got.Status)
	assert.Equal(t, "recorded", got.RefundOutcome)
	assert.Equal(t, "applied", got.SuccessOutcome)
	assert.EqualValues(t, 0, got.Stock-100)
	assert.EqualValues(t, 1, got.PaidRows)
	assert.EqualValues(t, 1, got.RefundedRows)
	assert.EqualValues(t, o.AmountCents, got.RefundedCents)
	assert.EqualValues(t, 0, got.Balance)
}

// s12Rows is what TestS12 reads back of its own order.
type s12Rows struct {
	Status         string
	RefundedCents  int64
	Stock          int64
	PaidRows       int64
	RefundedRows   int64
	RefundOutcome  string
	SuccessOutcome string
	Balance        int64
}

// s12Replay creates an order of 2 units (stock 100) for a fresh lab user, posts the platform's REFUNDED
// then its SUCCESS to path, waits until the outbox rows are published and consumed, reads the rows and
// deletes them.
func s12Replay(t *testing.T, env *lab.Env, path string) (lab.Order, s12Rows) {
	t.Helper()
	ctx := context.Background()
	f, err := env.NewFixture(ctx, "S12-test")
	require.NoError(t, err)
	product, err := f.Product(ctx, 100, 1250)
	require.NoError(t, err)
	o, resp, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s12-test-%d", time.Now().UnixNano()), product, 2)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	defer func() {
		require.NoError(t, env.DB.Exec(`DELETE FROM order_refund_events WHERE order_id = ?`, o.ID).Error)
		require.NoError(t, f.Close(ctx))
	}()
	for _, cb := range []payments.Callback{
		lab.Callback(o.ID, payments.StatusRefunded, o.AmountCents, fmt.Sprintf("s12-test-%d-refund", o.ID)),
		lab.Callback(o.ID, payments.StatusSuccess, o.AmountCents, fmt.Sprintf("s12-test-%d-success", o.ID)),
	} {
		resp, err := env.PostCallback(ctx, path, cb)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.Status, "%s %s: %s", path, cb.Status, resp.Body)
	}
	// Settled: every outbox row of the order published, and as many ledger rows as outbox rows.
	assert.Eventually(t, func() bool {
		var pending int64
		err := env.DB.Raw(`SELECT
			  (SELECT count(*) FROM outbox WHERE (payload->>'order_id')::bigint = @o AND published_at IS NULL)
			+ (SELECT count(*) FROM outbox WHERE (payload->>'order_id')::bigint = @o)
			- (SELECT count(*) FROM points_ledger WHERE biz_id IN ('order-paid:' || CAST(@o AS bigint), 'order-refunded:' || CAST(@o AS bigint)))`,
			map[string]any{"o": o.ID}).Scan(&pending).Error
		return assert.NoError(t, err) && pending == 0
	}, 15*time.Second, 20*time.Millisecond, "%s: outbox published and consumed", path)
	var got s12Rows
	require.NoError(t, env.DB.Raw(`SELECT o.status, o.refunded_cents, p.stock,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.paid' AND (x.payload->>'order_id')::bigint = o.id) AS paid_rows,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.refunded' AND (x.payload->>'order_id')::bigint = o.id) AS refunded_rows,
		  (SELECT string_agg(outcome, ',') FROM payment_callbacks c WHERE c.order_id = o.id AND c.status = 'REFUNDED') AS refund_outcome,
		  (SELECT string_agg(outcome, ',') FROM payment_callbacks c WHERE c.order_id = o.id AND c.status = 'SUCCESS') AS success_outcome,
		  COALESCE((SELECT balance FROM points_accounts a WHERE a.user_id = o.user_id), 0) AS balance
		FROM orders o JOIN products p ON p.id = o.product_id WHERE o.id = ?`, o.ID).Scan(&got).Error)
	return o, got
}
