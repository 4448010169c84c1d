package play_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/callback"
	"idemshop/internal/lab"
	"idemshop/internal/lab/labtest"
	"idemshop/internal/platform/config"
	"idemshop/internal/replay"
	"idemshop/internal/replay/play"
)

// shipped parses one of loadtest/replays.
func shipped(t *testing.T, name string) *replay.Recording {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "..", "loadtest", "replays", name))
	require.NoError(t, err)
	defer f.Close()
	rec, err := replay.Parse(f)
	require.NoError(t, err)
	return rec
}

// orderRow is one replayed order as its rows say, read with the test's own SQL.
type orderRow struct {
	ID             int64
	Status         string
	Quantity       int64
	AmountCents    int64
	RefundedCents  int64
	Stock          int64 // its product's; every replayed order has a product of its own, 1000 units at first
	Received       int64
	Applied        int64
	PaidEvents     int64
	RefundedEvents int64
	Credits        int64 // order-paid:<id> ledger rows
	Reversals      int64 // order-refunded:<id> ledger rows
}

func rowsOf(t *testing.T, env *lab.Env, ids ...int64) map[int64]orderRow {
	t.Helper()
	var rows []orderRow
	require.NoError(t, env.DB.Raw(`SELECT o.id, o.status, o.quantity, o.amount_cents, o.refunded_cents, p.stock,
		  (SELECT count(*) FROM payment_callbacks c WHERE c.order_id = o.id AND c.signature_ok) AS received,
		  (SELECT count(*) FROM payment_callbacks c WHERE c.order_id = o.id AND c.applied) AS applied,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.paid' AND (x.payload->>'order_id')::bigint = o.id) AS paid_events,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.refunded' AND (x.payload->>'order_id')::bigint = o.id) AS refunded_events,
		  (SELECT count(*) FROM points_ledger l WHERE l.biz_id = 'order-paid:' || o.id) AS credits,
		  (SELECT count(*) FROM points_ledger l WHERE l.biz_id = 'order-refunded:' || o.id) AS reversals
		FROM orders o JOIN products p ON p.id = o.product_id WHERE o.id IN ?`, ids).Scan(&rows).Error)
	out := map[int64]orderRow{}
	for _, r := range rows {
		out[r.ID] = r
	}
	require.Len(t, out, len(ids))
	return out
}

func balanceOf(t *testing.T, env *lab.Env, userID int64) int64 {
	t.Helper()
	var b int64
	require.NoError(t, env.DB.Raw(`SELECT COALESCE((SELECT balance FROM points_accounts WHERE user_id = ?), 0)`, userID).Scan(&b).Error)
	return b
}

// run replays a shipped file and returns its report and its orders' rows, by recorded ref.
func run(t *testing.T, env *lab.Env, name string, unsafe bool) (play.Report, map[string]orderRow) {
	t.Helper()
	rep, err := play.Run(context.Background(), env, shipped(t, name), play.Options{Name: name, Unsafe: unsafe, Keep: true})
	require.NoError(t, err)
	t.Logf("%s unsafe=%v: stock %+d (want %+d), points %+d (want %+d), applied %d (want %d), violations %v",
		name, unsafe, rep.StockDelta, rep.WantStock, rep.PointsDelta, rep.WantPoints, rep.Callbacks.Applied,
		rep.Callbacks.WantApplied, rep.Violations)
	return rep, rowsByRef(t, env, rep)
}

// rowsByRef reads the rows of a replay's orders, by recorded ref.
func rowsByRef(t *testing.T, env *lab.Env, rep play.Report) map[string]orderRow {
	t.Helper()
	ids := make([]int64, len(rep.Orders))
	for i, o := range rep.Orders {
		ids[i] = o.ID
	}
	rows := rowsOf(t, env, ids...)
	byRef := map[string]orderRow{}
	for _, o := range rep.Orders {
		byRef[o.Ref] = rows[o.ID]
	}
	return byRef
}

