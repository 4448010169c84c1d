package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"idemshop/internal/callback"
	"idemshop/internal/invariants"
	"idemshop/internal/paysig"
)

// s1Orders is how many orders S1 pays, each with its own triple callback. The copies of one order are
// released together at the shop (ReleaseTogether), but the three may still not overlap inside it on
// a given run; the guard that only overlap tests (the conditional UPDATE) must be tested on every run,
// so each run gives it several chances.
const s1Orders = 3

// runS1 is the incident: one "payment succeeded" callback delivered three times at once, for each of
// s1Orders orders. Unsafe: POST /lab/unsafe/payments/callback, no state guard. Guarded:
// POST /v1/payments/callback, which also gets, first, a forged copy of each order's event (signed
// with another secret) and one without a signature: both must be 401 and change nothing. The copies
// the lab sends are otherwise all correctly signed, so a shop that took any signature would pass.
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
		pointsPerOrder := m["points_per_order"]
		if side.unsafe {
			u.Measured = m
			u.Reproduced = m["stock_delta"] == -copies*qty*s1Orders && m["points_delta"] == copies*pointsPerOrder*s1Orders
			u.Detail = fmt.Sprintf("%d orders x %d callbacks: stock %+d, points %+d, %d applied",
				s1Orders, copies, m["stock_delta"], m["points_delta"], m["applied"])
		} else {
			g.Measured = m
			g.OK = m["stock_delta"] == -qty*s1Orders && m["points_delta"] == pointsPerOrder*s1Orders &&
				m["applied"] == s1Orders && m["violations"] == 0 &&
				m["forged_refused"] == m["forged_sent"] && m["forged_sent"] == 2*s1Orders && m["moved_by_forged"] == 0
			g.Detail = fmt.Sprintf("%d orders x %d callbacks: stock %+d, points %+d, %d applied; "+
				"%d forged copies first (wrong signature, none): %d refused 401, %d orders moved by them",
				s1Orders, copies, m["stock_delta"], m["points_delta"], m["applied"],
				m["forged_sent"], m["forged_refused"], m["moved_by_forged"])
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
	orders := make([]Order, s1Orders)
	ids := make([]int64, s1Orders)
	bodies := make([][]byte, s1Orders)
	for i := range orders {
		o, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s1-%d-%d", time.Now().UnixNano(), i), product, qty)
		if err != nil || r.Status != http.StatusCreated {
			return nil, notCreated("S1: create order", err, r)
		}
		orders[i], ids[i] = o, o.ID
		// The copies of one event are byte-identical, as a platform's resends are.
		if bodies[i], err = json.Marshal(Callback(o.ID, callback.StatusSuccess, o.AmountCents, fmt.Sprintf("lab-s1-%d", o.ID))); err != nil {
			return nil, err
		}
	}
	m := map[string]int64{"orders": s1Orders, "points_per_order": s1PointsPerOrder(orders)}
	if !unsafe {
		if err := s1Forged(ctx, env, path, orders, bodies, product, initial, m); err != nil {
			return nil, err
		}
	}
	// Every copy of every order at once: each request's last byte is held until all have sent the
	// rest, so the handlers start together rather than in the order their connections opened.
	answers := ReleaseTogether(ctx, env, s1Orders*copies, func(i int) (string, []byte, []string) {
		body := bodies[i/copies]
		return env.OrdersURL + path, body, []string{paysig.Header, paysig.Sign(env.Secret, time.Now(), body)}
	})
	for _, a := range answers {
		if a.Err == nil && a.Status != http.StatusOK {
			a.Err = fmt.Errorf("HTTP %d: %s", a.Status, a.Body)
		}
		if a.Err != nil {
			return nil, fmt.Errorf("S1: callback: %w", a.Err)
		}
	}
	wantPoints := m["points_per_order"] * s1Orders
	if unsafe {
		wantPoints *= int64(copies)
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
	delta, _, err := invariants.Stock(ctx, env.DB, product, initial, -int64(qty*s1Orders))
	if err != nil {
		return nil, err
	}
	balance, err := invariants.Balance(ctx, env.DB, f.UserID)
	if err != nil {
		return nil, err
	}
	facts, err := invariants.Load(ctx, env.DB, ids)
	if err != nil {
		return nil, err
	}
	m["stock_delta"], m["points_delta"] = delta, balance
	for _, fa := range facts {
		m["received"] += fa.CallbacksReceived
		m["applied"] += fa.CallbacksApplied
		// The worst order: what one customer saw.
		m["max_applied_per_order"] = max(m["max_applied_per_order"], fa.CallbacksApplied)
	}
	if !unsafe {
		m["violations"] = int64(len(invariants.PaidOnce(facts, true)))
	}
	return m, nil
}

func s1PointsPerOrder(orders []Order) int64 { return orders[0].AmountCents / 100 }

// s1Forged sends each order's event as a forger would, before the platform's copies: once signed with
// a secret that is not the shop's, once with no signature. Each must be 401, and afterwards every
// order must still be PENDING with the stock untouched (a forgery the shop took would pay the order,
// and the genuine copies would then look like duplicates).
func s1Forged(ctx context.Context, env *Env, path string, orders []Order, bodies [][]byte, product, initial int64, m map[string]int64) error {
	wrong := append([]byte("not-"), env.Secret...)
	for i := range orders {
		for _, headers := range [][]string{{paysig.Header, paysig.Sign(wrong, time.Now(), bodies[i])}, nil} {
			r, err := env.Do(ctx, http.MethodPost, env.OrdersURL+path, bodies[i], headers...)
			if err != nil {
				return fmt.Errorf("S1: forged callback: %w", err)
			}
			m["forged_sent"]++
			if r.Status == http.StatusUnauthorized {
				m["forged_refused"]++
			}
		}
	}
	ids := make([]int64, len(orders))
	for i, o := range orders {
		ids[i] = o.ID
	}
	var moved, stock int64
	if err := env.DB.WithContext(ctx).Raw(`SELECT count(*) FROM orders WHERE id IN ? AND status <> 'PENDING'`, ids).
		Scan(&moved).Error; err != nil {
		return err
	}
	if err := env.DB.WithContext(ctx).Raw(`SELECT stock FROM products WHERE id = ?`, product).Scan(&stock).Error; err != nil {
		return err
	}
	m["moved_by_forged"] = moved
	m["stock_delta_after_forged"] = stock - initial
	if stock != initial && moved == 0 {
		m["moved_by_forged"] = 1 // the stock moved though no order did: still something applied
	}
	return nil
}
