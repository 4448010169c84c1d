package lab_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/callback"
	"idemshop/internal/lab"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/postgres"
)

// TestS5: 30 buyers of one unit each for the last 10 units (19.99 EUR: 19 points), and all 30 SUCCESS
// callbacks at once while the product's row is held. The lab plays the unsafe lock's clock itself (it
// runs a holder's lease out once that holder is queued on the row), so the lease here is longer than
// the whole test: no lease ends by the wall clock, and the oversell is exactly one unit, on any machine.
func TestS5(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, func(c *config.Orders) { c.LabStockLockTTL = time.Minute })
	r := runScenario(t, env, "S5")

	// Unsafe: 11 holders read "10 left" before any of them wrote; all 11 took a unit.
	u := sideRows(t, env, "S5-unsafe")
	assert.EqualValues(t, 10-11, u.stock(), "oversold")
	assert.Equal(t, map[string]int64{"PAID": 11, "REFUND_REQUIRED": 19}, u.orders(), "11 orders paid for 10 units")
	assert.EqualValues(t, 11, u.outbox("order.paid"))
	assert.EqualValues(t, 19, u.refundRequests())
	assert.Equal(t, map[string]int64{"applied": 30}, u.callbacks())
	assert.EqualValues(t, 11, r.Unsafe.Measured["queued_on_row"])
	assert.EqualValues(t, 11, r.Unsafe.Measured["leases_run_out"], "the lab ran each holder's lease out")

	// Guarded: the conditional decrement sells the 10 units once, whatever the queue on the row.
	g := sideRows(t, env, "S5-guarded")
	assert.EqualValues(t, 0, g.stock(), "never below zero")
	assert.Equal(t, map[string]int64{"PAID": 10, "REFUND_REQUIRED": 20}, g.orders())
	assert.EqualValues(t, 10, g.outbox("order.paid"))
	assert.EqualValues(t, 20, g.refundRequests(), "one refund owed per order paid without stock")
	assert.EqualValues(t, 20, g.n(`SELECT count(DISTINCT r.order_id) FROM refund_requests r
		JOIN orders o ON o.id = r.order_id WHERE o.status = 'REFUND_REQUIRED' AND o.user_id IN `+sideUsers))
	assert.Equal(t, map[string]int64{"applied": 30}, g.callbacks())
	settle(t, 10, g.ledgerRows, "the 10 paid orders credited once each")
	assert.EqualValues(t, 10*19, g.balance())
	assert.EqualValues(t, 0, r.Guarded.Measured["non_200"], "no callback gave up on the held row")
}

// Another product's row with transactions queued on it (another S5 run on the same stack, or any queue
// on a product) is not S5's queue: the lab counted every tuple-lock waiter on products, let its row go
// early and still reported 11 queued (a workshop walker's finding, 2026-12-07: two S5 runs at once, one
// ended at stock 0 and failed). Here another product's row is held with three updates queued behind it
// (two of them on its tuple lock) for the whole run, and S5's unsafe side still oversells by exactly one.
func TestS5CountsOnlyTheQueueOnItsOwnRow(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, func(c *config.Orders) { c.LabStockLockTTL = time.Minute })
	ctx := context.Background()
	f, err := env.NewFixture(ctx, "S5-other-queue")
	require.NoError(t, err)
	other, err := f.Product(ctx, 100, 1999)
	require.NoError(t, err)
	// A pool of its own: orders' pool is the one S5's callbacks queue for.
	db, err := postgres.Open(ctx, env.DatabaseURL, postgres.Options{MaxConns: 5})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(db) })
	pool, err := db.DB()
	require.NoError(t, err)

	holder, err := pool.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, `SELECT 1 FROM products WHERE id = $1 FOR UPDATE`, other)
	require.NoError(t, err)
	queued := make(chan error, 3)
	for range 3 {
		go func() {
			// Without the pool's lock and statement timeouts: they wait as long as the holder holds.
			tx, err := pool.BeginTx(ctx, nil)
			if err == nil {
				_, err = tx.ExecContext(ctx, `SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0`)
			}
			if err == nil {
				_, err = tx.ExecContext(ctx, `UPDATE products SET stock = stock - 1 WHERE id = $1`, other)
			}
			if err == nil {
				err = tx.Commit()
			} else if tx != nil {
				_ = tx.Rollback()
			}
			queued <- err
		}()
	}
	tupleWaiters := func() (n int64) {
		require.NoError(t, pool.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks
			WHERE NOT granted AND locktype = 'tuple' AND relation = 'products'::regclass
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return tupleWaiters() == 2 }, time.Minute, 20*time.Millisecond,
		"two updates queued on the other product's tuple lock")

	r := runScenario(t, env, "S5")
	assert.EqualValues(t, 2, tupleWaiters(), "the other queue waited through the whole run")
	require.NoError(t, holder.Rollback())
	for range 3 {
		require.NoError(t, <-queued)
	}

	u := sideRows(t, env, "S5-unsafe")
	assert.EqualValues(t, 10-11, u.stock(), "oversold by one: the lab let its row go once its own 11 were queued")
	assert.EqualValues(t, 11, r.Unsafe.Measured["queued_on_row"])
	assert.EqualValues(t, 11, r.Unsafe.Measured["leases_run_out"])
	g := sideRows(t, env, "S5-guarded")
	assert.EqualValues(t, 0, g.stock())
}