// Every shipped replay against the in-process shop: guarded, each is absorbed (and again, as a second
// run: its fresh event ids are not mistaken for the first run's); unsafe, each shows its damage. The
// end state is read from the rows with this test's own SQL.
func TestShippedReplays(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole shop")
	}
	env := labtest.NewEnv(t, nil)

	t.Run("incident", func(t *testing.T) {
		// Four orders: quantities 1, 2, 3, 2 at 12.50 EUR; every SUCCESS three times at once.
		qty := map[string]int64{"1": 1, "2": 2, "3": 3, "4": 2}
		for range 2 {
			rep, rows := run(t, env, "incident-triple-callback.jsonl", false)
			assert.Empty(t, rep.Violations)
			assert.Equal(t, "/v1/payments/callback", rep.Path)
			assert.Equal(t, map[string]int{"200": 12}, rep.Answers)
			require.Len(t, rows, 4)
			var points int64
			for ref, r := range rows {
				assert.Equal(t, "PAID", r.Status, ref)
				assert.Equal(t, 1000-qty[ref], r.Stock, "order %s: stock -q", ref)
				assert.EqualValues(t, 3, r.Received, ref)
				assert.EqualValues(t, 1, r.Applied, ref)
				assert.EqualValues(t, 1, r.PaidEvents, ref)
				assert.EqualValues(t, 1, r.Credits, ref)
				points += r.AmountCents / 100
			}
			assert.EqualValues(t, 99, points, "12 + 25 + 37 + 25")
			assert.Equal(t, points, balanceOf(t, env, rep.UserID), "points +x")
			assert.EqualValues(t, -8, rep.StockDelta)
		}

		rep, rows := run(t, env, "incident-triple-callback.jsonl", true)
		assert.NotEmpty(t, rep.Violations, "the unsafe handler shows the incident")
		assert.Equal(t, "/lab/unsafe/payments/callback", rep.Path)
		for ref, r := range rows {
			assert.Equal(t, 1000-3*qty[ref], r.Stock, "order %s: stock -3q", ref)
			assert.EqualValues(t, 3, r.Applied, "order %s: every copy applied", ref)
		}
		assert.EqualValues(t, 3*99, balanceOf(t, env, rep.UserID), "points +3x")
		assert.EqualValues(t, -24, rep.StockDelta)
		assert.EqualValues(t, 297, rep.PointsDelta)
	})

	t.Run("refund before success", func(t *testing.T) {
		rep, rows := run(t, env, "refund-before-success.jsonl", false)
		assert.Empty(t, rep.Violations)
		require.Len(t, rows, 2)
		for ref, r := range rows {
			assert.Equal(t, "REFUNDED", r.Status, ref)
			assert.EqualValues(t, 1000, r.Stock, "order %s: the stock came back", ref)
			assert.EqualValues(t, 2500, r.RefundedCents, ref)
			assert.EqualValues(t, 1, r.Applied, "order %s: the SUCCESS paid and refunded it", ref)
			assert.EqualValues(t, 1, r.PaidEvents, ref)
			assert.EqualValues(t, 1, r.RefundedEvents, ref)
			assert.EqualValues(t, 1, r.Credits, ref)
			assert.EqualValues(t, 1, r.Reversals, ref)
		}
		assert.EqualValues(t, 0, balanceOf(t, env, rep.UserID), "credited, then reversed")

		rep, rows = run(t, env, "refund-before-success.jsonl", true)
		assert.NotEmpty(t, rep.Violations)
		assert.Equal(t, "/lab/unsafe/s12/payments/callback", rep.Path)
		for ref, r := range rows {
			assert.Equal(t, "PAID", r.Status, "order %s: the early refund was dropped", ref)
			assert.EqualValues(t, 998, r.Stock, ref)
			assert.EqualValues(t, 0, r.RefundedCents, ref)
			assert.EqualValues(t, 0, r.RefundedEvents, ref)
		}
		assert.EqualValues(t, 50, balanceOf(t, env, rep.UserID), "points kept for refunded payments")
	})

	t.Run("decline race", func(t *testing.T) {
		rep, rows := run(t, env, "decline-race.jsonl", false)
		assert.Empty(t, rep.Violations)
		require.Len(t, rows, 2)
		declined, paid := rows[rep.Orders[0].Ref], rows[rep.Orders[1].Ref]
		assert.Equal(t, "FAILED", declined.Status, "the decline met a PENDING order and closed it")
		assert.EqualValues(t, 1000, declined.Stock)
		assert.EqualValues(t, 3, declined.Received)
		assert.EqualValues(t, 1, declined.Applied)
		assert.EqualValues(t, 0, declined.PaidEvents)
		assert.Equal(t, "PAID", paid.Status, "the stale FAILED did not move a PAID order")
		assert.EqualValues(t, 999, paid.Stock)
		assert.EqualValues(t, 4, paid.Received, "3 SUCCESS copies and the stale FAILED")
		assert.EqualValues(t, 1, paid.Applied)
		assert.EqualValues(t, 12, balanceOf(t, env, rep.UserID))

		rep, rows = run(t, env, "decline-race.jsonl", true)
		assert.NotEmpty(t, rep.Violations)
		declined, paid = rows[rep.Orders[0].Ref], rows[rep.Orders[1].Ref]
		assert.Equal(t, "PENDING", declined.Status, "the unsafe handler acked the decline and dropped it")
		assert.EqualValues(t, 997, paid.Stock, "and paid the other order three times")
		assert.EqualValues(t, 36, balanceOf(t, env, rep.UserID))
	})
}

