package lab_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/events"
	"idemshop/internal/lab"
	"idemshop/internal/lab/labtest"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

// newLabEnv runs the whole shop in-process for one test (labtest.NewEnv) with Keep set: the scenarios
// leave their rows, and each test reads them back with queries of its own (rows_test.go). The test's
// database is dropped at its end anyway. labtest.NewEnv itself leaves Keep off: the bench's test shares
// it, and its fixtures delete their rows as `loadtest bench` does.
func newLabEnv(t *testing.T, mutate func(*config.Orders)) *lab.Env {
	t.Helper()
	env := labtest.NewEnv(t, mutate)
	env.Keep = true
	return env
}

// runScenario runs one scenario and checks the lab's own verdict: no error, the unsafe side reproduced
// the failure, the guarded side held. The checks do not stop the test: its own row checks follow either
// way, and say what the verdict was about.
func runScenario(t *testing.T, env *lab.Env, id string) lab.Result {
	t.Helper()
	sc, err := lab.Select([]string{id})
	require.NoError(t, err)
	r := lab.Run(context.Background(), env, sc, nil)[0]
	t.Logf("%s: unsafe %+v; guarded %+v; err %q", r.ID, r.Unsafe, r.Guarded, r.Error)
	assert.Empty(t, r.Error)
	assert.True(t, r.Unsafe.Reproduced || r.Unsafe.NoTwin, "the lab says the unsafe side did not show the failure: %s", r.Unsafe.Detail)
	assert.True(t, r.Guarded.OK, "the lab says the guarded side broke an invariant: %s", r.Guarded.Detail)
	return r
}

// Keep leaves a fixture's rows in place; without it, Close deletes the user, its products and orders.
func TestFixtureCloseDeletesItsRowsUnlessKeep(t *testing.T) {
	t.Parallel()
	env := labtest.NewEnv(t, nil)
	ctx := context.Background()
	left := func(userID, product int64) int64 {
		var n int64
		require.NoError(t, env.DB.Raw(`SELECT (SELECT count(*) FROM users WHERE id = @u)
			+ (SELECT count(*) FROM orders WHERE user_id = @u) + (SELECT count(*) FROM products WHERE id = @p)`,
			map[string]any{"u": userID, "p": product}).Scan(&n).Error)
		return n
	}
	for _, keep := range []bool{true, false} {
		env.Keep = keep
		f, err := env.NewFixture(ctx, fmt.Sprintf("keep-test-%t", keep))
		require.NoError(t, err)
		product, err := f.Product(ctx, 10, 1250)
		require.NoError(t, err)
		_, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("keep-%t", keep), product, 1)
		require.NoError(t, err)
		require.Equal(t, 201, r.Status, "%s", r.Body)
		var name string
		require.NoError(t, env.DB.Raw(`SELECT name FROM users WHERE id = ?`, f.UserID).Scan(&name).Error)
		assert.Regexp(t, `^lab-keep-test-(true|false)-[0-9a-f]{16}$`, name)
		require.NoError(t, f.Close(ctx))
		want := int64(0)
		if keep {
			want = 3 // the user, the order, the product
		}
		assert.Equal(t, want, left(f.UserID, product), "keep %t", keep)
	}
}