// TestS7: an order of 25.00 EUR whose payment the platform commits but answers too late (create_timeout
// chaos), then a retry. The number of charges is read from payments-mock (GET /admin/payments).
func TestS7(t *testing.T) {
	t.Parallel()
	// The platform holds a create_timeout answer for 2 s (newLabEnv); orders gives up after 300 ms, as
	// with the defaults (3 s against 10 s). A short lease lets the sweeper (every 200 ms) settle it soon.
	env := newLabEnv(t, func(c *config.Orders) {
		c.PaymentsTimeout = 300 * time.Millisecond
		c.PayLease = time.Second
	})
	r := runScenario(t, env, "S7")
	payments := platformPayments(t, env)
	charges := func(orderID int64) (n, cents int64, ids []string) {
		for _, p := range payments {
			if p.MerchantOrderNo == strconv.FormatInt(orderID, 10) ||
				strings.HasPrefix(p.MerchantOrderNo, strconv.FormatInt(orderID, 10)+"-") {
				ids = append(ids, p.ID)
				if p.Status == "SUCCESS" {
					n++
					cents += p.AmountCents
				}
			}
		}
		return n, cents, ids
	}

	u := sideRows(t, env, "S7-unsafe")
	n, cents, _ := charges(u.orderID())
	assert.EqualValues(t, 2, n, "two charges at the platform for one order")
	assert.EqualValues(t, 2*2500, cents)
	assert.EqualValues(t, 0, u.n(`SELECT count(*) FROM idempotency_keys WHERE user_id IN `+sideUsers+` AND path LIKE '%/pay'`),
		"the unsafe route records no pay record")

	g := sideRows(t, env, "S7-guarded")
	o := g.orderID()
	n, cents, ids := charges(o)
	assert.EqualValues(t, 1, n, "one charge at the platform")
	assert.EqualValues(t, 2500, cents)
	require.Len(t, ids, 1, "one payment, under the order's own reference")
	assert.Equal(t, map[string]int64{"PAID": 1}, g.orders())
	assert.EqualValues(t, 1, g.n(`SELECT count(*) FROM orders WHERE user_id IN `+sideUsers+` AND payment_id = @pid`,
		sql.Named("pid", ids[0])), "the order is paid by that payment")
	assert.Equal(t, map[string]int64{"COMPLETED": 2}, g.keys(), "the order's key and the pay record")
	assert.EqualValues(t, 1, g.n(`SELECT count(*) FROM idempotency_keys WHERE user_id IN `+sideUsers+`
		AND path LIKE '%/pay' AND response_status = 201
		AND convert_from(response_body, 'UTF8')::jsonb->>'payment_id' = @pid`, sql.Named("pid", ids[0])),
		"the pay record replays that payment")
	settle(t, 1, g.ledgerRows, "credited once")
	assert.EqualValues(t, 25, g.balance())
	gm := r.Guarded.Measured
	assert.EqualValues(t, http.StatusServiceUnavailable, gm["first_status"])
	assert.EqualValues(t, 1, gm["first_outcome_unknown"], "503 payment_outcome_unknown, not \"try again\"")
	assert.EqualValues(t, 1, gm["lease_live_at_retry"], "the retry went out inside the first request's lease")
	assert.EqualValues(t, http.StatusConflict, gm["retry_status"], "PROCESSING under its lease")
	assert.EqualValues(t, 1, gm["retry_in_use"], "409 idempotency_key_in_use")
	assert.EqualValues(t, 1, gm["create_requests"], "the platform was asked to create the payment once (GET /admin/creates)")
	assert.EqualValues(t, 2, r.Unsafe.Measured["create_requests"], "the unsafe retry asked again, under a new reference")
	assert.EqualValues(t, 1, gm["final_replayed"])
}