// A hand-written recording of the shop's refund and payment rules (a newcomer's: the prediction broke
// each of them, so a replay of a correct shop reported violations and exited 1): refunds past the
// amount, a SUCCESS after FAILED with nothing left to refund, and events of two payments for one order.
// The guarded shop ends where the prediction says, with no violation.
func TestReplayPredictsTheRefundAndPaymentRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole shop")
	}
	env := labtest.NewEnv(t, nil)
	ev := func(at int, id, payment, ref, status string, cents int) string {
		return fmt.Sprintf(`{"at_ms":%d,"body":{"event_id":%q,"payment_id":%q,"merchant_order_no":%q,"status":%q,"amount_cents":%d,"currency":"EUR"}}`,
			at, id, payment, ref, status, cents)
	}
	lines := []string{
		`{"format":"idemshop-replay/1","orders":{"A":{"amount_cents":1000},"B":{"amount_cents":1000},"C":{"amount_cents":1000},"D":{"amount_cents":1000},"E":{"amount_cents":1000}}}`,
		ev(0, "sa", "p1", "A", "SUCCESS", 1000), ev(10, "ra1", "p1", "A", "REFUNDED", 1000), ev(20, "ra2", "p1", "A", "REFUNDED", 600),
		ev(30, "rb", "p1", "B", "REFUNDED", 1000), ev(35, "fb", "p1", "B", "FAILED", 1000), ev(40, "sb", "p1", "B", "SUCCESS", 1000),
		ev(50, "rc", "p2", "C", "REFUNDED", 1000), ev(60, "sc", "p1", "C", "SUCCESS", 1000),
		ev(70, "fd", "p2", "D", "FAILED", 1000), ev(75, "sd", "p1", "D", "SUCCESS", 1000),
		ev(80, "re2", "p2", "E", "REFUNDED", 1000), ev(90, "se", "p1", "E", "SUCCESS", 1000), ev(100, "re1", "p1", "E", "REFUNDED", 1000),
	}
	rec, err := replay.Parse(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	require.NoError(t, err)
	rep, err := play.Run(context.Background(), env, rec, play.Options{Name: "rules", Keep: true})
	require.NoError(t, err)
	assert.Empty(t, rep.Violations)
	byRef := rowsByRef(t, env, rep)
	want := map[string]struct {
		status   string
		refunded int64
		applied  int64
	}{
		"A": {"REFUNDED", 1000, 2}, "B": {"FAILED", 1000, 1}, "C": {"PAID", 0, 1}, "D": {"FAILED", 0, 1}, "E": {"REFUNDED", 1000, 2},
	}
	for ref, w := range want {
		r := byRef[ref]
		assert.Equal(t, w.status, r.Status, ref)
		assert.Equal(t, w.refunded, r.RefundedCents, ref)
		assert.Equal(t, w.applied, r.Applied, ref)
	}
	var requests int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM refund_requests r JOIN orders o ON o.id = r.order_id
		WHERE o.user_id = ?`, rep.UserID).Scan(&requests).Error)
	assert.Zero(t, requests, "B had nothing left to refund, D's other payment's SUCCESS was refused")
}

// A replay without the fixture's rows: Keep false removes the user, the orders and what refers to them.
func TestReplayCleansUpItsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole shop")
	}
	env := labtest.NewEnv(t, nil)
	rep, err := play.Run(context.Background(), env, shipped(t, "incident-triple-callback.jsonl"), play.Options{})
	require.NoError(t, err)
	assert.Empty(t, rep.Violations)
	var left int64
	require.NoError(t, env.DB.Raw(`SELECT (SELECT count(*) FROM users WHERE id = ?) + (SELECT count(*) FROM orders WHERE user_id = ?)`,
		rep.UserID, rep.UserID).Scan(&left).Error)
	assert.Zero(t, left)
}

// --unsafe against an orders without lab mode: every delivery is a 404, and the replay says why rather
// than reporting the shop's end state as if it had been sent anything.
func TestUnsafeReplayNeedsLabMode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole shop")
	}
	env := labtest.NewEnv(t, func(c *config.Orders) { c.Lab = false })
	_, err := play.Run(context.Background(), env, shipped(t, "decline-race.jsonl"), play.Options{Unsafe: true})
	require.ErrorContains(t, err, "is orders in lab mode (ORDERS_LAB=true)?")
}

// The replay signs each delivery at send time: a 401 means this process and orders do not share the
// secret, a set-up error, not a shop that broke its invariants.
func TestReplayWithAnotherSecretIsASetUpError(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole shop")
	}
	env := labtest.NewEnv(t, nil)
	env.Secret = []byte("not-the-shops-secret")
	_, err := play.Run(context.Background(), env, shipped(t, "decline-race.jsonl"), play.Options{})
	require.ErrorContains(t, err, "answered 401 (signature refused): is PAYMENT_WEBHOOK_SECRET the one orders uses?")
}

// The loader's bound on recorded ids is the shop's.
func TestReplayIDBoundIsTheShops(t *testing.T) {
	assert.Equal(t, callback.IDMaxBytes, replay.MaxIDBytes)
}
