package lab

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"idemshop/internal/callback"
	"idemshop/internal/invariants"
)

// runS12: the platform refunds a payment in full and its REFUNDED event reaches the shop before the
// SUCCESS it refunds (a delayed delivery). The lab sends the two signed events itself, in that order, to
// a PENDING order. Unsafe: POST /lab/unsafe/s12/payments/callback, where a refund of an order that is
// not PAID is answered 200 "stale" and dropped (callback.DropEarlyRefund): the SUCCESS then
// marks the order PAID, takes the stock and writes order.paid, and nothing gives them back. Guarded:
// POST /v1/payments/callback records the refund as a fact (refunded_cents), and the SUCCESS, finding it,
// refunds the order in its own transaction: stock back and order.refunded written, once each.
func runS12(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	const qty = 2
	var u Unsafe
	var g Guarded
	um, gm, err := twinSides(ctx, env, "S12", func(ctx context.Context, f *Fixture, unsafe bool) (map[string]int64, error) {
		path := "/v1/payments/callback"
		if unsafe {
			path = "/lab/unsafe/s12/payments/callback"
		}
		return s12Side(ctx, env, f, path, qty)
	})
	if err != nil {
		return u, g, err
	}
	u.Measured, g.Measured = um, gm
	u.Reproduced = um["status_paid"] == 1 && um["stock_delta"] == -qty && um["order_refunded_rows"] == 0
	u.Detail = s12Detail(um)
	g.OK = gm["status_refunded"] == 1 && gm["stock_delta"] == 0 &&
		gm["order_paid_rows"] == 1 && gm["order_refunded_rows"] == 1
	g.Detail = s12Detail(gm)
	return u, g, nil
}

func s12Detail(m map[string]int64) string {
	status := "neither PAID nor REFUNDED"
	switch {
	case m["status_paid"] == 1:
		status = "PAID"
	case m["status_refunded"] == 1:
		status = "REFUNDED"
	}
	return fmt.Sprintf("REFUNDED, then SUCCESS: order %s, stock %+d, order.paid %d, order.refunded %d, refunded %d of %d cents, points %+d",
		status, m["stock_delta"], m["order_paid_rows"], m["order_refunded_rows"], m["refunded_cents"], m["amount_cents"], m["points_delta"])
}

func s12Side(ctx context.Context, env *Env, f *Fixture, path string, qty int) (map[string]int64, error) {
	const initial, price = 100, 1250
	product, err := f.Product(ctx, initial, price)
	if err != nil {
		return nil, err
	}
	o, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s12-%d", time.Now().UnixNano()), product, qty)
	if err != nil || r.Status != http.StatusCreated {
		return nil, notCreated("create order", err, r)
	}
	// The platform's two events, signed with the shared secret, in the order they arrive.
	for _, cb := range []callback.Callback{
		Callback(o.ID, callback.StatusRefunded, o.AmountCents, fmt.Sprintf("s12-%d-refund", o.ID)),
		Callback(o.ID, callback.StatusSuccess, o.AmountCents, fmt.Sprintf("s12-%d-success", o.ID)),
	} {
		r, err := env.PostCallback(ctx, path, cb)
		if err != nil {
			return nil, fmt.Errorf("%s callback: %w", cb.Status, err)
		}
		if r.Status != http.StatusOK {
			return nil, fmt.Errorf("%s callback: HTTP %d: %s", cb.Status, r.Status, r.Body)
		}
	}

	// Both callbacks committed before their 200. What follows them is asynchronous: the relay publishes
	// the outbox rows and points-consumer credits (order.paid) and reverses (order.refunded). Wait for
	// that, bounded, so that nothing lands after the fixture is gone and the points are settled.
	settled, err := Eventually(ctx, env.Quiet, func() (bool, error) {
		var pending int64
		err := env.DB.WithContext(ctx).Raw(`SELECT
			  (SELECT count(*) FROM outbox WHERE (payload->>'order_id')::bigint = @o AND published_at IS NULL)
			+ greatest(0, (SELECT count(*) FROM outbox WHERE routing_key = 'order.paid' AND (payload->>'order_id')::bigint = @o)
			            - (SELECT count(*) FROM points_ledger WHERE biz_id = 'order-paid:' || CAST(@o AS bigint)))
			+ greatest(0, (SELECT count(*) FROM outbox WHERE routing_key = 'order.refunded' AND (payload->>'order_id')::bigint = @o)
			            - (SELECT count(*) FROM points_ledger WHERE biz_id = 'order-refunded:' || CAST(@o AS bigint)))`,
			map[string]any{"o": o.ID}).Scan(&pending).Error
		return pending == 0, err
	})
	if err != nil {
		return nil, err
	}
	if !settled {
		// Measured now, the rows would read as a pass with no credit and no reversal written.
		return nil, fmt.Errorf("order %d's events were not all consumed within %s (is points-consumer running?)", o.ID, env.Quiet)
	}

	// Measured on the rows themselves.
	var row struct {
		Status        string
		RefundedCents int64
		AmountCents   int64
		Stock         int64
		PaidRows      int64
		RefundedRows  int64
		RefundEvents  int64
	}
	err = env.DB.WithContext(ctx).Raw(`SELECT o.status, o.refunded_cents, o.amount_cents, p.stock,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.paid' AND (x.payload->>'order_id')::bigint = o.id) AS paid_rows,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.refunded' AND (x.payload->>'order_id')::bigint = o.id) AS refunded_rows,
		  (SELECT count(*) FROM order_refund_events e WHERE e.order_id = o.id) AS refund_events
		FROM orders o JOIN products p ON p.id = o.product_id WHERE o.id = ?`, o.ID).Scan(&row).Error
	if err != nil {
		return nil, fmt.Errorf("read order %d: %w", o.ID, err)
	}
	balance, err := invariants.Balance(ctx, env.DB, f.UserID)
	if err != nil {
		return nil, err
	}
	return map[string]int64{
		"status_paid":         b2i(row.Status == "PAID"),
		"status_refunded":     b2i(row.Status == "REFUNDED"),
		"stock_delta":         row.Stock - initial,
		"order_paid_rows":     row.PaidRows,
		"order_refunded_rows": row.RefundedRows,
		"refund_events":       row.RefundEvents,
		"refunded_cents":      row.RefundedCents,
		"amount_cents":        row.AmountCents,
		"points_delta":        balance,
	}, nil
}
