package lab

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"idemshop/internal/callback"
	"idemshop/internal/invariants"
)

// runS1 is the incident: one "payment succeeded" callback delivered three times at once.
// Unsafe: POST /lab/unsafe/payments/callback, no state guard. Guarded: POST /v1/payments/callback.
func runS1(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	const copies, qty = 3, 2
	var u Unsafe
	var g Guarded
	for _, side := range []struct {
		unsafe bool
		path   string
	}{{true, "/lab/unsafe/payments/callback"}, {false, "/v1/payments/callback"}} {
		f, err := env.NewFixture(ctx, SideName("S1", side.unsafe))
		if err != nil {
			return u, g, err
		}
		m, err := s1Side(ctx, env, f, side.path, copies, qty, side.unsafe)
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		if err != nil {
			return u, g, err
		}
		pointsPerCopy := m["points_per_order"]
		if side.unsafe {
			u.Measured = m
			u.Reproduced = m["stock_delta"] == -copies*qty && m["points_delta"] == copies*pointsPerCopy
			u.Detail = fmt.Sprintf("%d callbacks: stock %+d, points %+d", copies, m["stock_delta"], m["points_delta"])
		} else {
			g.Measured = m
			g.OK = m["stock_delta"] == -qty && m["points_delta"] == pointsPerCopy && m["violations"] == 0
			g.Detail = fmt.Sprintf("%d callbacks: stock %+d, points %+d, %d applied", copies, m["stock_delta"], m["points_delta"], m["applied"])
		}
	}
	return u, g, nil
}

func s1Side(ctx context.Context, env *Env, f *Fixture, path string, copies, qty int, unsafe bool) (map[string]int64, error) {
	const initial, price = 100, 1250
	product, err := f.Product(ctx, initial, price)
	if err != nil {
		return nil, err
	}
	o, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s1-%d", time.Now().UnixNano()), product, qty)
	if err != nil || r.Status != http.StatusCreated {
		return nil, notCreated("S1: create order", err, r)
	}
	cb := Callback(o.ID, callback.StatusSuccess, o.AmountCents, fmt.Sprintf("lab-s1-%d", o.ID))
	answers := Parallel(copies, func(int) error {
		r, err := env.PostCallback(ctx, path, cb)
		if err == nil && r.Status != http.StatusOK {
			err = fmt.Errorf("HTTP %d: %s", r.Status, r.Body)
		}
		return err
	})
	for _, err := range answers {
		if err != nil {
			return nil, fmt.Errorf("S1: callback: %w", err)
		}
	}
	pointsPerOrder := o.AmountCents / 100
	wantPoints := pointsPerOrder
	if unsafe {
		wantPoints = int64(copies) * pointsPerOrder
	}
	// The guarded side credits through outbox → RabbitMQ → points-consumer: wait for it, bounded.
	settled, err := Eventually(ctx, env.Quiet, func() (bool, error) {
		b, err := invariants.Balance(ctx, env.DB, f.UserID)
		return b >= wantPoints, err
	})
	if err != nil {
		return nil, err
	}
	if !settled {
		return nil, fmt.Errorf("the points were not credited within %s (is points-consumer running?)", env.Quiet)
	}
	delta, _, err := invariants.Stock(ctx, env.DB, product, initial, -int64(qty))
	if err != nil {
		return nil, err
	}
	balance, err := invariants.Balance(ctx, env.DB, f.UserID)
	if err != nil {
		return nil, err
	}
	facts, err := invariants.Load(ctx, env.DB, []int64{o.ID})
	if err != nil {
		return nil, err
	}
	m := map[string]int64{"stock_delta": delta, "points_delta": balance, "points_per_order": pointsPerOrder}
	if len(facts) == 1 {
		m["received"], m["applied"] = facts[0].CallbacksReceived, facts[0].CallbacksApplied
	}
	if !unsafe {
		m["violations"] = int64(len(invariants.PaidOnce(facts, true)))
	}
	return m, nil
}