// TestS8: holder A (fence 1) claims a pay record and pauses; B takes it over with fence 2; A writes its
// stale FAILED_RETRYABLE while B still holds the record PROCESSING, then B completes it. The fence
// alone can refuse A (mutant pay-finish-fence).
func TestS8(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	before := fenceRejections(t, env)
	r := runScenario(t, env, "S8")
	// The guarded side's late write ran in the orders process and was refused there: its metric moved
	// by one (the unsafe twin's write is never refused, and counts on a registry of its own).
	assert.Equal(t, before+1, fenceRejections(t, env), "orders' idemshop_idempotency_fence_rejections_total")
	for side, m := range map[string]map[string]int64{"unsafe": r.Unsafe.Measured, "guarded": r.Guarded.Measured} {
		assert.EqualValues(t, 1, m["processing_at_late_write"], "%s: A wrote while B held the record PROCESSING", side)
	}
	assert.EqualValues(t, 0, r.Unsafe.Measured["b_finished"], "A's unfenced write took the record from B")
	assert.EqualValues(t, 1, r.Guarded.Measured["b_finished"])
	record := func(s rows) (state string, status, fence int64, code, paymentID string) {
		var rec struct {
			State          string
			ResponseStatus int64
			Fence          int64
			Code           string
			PaymentID      string
		}
		require.NoError(t, env.DB.Raw(`SELECT state, response_status, fence,
			  COALESCE(convert_from(response_body, 'UTF8')::jsonb->>'code', '') AS code,
			  COALESCE(convert_from(response_body, 'UTF8')::jsonb->>'payment_id', '') AS payment_id
			FROM idempotency_keys WHERE user_id IN `+sideUsers+` AND idempotency_key LIKE 's8-pay-%'`, s.args()...).
			Scan(&rec).Error)
		return rec.State, rec.ResponseStatus, rec.Fence, rec.Code, rec.PaymentID
	}

	u := sideRows(t, env, "S8-unsafe")
	state, status, fence, code, pay := record(u)
	assert.Equal(t, "FAILED_RETRYABLE", state, "A's stale write overwrote B's claim, and B's result was refused")
	assert.EqualValues(t, 503, status)
	assert.Equal(t, "payment_unavailable", code)
	assert.Empty(t, pay, "the key forgets B's payment: the next retry runs the pay again")
	assert.EqualValues(t, 2, fence, "B's token, which A's write never checked")

	g := sideRows(t, env, "S8-guarded")
	state, status, fence, _, pay = record(g)
	assert.Equal(t, "COMPLETED", state, "A's late write was refused")
	assert.EqualValues(t, 201, status)
	assert.Equal(t, fmt.Sprintf("lab_pay_s8_%d", g.orderID()), pay)
	assert.EqualValues(t, 2, fence)
}

