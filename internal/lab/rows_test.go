package lab_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
)

// The scenario tests' own view of the end state. The lab runs with Keep (newLabEnv), so a scenario's
// rows are still there when it returns, and a side's rows are found by its user's name,
// "lab-<scenario>-<side>-<hex>". Everything here is read with the test's own SQL (and payments-mock's
// GET /admin/payments); nothing comes from the lab's Measured numbers. The expected values in the tests
// are constants of each scenario's known setup.

// sideUsers is the set of user ids of one side, for the queries below (named argument @pat).
const sideUsers = `(SELECT id FROM users WHERE name LIKE @pat)`

// sideOrders is the set of order ids of one side.
const sideOrders = `(SELECT id FROM orders WHERE user_id IN ` + sideUsers + `)`

// rows reads one side of a scenario: the users whose name starts with "lab-<fixture>-".
type rows struct {
	t       *testing.T
	env     *lab.Env
	fixture string
}

// sideRows returns the reader of fixture ("S1-guarded", ...), after checking that the side made
// exactly one lab user.
func sideRows(t *testing.T, env *lab.Env, fixture string) rows {
	t.Helper()
	r := rows{t: t, env: env, fixture: fixture}
	require.EqualValues(t, 1, r.n(`SELECT count(*) FROM users WHERE name LIKE @pat`), "%s: one lab user", fixture)
	return r
}

func (r rows) args(extra ...any) []any {
	return append([]any{sql.Named("pat", "lab-"+r.fixture+"-%")}, extra...)
}

// n runs a query returning one integer.
func (r rows) n(query string, extra ...any) int64 {
	r.t.Helper()
	var n int64
	require.NoError(r.t, r.env.DB.Raw(query, r.args(extra...)...).Scan(&n).Error, "%s: %s", r.fixture, query)
	return n
}

// byKey runs a query returning (k text, n bigint) rows.
func (r rows) byKey(query string) map[string]int64 {
	r.t.Helper()
	var out []struct {
		K string
		N int64
	}
	require.NoError(r.t, r.env.DB.Raw(query, r.args()...).Scan(&out).Error, "%s: %s", r.fixture, query)
	m := map[string]int64{}
	for _, o := range out {
		m[o.K] = o.N
	}
	return m
}

// orders counts the side's orders per status.
func (r rows) orders() map[string]int64 {
	return r.byKey(`SELECT status AS k, count(*) AS n FROM orders WHERE user_id IN ` + sideUsers + ` GROUP BY status`)
}

// orderID is the id of the side's only order.
func (r rows) orderID() int64 {
	r.t.Helper()
	require.EqualValues(r.t, 1, r.n(`SELECT count(*) FROM orders WHERE user_id IN `+sideUsers), "%s: one order", r.fixture)
	return r.n(`SELECT id FROM orders WHERE user_id IN ` + sideUsers)
}

// stock is the stock of the one product the side's orders are for.
func (r rows) stock() int64 {
	r.t.Helper()
	require.EqualValues(r.t, 1, r.n(`SELECT count(DISTINCT product_id) FROM orders WHERE user_id IN `+sideUsers),
		"%s: one product", r.fixture)
	return r.n(`SELECT stock FROM products WHERE id = (SELECT max(product_id) FROM orders WHERE user_id IN ` + sideUsers + `)`)
}

// callbacks counts the payment callbacks recorded for the side's orders, per outcome.
func (r rows) callbacks() map[string]int64 {
	return r.byKey(`SELECT outcome AS k, count(*) AS n FROM payment_callbacks WHERE order_id IN ` + sideOrders +
		` GROUP BY outcome`)
}

// outbox counts the outbox rows with routingKey written for the side's orders.
func (r rows) outbox(routingKey string) int64 {
	return r.n(`SELECT count(*) FROM outbox WHERE routing_key = @rk AND (payload->>'order_id')::bigint IN `+sideOrders,
		sql.Named("rk", routingKey))
}

// ledger returns the side's ledger as biz_id → sum of deltas. The random part of the unsafe twins'
// biz_ids is replaced by "*" ("unsafe-callback:*", "order-paid:7:delivery-*"), so that their rows add
// up under one key; ledgerRows counts them.
func (r rows) ledger() map[string]int64 {
	return r.byKey(`SELECT regexp_replace(regexp_replace(biz_id, '^unsafe-callback:.*$', 'unsafe-callback:*'),
		  ':delivery-.*$', ':delivery-*') AS k, sum(delta)::bigint AS n
		FROM points_ledger WHERE user_id IN ` + sideUsers + ` GROUP BY 1`)
}

func (r rows) ledgerRows() int64 {
	return r.n(`SELECT count(*) FROM points_ledger WHERE user_id IN ` + sideUsers)
}

// balance is the side's points balance (0 without an account).
func (r rows) balance() int64 {
	return r.n(`SELECT COALESCE(sum(balance), 0)::bigint FROM points_accounts WHERE user_id IN ` + sideUsers)
}

// keys counts the side's idempotency_keys rows per state.
func (r rows) keys() map[string]int64 {
	return r.byKey(`SELECT state AS k, count(*) AS n FROM idempotency_keys WHERE user_id IN ` + sideUsers + ` GROUP BY state`)
}

// refundRequests counts the refund requests of the side's orders.
func (r rows) refundRequests() int64 {
	return r.n(`SELECT count(*) FROM refund_requests WHERE order_id IN ` + sideOrders)
}

// settle polls get until it reaches want (or 15 s pass), then asserts it is exactly want: a count that
// overshoots (a second credit, a second publish) fails here instead of waiting for a value it has passed.
func settle(t *testing.T, want int64, get func() int64, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	got := get()
	for got < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		got = get()
	}
	assert.Equal(t, want, got, msgAndArgs...)
}

// platformPayment is a payment as payments-mock's GET /admin/payments lists it.
type platformPayment struct {
	ID              string `json:"id"`
	MerchantOrderNo string `json:"merchant_order_no"`
	AmountCents     int64  `json:"amount_cents"`
	Status          string `json:"status"`
}

// platformPayments is every payment the platform holds (GET /admin/payments).
func platformPayments(t *testing.T, env *lab.Env) []platformPayment {
	t.Helper()
	r, err := env.Do(context.Background(), http.MethodGet, env.PaymentsURL+"/admin/payments", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var body struct {
		Payments []platformPayment `json:"payments"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &body))
	return body.Payments
}