// Close keeps a fixture's rows while points-consumer is not done with its events: an order.paid
// without its ledger row (the consumer down, or behind), or a lease a consumer claimed and did not
// mark done (it died after its commit; the redelivered copy waits the lease out). Deleted under them,
// the user made each event poison, a dead letter nobody could fix (a newcomer's finding). Once the
// ledger has the row and the lease is done, Close deletes.
func TestFixtureCloseKeepsItsRowsWhileEventsAreOnTheirWay(t *testing.T) {
	t.Parallel()
	env := labtest.NewEnv(t, nil)
	env.Quiet = 100 * time.Millisecond
	// At the level incident and lab log at by default: the line that names the kept rows must show.
	logs := &testenv.Output{}
	env.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx := context.Background()
	users := func(id int64) int64 {
		var n int64
		require.NoError(t, env.DB.Raw(`SELECT count(*) FROM users WHERE id = ?`, id).Scan(&n).Error)
		return n
	}
	f, err := env.NewFixture(ctx, "close-test")
	require.NoError(t, err)
	product, err := f.Product(ctx, 10, 1250)
	require.NoError(t, err)
	order, r, err := f.CreateOrder(ctx, "/v1/orders", "close-1", product, 1)
	require.NoError(t, err)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	orderID := order.ID
	// The order's event as the relay left it: published, so only a consumer would act on it now.
	require.NoError(t, env.DB.Exec(`INSERT INTO outbox (event_id, routing_key, payload, published_at)
		VALUES (gen_random_uuid(), ?, jsonb_build_object('order_id', ?::bigint, 'user_id', ?::bigint), now())`,
		events.RoutingKeyOrderPaid, orderID, f.UserID).Error)

	require.NoError(t, f.Close(ctx))
	assert.EqualValues(t, 1, users(f.UserID), "kept: the event has no ledger row")
	assert.Contains(t, logs.String(), "kept the rows of this run's user")
	assert.Contains(t, logs.String(), "user_id="+strconv.FormatInt(f.UserID, 10))
	assert.NotContains(t, logs.String(), "err=<nil>")

	require.NoError(t, env.DB.Exec(`INSERT INTO points_accounts (user_id, balance) VALUES (?, 12)`, f.UserID).Error)
	require.NoError(t, env.DB.Exec(`INSERT INTO points_ledger (user_id, biz_id, delta, reason) VALUES (?, ?, 12, 'order_paid')`,
		f.UserID, points.BizIDOrderPaid(orderID)).Error)
	lease := env.RedisPrefix + "points:dedup:" + points.BizIDOrderPaid(orderID)
	require.NoError(t, env.Redis.Set(ctx, lease, "a-claim-token", time.Minute).Err())
	require.NoError(t, f.Close(ctx))
	assert.EqualValues(t, 1, users(f.UserID), "kept: a consumer holds the order's lease")

	require.NoError(t, env.Redis.Set(ctx, lease, "done", time.Minute).Err())
	require.NoError(t, f.Close(ctx))
	assert.Zero(t, users(f.UserID), "deleted once the consumer is done")
}

