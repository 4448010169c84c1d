package lab_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Idempotency-Key and form-token scenarios: each runs its unsafe and guarded side against the
// in-process shop; the test then reads each side's rows with its own queries.

// TestS2: ten identical POST /v1/orders with one Idempotency-Key, at once (1 unit, stock 100). The unsafe
// side repeats its burst with a new key, a few times at most, until one burst made several orders.
func TestS2(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S2")

	u := sideRows(t, env, "S2-unsafe")
	orders, keys := u.n(`SELECT count(*) FROM orders WHERE user_id IN `+sideUsers), u.n(`SELECT count(*) FROM idempotency_keys WHERE user_id IN `+sideUsers)
	assert.Greater(t, orders, keys, "orders that no key row answers for: a double submit made two orders")
	assert.Equal(t, map[string]int64{"PENDING": orders}, u.orders())

	g := sideRows(t, env, "S2-guarded")
	assert.Equal(t, map[string]int64{"PENDING": 1}, g.orders(), "one order for one key")
	assert.Equal(t, map[string]int64{"COMPLETED": 1}, g.keys())
	assert.EqualValues(t, 1, g.n(`SELECT count(*) FROM idempotency_keys k WHERE k.user_id IN `+sideUsers+`
		AND k.response_status = 201
		AND (convert_from(k.response_body, 'UTF8')::jsonb->>'id')::bigint IN `+sideOrders),
		"the stored answer, replayed to every retry, is that order")
	assert.EqualValues(t, 100, g.stock(), "stock is taken at payment, not at order time")

	// The answers, which no row records: only 201s (one body) and 409s in use on the guarded side.
	assert.Zero(t, r.Guarded.Measured["answers_5xx"]+r.Guarded.Measured["answers_other"], "only 201 or 409 in use")
	assert.EqualValues(t, 1, r.Guarded.Measured["distinct_bodies"], "every 201 is the same answer")
	assert.EqualValues(t, 1, r.Guarded.Measured["replayed"])
}

// TestS3: an order for 2 units of a product with 1 (409 insufficient_stock), a restock to 100, and 3
// retries of the same key and body.
func TestS3(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S3")

	u := sideRows(t, env, "S3-unsafe")
	assert.Empty(t, u.orders(), "no retry got through")
	assert.Equal(t, map[string]int64{"PROCESSING": 1}, u.keys(), "the key row outlived the failed work, stuck")
	assert.EqualValues(t, 3, r.Unsafe.Measured["retries_blocked"], "each retry answered 409 idempotency_key_in_use")

	g := sideRows(t, env, "S3-guarded")
	assert.Equal(t, map[string]int64{"PENDING": 1}, g.orders(), "the retry ran")
	assert.EqualValues(t, 1, g.n(`SELECT count(*) FROM orders WHERE user_id IN `+sideUsers+` AND quantity = 2`))
	assert.Equal(t, map[string]int64{"COMPLETED": 1}, g.keys(), "the failure left no key row; the retry's completed")
	assert.EqualValues(t, 1, g.n(`SELECT count(*) FROM idempotency_keys WHERE user_id IN `+sideUsers+` AND response_status = 201`))
	assert.EqualValues(t, 0, r.Guarded.Measured["key_rows_after_failure"], "rolled back with the work")
}

// TestS10: key K with body A (1 unit), then K with body B (2 units). The rows are the same on both
// sides (one order, of 1 unit: B never ran); the difference is the answer to B, which the test also
// checks by sending A and B itself, through each route, as fresh users.
func TestS10(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	runScenario(t, env, "S10")
	for _, fixture := range []string{"S10-unsafe", "S10-guarded"} {
		s := sideRows(t, env, fixture)
		assert.Equal(t, map[string]int64{"PENDING": 1}, s.orders(), fixture)
		assert.EqualValues(t, 0, s.n(`SELECT count(*) FROM orders WHERE user_id IN `+sideUsers+` AND quantity = 2`),
			"%s: B's order never happened", fixture)
		assert.Equal(t, map[string]int64{"COMPLETED": 1}, s.keys(), fixture)
	}

	ctx := context.Background()
	for _, c := range []struct {
		path    string
		statusB int
	}{{"/lab/unsafe/v1/s10/orders", http.StatusCreated}, {"/v1/orders", http.StatusUnprocessableEntity}} {
		f, err := env.NewFixture(ctx, "S10-replay")
		require.NoError(t, err)
		product, err := f.Product(ctx, 100, 1250)
		require.NoError(t, err)
		key := fmt.Sprintf("s10-replay-%d", f.UserID)
		_, a, err := f.CreateOrder(ctx, c.path, key, product, 1)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, a.Status, "%s: %s", c.path, a.Body)
		_, b, err := f.CreateOrder(ctx, c.path, key, product, 2)
		require.NoError(t, err)
		assert.Equal(t, c.statusB, b.Status, "%s: body B with A's key: %s", c.path, b.Body)
		if c.statusB == http.StatusCreated {
			assert.Equal(t, string(a.Body), string(b.Body), "%s: B was told A's order is its own", c.path)
		}
		var n int64
		require.NoError(t, env.DB.Raw(`SELECT count(*) FROM orders WHERE user_id = ?`, f.UserID).Scan(&n).Error)
		assert.EqualValues(t, 1, n, c.path)
	}
}

// TestS4: a redeem of coupon-10 (10 points) with 0 points (409 insufficient_points), a credit of 25
// points, and the same form submitted twice more.
func TestS4(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S4")

	u := sideRows(t, env, "S4-unsafe")
	assert.EqualValues(t, 0, u.n(`SELECT count(*) FROM coupons WHERE user_id IN `+sideUsers), "the user could never redeem")
	assert.EqualValues(t, 1, u.ledgerRows(), "the credit, and no debit")
	assert.EqualValues(t, 25, u.balance(), "the points the user could not spend")
	assert.EqualValues(t, http.StatusBadRequest, r.Unsafe.Measured["resubmit_status"], "form_token_invalid")

	g := sideRows(t, env, "S4-guarded")
	assert.EqualValues(t, 1, g.n(`SELECT count(*) FROM coupons WHERE user_id IN `+sideUsers+`
		AND reward = 'coupon-10' AND balance_after = 15`), "one coupon, redeemed once")
	assert.EqualValues(t, 2, g.ledgerRows(), "the credit and one debit")
	assert.EqualValues(t, -10, g.n(`SELECT COALESCE(sum(delta), 0)::bigint FROM points_ledger WHERE user_id IN `+sideUsers+` AND delta < 0`))
	assert.EqualValues(t, 15, g.balance())
	assert.EqualValues(t, 1, r.Guarded.Measured["replayed"], "the second resubmit replayed the first one's answer")
}
