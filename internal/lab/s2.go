package lab

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"idemshop/internal/idempotency"
)

// twinSides runs side twice, unsafe first, each time on a fresh fixture of its own (named after its side:
// "S2-unsafe", "S2-guarded") that is deleted afterwards, and returns both measurements. S2, S3, S4, S10
// and S12 share it.
func twinSides(ctx context.Context, env *Env, id string,
	side func(ctx context.Context, f *Fixture, unsafe bool) (map[string]int64, error)) (unsafeM, guardedM map[string]int64, err error) {
	for _, unsafe := range []bool{true, false} {
		f, err := env.NewFixture(ctx, SideName(id, unsafe))
		if err != nil {
			return nil, nil, err
		}
		m, err := side(ctx, f, unsafe)
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", id, err)
		}
		if unsafe {
			unsafeM = m
		} else {
			guardedM = m
		}
	}
	return unsafeM, guardedM, nil
}

// countRows runs a SELECT count(*) ... query.
func countRows(ctx context.Context, env *Env, query string, args ...any) (int64, error) {
	var n int64
	if err := env.DB.WithContext(ctx).Raw(query, args...).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count rows: %w", err)
	}
	return n, nil
}

// b2i is 1 for true: Measured holds numbers only.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// runS2 is a double submit: the same create-order request, with one Idempotency-Key, sent by an
// impatient client N times at once. Unsafe: POST /lab/unsafe/v1/s2/orders, where the key is looked up,
// then the order created, then the key stored, each on its own (idempotency.CheckThenInsert). Guarded:
// POST /v1/orders, where the key row and the order commit in one transaction.
func runS2(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	const n = 10
	var u Unsafe
	var g Guarded
	um, gm, err := twinSides(ctx, env, "S2", func(ctx context.Context, f *Fixture, unsafe bool) (map[string]int64, error) {
		path := "/v1/orders"
		if unsafe {
			path = "/lab/unsafe/v1/s2/orders"
		}
		return s2Side(ctx, f, path, n, unsafe)
	})
	if err != nil {
		return u, g, err
	}
	u.Measured, g.Measured = um, gm
	u.Reproduced = um["orders"] > 1
	u.Detail = fmt.Sprintf("%d identical POSTs, one key: %d orders created; answers %d×201 naming %d order(s), %d×5xx (orders committed anyway), %d other",
		n, um["orders"], um["answers_201"], um["distinct_orders"], um["answers_5xx"], um["answers_other"])
	g.OK = gm["orders"] == 1 && gm["answers_201"] >= 1 && gm["answers_other"] == 0 && gm["answers_5xx"] == 0 &&
		gm["distinct_bodies"] == 1 && gm["replayed"] == 1
	g.Detail = fmt.Sprintf("%d identical POSTs, one key: %d order; answers %d×201 (%d distinct bodies), %d×409 in use, %d other; retry replayed: %t",
		n, gm["orders"], gm["answers_201"], gm["distinct_bodies"], gm["answers_409"], gm["answers_other"]+gm["answers_5xx"], gm["replayed"] == 1)
	return u, g, nil
}

// s2Side fires the burst at path and counts the user's orders in the database. The unsafe race is
// real, not staged: if a burst happens to create one order only, it is repeated with a new key, a few
// times at most (Measured["bursts"]). The guarded side then retries the key once more, expecting the
// stored answer replayed.
func s2Side(ctx context.Context, f *Fixture, path string, n int, unsafe bool) (map[string]int64, error) {
	product, err := f.Product(ctx, 100, 1250)
	if err != nil {
		return nil, err
	}
	const maxBursts = 3
	var m map[string]int64
	var first []byte // the body of a 201 of the last burst
	key := ""
	for burst := 1; burst <= maxBursts; burst++ {
		key = fmt.Sprintf("s2-%d-%d-%d", f.UserID, burst, time.Now().UnixNano())
		before, err := countRows(ctx, f.env, `SELECT count(*) FROM orders WHERE user_id = ?`, f.UserID)
		if err != nil {
			return nil, err
		}
		type answer struct {
			o   Order
			r   Response
			err error
		}
		answers := Parallel(n, func(int) answer {
			o, r, err := f.CreateOrder(ctx, path, key, product, 1)
			return answer{o, r, err}
		})
		m = map[string]int64{"requests": int64(n), "bursts": int64(burst)}
		orderIDs := map[int64]bool{}
		bodies := map[string]bool{}
		for _, a := range answers {
			switch {
			case a.err != nil:
				return nil, fmt.Errorf("create order: %w", a.err)
			case a.r.Status == http.StatusCreated:
				m["answers_201"]++
				orderIDs[a.o.ID] = true
				bodies[string(a.r.Body)] = true
				first = a.r.Body
			case a.r.Status == http.StatusConflict && a.r.Code() == idempotency.ErrKeyInUse.Code:
				m["answers_409"]++
			case a.r.Status >= 500:
				m["answers_5xx"]++
			default:
				m["answers_other"]++
			}
		}
		m["distinct_orders"], m["distinct_bodies"] = int64(len(orderIDs)), int64(len(bodies))
		after, err := countRows(ctx, f.env, `SELECT count(*) FROM orders WHERE user_id = ?`, f.UserID)
		if err != nil {
			return nil, err
		}
		m["orders"] = after - before
		if !unsafe || m["orders"] > 1 {
			break
		}
	}
	if !unsafe && first != nil {
		_, r, err := f.CreateOrder(ctx, path, key, product, 1)
		if err != nil {
			return nil, fmt.Errorf("retry: %w", err)
		}
		m["replayed"] = b2i(r.Status == http.StatusCreated && r.Header.Get(idempotency.ReplayedHeader) == "true" &&
			bytes.Equal(r.Body, first))
	}
	return m, nil
}