// TestS9: 20 orders (stock 100, 15.00 EUR: 15 points each), each SUCCESS sent 3 times, all 60 at once:
// once to an orders whose Redis is down, once to the running one. S9 has no unsafe variant: both storms
// are the guarded side, and both must pay each order once. Latency is reported, not asserted.
func TestS9(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S9")
	// No unsafe twin: nothing ran on that side, so nothing is claimed reproduced; the verdict is the
	// guarded side's alone.
	assert.True(t, r.Unsafe.NoTwin, "S9 has no unsafe twin")
	assert.False(t, r.Unsafe.Reproduced, "no failure is claimed for a side that did not run")
	assert.Empty(t, r.Unsafe.Measured)
	assert.True(t, r.Passed(), "a scenario without a twin passes on its guarded side")
	for _, fixture := range []string{"S9-guarded-redis-down", "S9-guarded-redis-up"} {
		s := sideRows(t, env, fixture)
		assert.Equal(t, map[string]int64{"PAID": 20}, s.orders(), fixture)
		assert.EqualValues(t, 100-20, s.stock(), fixture)
		assert.Equal(t, map[string]int64{"applied": 20, "duplicate": 40}, s.callbacks(), fixture)
		assert.EqualValues(t, 20, s.outbox("order.paid"), fixture)
		settle(t, 20, s.ledgerRows, "%s: one credit per order", fixture)
		assert.EqualValues(t, 20*15, s.balance(), fixture)
	}
	g := r.Guarded.Measured
	assert.EqualValues(t, 0, g["degraded_status_5xx"], "no 5xx without Redis")
	assert.EqualValues(t, 0, g["normal_status_5xx"])
}

