package lab

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"idemshop/internal/idempotency"
)

// runS10: the same Idempotency-Key sent with a different body (a client that reuses keys, or a bug
// that keeps one key for the whole session). Body A orders 1 unit; body B, same key, orders 2. Unsafe:
// POST /lab/unsafe/v1/s10/orders, which replays whatever the key stored without comparing fingerprints
// (idempotency.IgnoreFingerprint): B's client gets A's 201 and believes its 2 units were ordered.
// Guarded: POST /v1/orders refuses B with 422 idempotency_key_reused.
func runS10(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	var u Unsafe
	var g Guarded
	um, gm, err := twinSides(ctx, env, "S10", func(ctx context.Context, f *Fixture, unsafe bool) (map[string]int64, error) {
		path := "/v1/orders"
		if unsafe {
			path = "/lab/unsafe/v1/s10/orders"
		}
		return s10Side(ctx, f, path)
	})
	if err != nil {
		return u, g, err
	}
	u.Measured, g.Measured = um, gm
	u.Reproduced = um["first_status"] == http.StatusCreated && um["second_status"]/100 == 2 &&
		um["second_got_first_body"] == 1 && um["orders_qty_2"] == 0
	u.Detail = fmt.Sprintf("key K: body A (qty 1) %d; body B (qty 2) %d with A's order in the body: %t; orders %d (qty 2: %d)",
		um["first_status"], um["second_status"], um["second_got_first_body"] == 1, um["orders"], um["orders_qty_2"])
	g.OK = gm["first_status"] == http.StatusCreated && gm["second_status"] == http.StatusUnprocessableEntity &&
		gm["second_key_reused"] == 1 && gm["orders"] == 1
	g.Detail = fmt.Sprintf("key K: body A (qty 1) %d; body B (qty 2) %d idempotency_key_reused: %t; orders %d",
		gm["first_status"], gm["second_status"], gm["second_key_reused"] == 1, gm["orders"])
	return u, g, nil
}

func s10Side(ctx context.Context, f *Fixture, path string) (map[string]int64, error) {
	product, err := f.Product(ctx, 100, 1250)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("s10-%d", f.UserID)
	_, a, err := f.CreateOrder(ctx, path, key, product, 1)
	if err != nil {
		return nil, fmt.Errorf("body A: %w", err)
	}
	_, b, err := f.CreateOrder(ctx, path, key, product, 2)
	if err != nil {
		return nil, fmt.Errorf("body B: %w", err)
	}
	m := map[string]int64{
		"first_status":          int64(a.Status),
		"second_status":         int64(b.Status),
		"second_got_first_body": b2i(a.Status == http.StatusCreated && bytes.Equal(a.Body, b.Body)),
		"second_replayed":       b2i(b.Header.Get(idempotency.ReplayedHeader) == "true"),
		"second_key_reused":     b2i(b.Code() == idempotency.ErrKeyReused.Code),
	}
	if m["orders"], err = countRows(ctx, f.env, `SELECT count(*) FROM orders WHERE user_id = ?`, f.UserID); err != nil {
		return nil, err
	}
	if m["orders_qty_2"], err = countRows(ctx, f.env, `SELECT count(*) FROM orders WHERE user_id = ? AND quantity = 2`, f.UserID); err != nil {
		return nil, err
	}
	return m, nil
}