// An interrupted run (Ctrl-C cancelled its context) does not wait LAB_QUIET for points-consumer before
// it keeps its rows: it looks once, and says what it kept. It waited the whole LAB_QUIET, a minute at
// the default (a helper's finding, 2026-12-06).
func TestFixtureCloseOfAnInterruptedRunLooksOnce(t *testing.T) {
	t.Parallel()
	env := labtest.NewEnv(t, nil)
	env.Quiet = time.Minute
	logs := &testenv.Output{}
	env.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))
	f, err := env.NewFixture(context.Background(), "close-interrupted")
	require.NoError(t, err)
	product, err := f.Product(context.Background(), 10, 1250)
	require.NoError(t, err)
	order, r, err := f.CreateOrder(context.Background(), "/v1/orders", "close-int-1", product, 1)
	require.NoError(t, err)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	require.NoError(t, env.DB.Exec(`INSERT INTO outbox (event_id, routing_key, payload, published_at)
		VALUES (gen_random_uuid(), ?, jsonb_build_object('order_id', ?::bigint, 'user_id', ?::bigint), now())`,
		events.RoutingKeyOrderPaid, order.ID, f.UserID).Error)

	interrupted, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- f.Close(interrupted) }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second): // one look, and slack; without it, LAB_QUIET's minute
		t.Fatal("Close waited for points-consumer after the interrupt")
	}
	var users int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM users WHERE id = ?`, f.UserID).Scan(&users).Error)
	assert.EqualValues(t, 1, users, "kept: the event has no ledger row")
	assert.Contains(t, logs.String(), "user_id="+strconv.FormatInt(f.UserID, 10))
}

// TestS1: for each of 3 orders of 2 units (one product, stock 100) at 12.50 EUR each (25 points), one
// SUCCESS callback delivered three times at once: all 9 copies released together at the shop. The
// guarded side first gets a forged copy of each event (another secret) and an unsigned one.
func TestS1(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S1")

	u := sideRows(t, env, "S1-unsafe")
	assert.Equal(t, map[string]int64{"PAID": 3}, u.orders())
	assert.EqualValues(t, 100-3*3*2, u.stock(), "every copy deducted the stock")
	assert.Equal(t, map[string]int64{"applied": 9}, u.callbacks(), "every copy applied")
	assert.EqualValues(t, 9, u.ledgerRows(), "every copy credited")
	assert.EqualValues(t, 9*25, u.balance())

	g := sideRows(t, env, "S1-guarded")
	assert.Equal(t, map[string]int64{"PAID": 3}, g.orders())
	assert.EqualValues(t, 100-3*2, g.stock(), "deducted once per order")
	assert.Equal(t, map[string]int64{"applied": 3, "duplicate": 6, "rejected": 6}, g.callbacks(),
		"the 6 forged copies are audited as rejected")
	assert.EqualValues(t, 6, g.n(`SELECT count(*) FROM payment_callbacks WHERE NOT signature_ok AND NOT applied
		AND order_id IN `+sideOrders), "both forgeries of each order refused on the signature")
	gm := r.Guarded.Measured
	assert.EqualValues(t, 6, gm["forged_sent"])
	assert.EqualValues(t, 6, gm["forged_refused"], "401 each")
	assert.EqualValues(t, 0, gm["moved_by_forged"], "every order still PENDING after them")
	assert.EqualValues(t, 0, gm["stock_delta_after_forged"])
	assert.EqualValues(t, 3, g.outbox("order.paid"))
	settle(t, 3, g.ledgerRows, "credited through the outbox and the consumer, once per order")
	for k, pts := range g.ledger() {
		assert.True(t, strings.HasPrefix(k, "order-paid:"), k)
		assert.EqualValues(t, 25, pts, k)
	}
	assert.EqualValues(t, 3*25, g.balance())
	assert.EqualValues(t, 1, r.Guarded.Measured["max_applied_per_order"])
}

// TestIncidentGuardedHoldsAndUnsafeShowsDamage: 10 orders of quantities 1,2,3,1,2,3,1,2,3,1 (19 units,
// stock 100000) at 12.50 EUR, each paid and its callback sent three times in parallel by payments-mock.
// Points per order are floored: 12, 25, 37, so 4*12 + 3*25 + 3*37 = 234.
func TestIncidentGuardedHoldsAndUnsafeShowsDamage(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	ctx := context.Background()
	const units, pts = 19, 4*12 + 3*25 + 3*37

	rep, err := lab.Incident(ctx, env, 10, false, nil)
	require.NoError(t, err)
	t.Logf("guarded: %+v", rep)
	assert.Empty(t, rep.Violations)

	g := sideRows(t, env, "incident-guarded")
	assert.Equal(t, map[string]int64{"PAID": 10}, g.orders())
	assert.EqualValues(t, 100000-units, g.stock())
	assert.Equal(t, map[string]int64{"applied": 10, "duplicate": 20}, g.callbacks(), "3 copies of each arrived, 1 applied")
	assert.EqualValues(t, 10, g.outbox("order.paid"))
	assert.Equal(t, map[string]int64{"COMPLETED": 20}, g.keys(), "10 create-order keys and 10 pay records")
	settle(t, 10, g.ledgerRows, "one credit per order")
	assert.EqualValues(t, pts, g.balance())

	bad, err := lab.Incident(ctx, env, 10, true, nil)
	require.NoError(t, err)
	t.Logf("unsafe: %+v", bad)
	assert.NotEmpty(t, bad.Violations)

	u := sideRows(t, env, "incident-unsafe")
	assert.Equal(t, map[string]int64{"PAID": 10}, u.orders())
	assert.EqualValues(t, 100000-3*units, u.stock(), "every copy deducted")
	assert.Equal(t, map[string]int64{"applied": 30}, u.callbacks())
	assert.EqualValues(t, 30, u.ledgerRows(), "every copy credited")
	assert.EqualValues(t, 3*pts, u.balance())
}

// Chaos is payments-mock's, one setting for every caller: a second terminal's scenario calmed it under a
// running incident, whose orders then got one callback each instead of three. The incident waited out
// LAB_QUIET and asked whether the services were running; it now says the chaos changed, and how.
func TestAnIncidentWhoseChaosIsChangedUnderItSaysSo(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	env.Quiet = 3 * time.Second
	ctx := context.Background()
	var once sync.Once
	rep, err := lab.Incident(ctx, env, 10, false, func(string) {
		// After the first order is paid: at most four are under way, and the others pay under calm chaos.
		once.Do(func() { assert.NoError(t, env.CalmChaos(ctx)) }) // not require: another goroutine
	})
	require.NoError(t, err)
	t.Logf("violations: %q", rep.Violations)
	require.NotEmpty(t, rep.Violations)
	assert.Contains(t, rep.Violations[0], "not settled within 3s (payments-mock's chaos changed during the run: duplicates 1 (this run set 3);")
	assert.Contains(t, rep.Violations[0], "run one at a time per stack")
}

// The lab's own settings must be the shop's, or the run is a set-up error before any scenario: another
// database (the shop answers the lab's user 401), another webhook secret (the shop refuses the lab's
// signature), a Redis or a broker the lab cannot reach. Each was an ERROR row or a guard that "did not
// hold", exit 1 (a newcomer's finding).
func TestCheckShopNamesTheSettingThatIsNotTheShops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := labtest.NewEnv(t, nil)
	require.NoError(t, env.CheckShop(ctx, true))

	wrongSecret := *env
	wrongSecret.Secret = []byte("not-the-shops")
	err := wrongSecret.CheckShop(ctx, false)
	require.ErrorIs(t, err, lab.ErrShopSetup)
	assert.ErrorContains(t, err, "PAYMENT_WEBHOOK_SECRET")

	notOrders := *env
	notOrders.OrdersURL = env.PaymentsURL // payments-mock's port: 404 to /v1/points
	err = notOrders.CheckShop(ctx, false)
	require.ErrorIs(t, err, lab.ErrShopSetup)
	assert.ErrorContains(t, err, "ORDERS_URL must be orders'")

	otherDB := *env
	otherDB.DB = testenv.New(t).DB
	err = otherDB.CheckShop(ctx, false)
	require.ErrorIs(t, err, lab.ErrShopSetup)
	assert.ErrorContains(t, err, "DATABASE_URL")

	deadRedis := *env
	rdb, err := redisx.Open("redis://127.0.0.1:1/0", 100*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	deadRedis.Redis = rdb
	require.NoError(t, deadRedis.CheckShop(ctx, false), "the incident needs no Redis of its own")
	err = deadRedis.CheckShop(ctx, true)
	require.ErrorIs(t, err, lab.ErrShopSetup)
	assert.ErrorContains(t, err, "REDIS_URL")

	deadBroker := *env
	deadBroker.AMQPURL = "amqp://guest:guest@" + testenv.FreeAddr(t) + "/"
	err = deadBroker.CheckShop(ctx, true)
	require.ErrorIs(t, err, lab.ErrShopSetup)
	assert.ErrorContains(t, err, "AMQP_URL")

	var users int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM users WHERE name LIKE 'lab-preflight-%'`).Scan(&users).Error)
	assert.Zero(t, users, "the throwaway users are gone")
}