// TestS12: a full refund delivered before the SUCCESS it refunds, for an order of 2 units (stock 100) at
// 12.50 EUR (25 points). The test reads the scenario's rows back with queries of its own, and also sends
// the same two signed events itself, on an order of its own, through each route.
func TestS12(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	runScenario(t, env, "S12")
	byStatus := func(s rows) map[string]int64 {
		return s.byKey(`SELECT status || ':' || outcome AS k, count(*) AS n FROM payment_callbacks
			WHERE order_id IN ` + sideOrders + ` GROUP BY 1`)
	}
	refunds := func(s rows) (events, cents int64) {
		return s.n(`SELECT count(*) FROM order_refund_events WHERE order_id IN ` + sideOrders),
			s.n(`SELECT refunded_cents FROM orders WHERE id IN ` + sideOrders)
	}

	u := sideRows(t, env, "S12-unsafe")
	o := u.orderID()
	assert.Equal(t, map[string]int64{"PAID": 1}, u.orders(), "paid, though the platform refunded it")
	assert.EqualValues(t, 100-2, u.stock(), "the stock stays taken")
	assert.Equal(t, map[string]int64{"REFUNDED:stale": 1, "SUCCESS:applied": 1}, byStatus(u), "the refund was dropped")
	events, cents := refunds(u)
	assert.EqualValues(t, 0, events, "recorded nowhere")
	assert.EqualValues(t, 0, cents)
	assert.EqualValues(t, 1, u.outbox("order.paid"))
	assert.EqualValues(t, 0, u.outbox("order.refunded"))
	assert.Equal(t, map[string]int64{fmt.Sprintf("order-paid:%d", o): 25}, u.ledger(), "the points stay credited")

	g := sideRows(t, env, "S12-guarded")
	o = g.orderID()
	assert.Equal(t, map[string]int64{"REFUNDED": 1}, g.orders())
	assert.EqualValues(t, 100, g.stock(), "the stock came back")
	assert.Equal(t, map[string]int64{"REFUNDED:recorded": 1, "SUCCESS:applied": 1}, byStatus(g))
	events, cents = refunds(g)
	assert.EqualValues(t, 1, events, "the refund is a fact, recorded once")
	assert.EqualValues(t, 2500, cents)
	assert.EqualValues(t, 1, g.outbox("order.paid"))
	assert.EqualValues(t, 1, g.outbox("order.refunded"))
	assert.Equal(t, map[string]int64{fmt.Sprintf("order-paid:%d", o): 25, fmt.Sprintf("order-refunded:%d", o): -25},
		g.ledger(), "credited, then reversed, once each")
	assert.EqualValues(t, 0, g.balance())

	// Unsafe: the refund is answered "stale" and recorded nowhere; the SUCCESS pays, takes 2 units and
	// credits the points, and nothing gives them back.
	got := s12Replay(t, env, "/lab/unsafe/s12/payments/callback")
	assert.Equal(t, "PAID", got.Status)
	assert.Equal(t, "stale", got.RefundOutcome)
	assert.Equal(t, "applied", got.SuccessOutcome)
	assert.EqualValues(t, -2, got.Stock-100)
	assert.EqualValues(t, 1, got.PaidRows)
	assert.EqualValues(t, 0, got.RefundedRows)
	assert.EqualValues(t, 0, got.RefundedCents)
	assert.EqualValues(t, 25, got.Balance)

	// Guarded: the refund is "recorded"; the SUCCESS pays and, finding it, refunds in the same
	// transaction: stock back, order.paid and order.refunded once each, points credited and reversed.
	got = s12Replay(t, env, "/v1/payments/callback")
	assert.Equal(t, "REFUNDED", got.Status)
	assert.Equal(t, "recorded", got.RefundOutcome)
	assert.Equal(t, "applied", got.SuccessOutcome)
	assert.EqualValues(t, 0, got.Stock-100)
	assert.EqualValues(t, 1, got.PaidRows)
	assert.EqualValues(t, 1, got.RefundedRows)
	assert.EqualValues(t, 2500, got.RefundedCents)
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
// then its SUCCESS to path, waits until the outbox rows are published and consumed, and reads the rows
// (the env keeps them; the test's database goes at its end).
func s12Replay(t *testing.T, env *lab.Env, path string) s12Rows {
	t.Helper()
	ctx := context.Background()
	f, err := env.NewFixture(ctx, "S12-replay")
	require.NoError(t, err)
	product, err := f.Product(ctx, 100, 1250)
	require.NoError(t, err)
	o, resp, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s12-test-%d", time.Now().UnixNano()), product, 2)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	for _, cb := range []callback.Callback{
		lab.Callback(o.ID, callback.StatusRefunded, o.AmountCents, fmt.Sprintf("s12-test-%d-refund", o.ID)),
		lab.Callback(o.ID, callback.StatusSuccess, o.AmountCents, fmt.Sprintf("s12-test-%d-success", o.ID)),
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
	return got
}

// fenceRejections reads idemshop_idempotency_fence_rejections_total from the orders process's /metrics.
func fenceRejections(t *testing.T, env *lab.Env) float64 {
	t.Helper()
	r, err := env.Do(context.Background(), http.MethodGet, env.OrdersURL+"/metrics", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.Status)
	for line := range strings.SplitSeq(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, "idemshop_idempotency_fence_rejections_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatal("idemshop_idempotency_fence_rejections_total is not on orders' /metrics")
	return 0
}

// S12 with points-consumer unable to write (the ledger locked for the whole run) is an error of the
// scenario, not a pass: measured without waiting, its rows read REFUNDED, stock +0, points +0, which
// is the guarded side's expected end, with no credit and no reversal written (a newcomer's finding:
// S12 passed with points-consumer down).
func TestS12IsAnErrorWhileItsPointsAreNotConsumed(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	env.Quiet = 300 * time.Millisecond
	tx := env.DB.Begin()
	require.NoError(t, tx.Error)
	t.Cleanup(func() { tx.Rollback() })
	require.NoError(t, tx.Exec(`LOCK TABLE points_ledger IN SHARE ROW EXCLUSIVE MODE`).Error)

	sc, err := lab.Select([]string{"S12"})
	require.NoError(t, err)
	r := lab.Run(context.Background(), env, sc, nil)[0]
	assert.Contains(t, r.Error, "were not all consumed")
	assert.False(t, r.Guarded.OK, "no pass without the points")
}
