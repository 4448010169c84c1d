package lab

import (
	"context"
	"fmt"
	"net/http"

	"idemshop/internal/idempotency"
	"idemshop/internal/orders"
)

// runS3: the key row is written, then the business step fails. The order asks for more than the stock
// (409 insufficient_stock), the shop restocks, and the client retries the same key and body, as it
// should. Unsafe: POST /lab/unsafe/v1/s3/orders, whose key row committed before the failing work
// (idempotency.CommitKeyFirst), so it is still PROCESSING and the retry is refused. Guarded: POST
// /v1/orders, where the failure rolled the key row back with the work, so the retry runs.
func runS3(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	const retries = 3
	var u Unsafe
	var g Guarded
	um, gm, err := twinSides(ctx, env, "S3", func(ctx context.Context, f *Fixture, unsafe bool) (map[string]int64, error) {
		path := "/v1/orders"
		if unsafe {
			path = "/lab/unsafe/v1/s3/orders"
		}
		return s3Side(ctx, f, path, retries)
	})
	if err != nil {
		return u, g, err
	}
	u.Measured, g.Measured = um, gm
	u.Reproduced = um["first_insufficient_stock"] == 1 && um["retries_blocked"] == retries &&
		um["orders"] == 0 && um["key_processing"] == 1
	u.Detail = fmt.Sprintf("409 insufficient_stock, restocked; %d of %d retries refused 409 idempotency_key_in_use; "+
		"%d orders; key row still PROCESSING (nothing moves it on, and the reaper never deletes PROCESSING rows)",
		um["retries_blocked"], retries, um["orders"])
	g.OK = gm["first_insufficient_stock"] == 1 && gm["key_rows_after_failure"] == 0 && gm["retry_status"] == http.StatusCreated &&
		gm["orders"] == 1 && gm["key_completed"] == 1
	g.Detail = fmt.Sprintf("409 insufficient_stock left %d key rows; restocked; retry %d, %d order, key row COMPLETED: %t",
		gm["key_rows_after_failure"], gm["retry_status"], gm["orders"], gm["key_completed"] == 1)
	return u, g, nil
}

func s3Side(ctx context.Context, f *Fixture, path string, retries int) (map[string]int64, error) {
	const qty = 2
	product, err := f.Product(ctx, qty-1, 1250) // one unit short: a natural business failure
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("s3-%d", f.UserID)
	keyRows := func(state string) (int64, error) {
		return countRows(ctx, f.env, `SELECT count(*) FROM idempotency_keys
			WHERE user_id = ? AND idempotency_key = ? AND (? = '' OR state = ?)`, f.UserID, key, state, state)
	}
	m := map[string]int64{}
	_, r, err := f.CreateOrder(ctx, path, key, product, qty)
	if err != nil {
		return nil, fmt.Errorf("first POST: %w", err)
	}
	m["first_status"] = int64(r.Status)
	m["first_insufficient_stock"] = b2i(r.Status == http.StatusConflict && r.Code() == orders.ErrInsufficientStock.Code)
	if m["key_rows_after_failure"], err = keyRows(""); err != nil {
		return nil, err
	}
	// The shop restocks; the client's retry (same key, same body) should now succeed.
	if err := f.env.DB.WithContext(ctx).Exec(`UPDATE products SET stock = 100 WHERE id = ?`, product).Error; err != nil {
		return nil, fmt.Errorf("restock: %w", err)
	}
	for i := range retries {
		_, r, err := f.CreateOrder(ctx, path, key, product, qty)
		if err != nil {
			return nil, fmt.Errorf("retry: %w", err)
		}
		if i == 0 {
			m["retry_status"] = int64(r.Status)
		}
		if r.Status == http.StatusConflict && r.Code() == idempotency.ErrKeyInUse.Code {
			m["retries_blocked"]++
		}
		if r.Status == http.StatusCreated {
			break // the guarded side: done; later retries would only replay
		}
	}
	if m["orders"], err = countRows(ctx, f.env, `SELECT count(*) FROM orders WHERE user_id = ?`, f.UserID); err != nil {
		return nil, err
	}
	if m["key_processing"], err = keyRows(string(idempotency.StateProcessing)); err != nil {
		return nil, err
	}
	if m["key_completed"], err = keyRows(string(idempotency.StateCompleted)); err != nil {
		return nil, err
	}
	return m, nil
}
