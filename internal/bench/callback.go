package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"idemshop/internal/callback"
	"idemshop/internal/events"
	"idemshop/internal/lab"
	"idemshop/internal/paysig"
)

const (
	callbackPath   = "/v1/payments/callback"
	callbackCopies = 3 // the incident: every event delivered three times
	orderPrice     = 1250
)

// callbackStorm is measure 3: signed SUCCESS callbacks, each event sent 3 times back to back (so the
// copies are in flight together), through POST /v1/payments/callback, against the database ceiling:
// the same transaction (order lookup; BEGIN; conditional UPDATE; stock decrement, outbox insert or
// status read; audit row; COMMIT) run by an in-process pgx pool with as many workers, on orders of
// its own. ABBA order, like the create measure. Both sides are then checked: every order PAID, one
// callback applied, one order.paid event, points credited once, stock taken once.
func (r *runner) callbackStorm(ctx context.Context) []Result {
	const name, title = "callback_storm", "signed callback storm (each event x3): HTTP path ÷ database ceiling"
	env, cfg := r.env, r.cfg
	pool, err := newPool(ctx, env, cfg.Concurrency)
	if err != nil {
		return []Result{failed(name, title, err)}
	}
	defer pool.Close()

	// Enough orders for maxRate callbacks a second: the count bounds the storm, not the clock.
	perSide := int(min(r.limit(cfg.Duration)/callbackCopies+10, 50_000))
	hf, hp, hOrders, err := stormFixture(ctx, env, "bench-callback", perSide)
	if hf != nil {
		defer hf.Close(ctx)
	}
	if err != nil {
		return []Result{failed(name, title, err)}
	}
	cf, cp, cOrders, err := stormFixture(ctx, env, "bench-ceiling", perSide)
	if cf != nil {
		defer cf.Close(ctx)
	}
	if err != nil {
		return []Result{failed(name, title, err)}
	}

	hc := &counter{limit: int64(len(hOrders)) * callbackCopies}
	cc := &counter{limit: int64(len(cOrders)) * callbackCopies}
	targets := func(t *vegeta.Target) error {
		i, ok := hc.next()
		if !ok {
			return vegeta.ErrNoTargets
		}
		id := hOrders[i/callbackCopies]
		cb := lab.Callback(id, callback.StatusSuccess, orderPrice, "bench-cb-"+strconv.FormatInt(id, 10))
		cb.OccurredAt = time.Time{} // identical bytes for the three copies, as a resend has
		body, err := json.Marshal(cb)
		if err != nil {
			return err
		}
		t.Method, t.URL, t.Body = http.MethodPost, env.OrdersURL+callbackPath, body
		t.Header = http.Header{"Content-Type": {"application/json"},
			paysig.Header: {paysig.Sign(env.Secret, time.Now(), body)}}
		return nil
	}
	ok200 := func(res *vegeta.Result) error {
		if res.Code != http.StatusOK {
			return fmt.Errorf("HTTP %d", res.Code)
		}
		return nil
	}
	ceiling := func(ctx context.Context, i int64) error {
		return ceilingCallback(ctx, pool, cOrders[i/callbackCopies], "bench-ceil-"+strconv.FormatInt(cOrders[i/callbackCopies], 10))
	}

	half := max(cfg.Duration/2, 50*time.Millisecond)
	timeout := env.HTTP.Timeout
	path, base := newSample(), newSample()
	base.merge(closedLoop(ctx, cfg.Concurrency, half, cc, ceiling))
	path.merge(attack(ctx, "callback", targets, cfg.Concurrency, half, timeout, ok200))
	path.merge(attack(ctx, "callback", targets, cfg.Concurrency, half, timeout, ok200))
	base.merge(closedLoop(ctx, cfg.Concurrency, half, cc, ceiling))

	res := ratioResult(name, title, path, base, "database ceiling (pgx, same transaction)")
	res.Latency = "one callback: request round trip (path) or transaction (ceiling)"
	res.atLeast(0.6) // issue 16
	hUsed := orderCount(hc.issued())
	cUsed := orderCount(cc.issued())
	res.Note = fmt.Sprintf("rps counts callbacks (3 per event): %d events via HTTP, %d via the ceiling", hUsed, cUsed)
	for _, side := range []struct {
		label   string
		f       *lab.Fixture
		product int64
		orders  []int64
	}{{"HTTP path", hf, hp, hOrders[:hUsed]}, {"ceiling", cf, cp, cOrders[:cUsed]}} {
		vs, err := r.checkPaidOnce(ctx, side.f, side.product, side.orders)
		if err != nil {
			res.Error = fmt.Sprintf("check invariants: %v", err)
			break
		}
		for _, v := range vs {
			res.violate(side.label + ": " + v)
		}
	}
	return []Result{res}
}

func orderCount(callbacks int64) int { return int((callbacks + callbackCopies - 1) / callbackCopies) }

// stormFixture creates a lab user, a product and n PENDING orders of one unit each (by SQL: set-up
// is not what is measured).
func stormFixture(ctx context.Context, env *lab.Env, name string, n int) (*lab.Fixture, int64, []int64, error) {
	f, err := env.NewFixture(ctx, name)
	if err != nil {
		return nil, 0, nil, err
	}
	p, err := f.Product(ctx, 10_000_000, orderPrice)
	if err != nil {
		return f, 0, nil, err
	}
	ids, err := insertOrders(ctx, env, f.UserID, p, n)
	return f, p, ids, err
}

func insertOrders(ctx context.Context, env *lab.Env, userID, productID int64, n int) ([]int64, error) {
	var ids []int64
	err := env.DB.WithContext(ctx).Raw(`INSERT INTO orders (user_id, product_id, quantity, amount_cents, currency, status)
		SELECT ?, ?, 1, ?, 'EUR', 'PENDING' FROM generate_series(1, ?) RETURNING id`,
		userID, productID, orderPrice, n).Scan(&ids).Error
	if err != nil {
		return nil, fmt.Errorf("create bench orders: %w", err)
	}
	return ids, nil
}

func newPool(ctx context.Context, env *lab.Env, conns int) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(env.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	pc.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open pgx pool: %w", err)
	}
	return pool, nil
}

// ceilingCallback is the callback's SQL, as callback.Service runs it for a SUCCESS, without HTTP,
// signature, JSON decoding or the Redis lock: the fastest this transaction can go on this database.
func ceilingCallback(ctx context.Context, pool *pgxpool.Pool, orderID int64, eventID string) error {
	var o struct {
		userID, productID, amount int64
		quantity                  int
		currency, status          string
	}
	err := pool.QueryRow(ctx, `SELECT user_id, product_id, quantity, amount_cents, currency, status
		FROM orders WHERE id = $1 LIMIT 1`, orderID).Scan(&o.userID, &o.productID, &o.quantity, &o.amount, &o.currency, &o.status)
	if err != nil {
		return fmt.Errorf("lookup order: %w", err)
	}
	paymentID := fmt.Sprintf("lab_pay_%d", orderID)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tag, err := tx.Exec(ctx, `UPDATE orders
		SET status = 'PAID', payment_id = COALESCE(payment_id, NULLIF($1, '')), updated_at = now()
		WHERE id = $2 AND status IN ('PENDING', 'PAYING')`, paymentID, orderID)
	if err != nil {
		return fmt.Errorf("transition: %w", err)
	}
	outcome, reason := callback.OutcomeDuplicate, "already PAID"
	if tag.RowsAffected() == 1 {
		if _, err := tx.Exec(ctx, `UPDATE products SET stock = stock - $1 WHERE id = $2 AND stock >= $1`,
			o.quantity, o.productID); err != nil {
			return fmt.Errorf("decrement stock: %w", err)
		}
		ev := events.OrderPaid{EventID: uuid.NewString(), OrderID: orderID, UserID: o.userID, AmountCents: o.amount,
			Points: events.PointsFor(o.amount), OccurredAt: time.Now().UTC()}
		payload, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (event_id, routing_key, payload) VALUES ($1, $2, $3)`,
			ev.EventID, events.RoutingKeyOrderPaid, string(payload)); err != nil {
			return fmt.Errorf("insert outbox: %w", err)
		}
		outcome, reason = callback.OutcomeApplied, "paid"
	} else {
		var st string
		if err := tx.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, orderID).Scan(&st); err != nil {
			return fmt.Errorf("read status: %w", err)
		}
		reason = "already " + st
	}
	if _, err := tx.Exec(ctx, `INSERT INTO payment_callbacks
		(event_id, payment_id, order_id, status, amount_cents, currency, signature_ok, applied, outcome, reason)
		VALUES ($1, $2, $3, $4, $5, $6, true, $7, $8, $9)`,
		eventID, paymentID, orderID, callback.StatusSuccess, o.amount, o.currency,
		outcome == callback.OutcomeApplied, string(outcome), reason); err != nil {
		return fmt.Errorf("record callback: %w", err)
	}
	return tx.Commit(ctx)
}

// checkPaidOnce checks, in set queries (the orders can be thousands), that each order is PAID with
// one callback applied, one order.paid event and one ledger row, and that the product's stock went
// down by one unit per order. It waits, bounded by env.Quiet, for the relay and the points consumer.
func (r *runner) checkPaidOnce(ctx context.Context, f *lab.Fixture, productID int64, ids []int64) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	db := r.env.DB.WithContext(ctx)
	want := int64(len(ids))
	_, err := lab.Eventually(ctx, r.env.Quiet, func() (bool, error) {
		var n int64
		err := db.Raw(`SELECT count(*) FROM points_ledger WHERE user_id = ?`, f.UserID).Scan(&n).Error
		return n >= want, err
	})
	if err != nil {
		return nil, err
	}
	var c struct {
		NotPaid, AppliedNotOnce, OutboxNotOnce, LedgerNotOnce, Stock, Balance int64
	}
	err = db.Raw(`WITH o AS (SELECT id, status FROM orders WHERE user_id = @u AND id IN @ids),
		cb AS (SELECT order_id, count(*) FILTER (WHERE applied) AS applied FROM payment_callbacks
		       WHERE order_id IN @ids GROUP BY order_id),
		ob AS (SELECT (payload->>'order_id')::bigint AS oid, count(*) AS n FROM outbox
		       WHERE routing_key = 'order.paid' AND (payload->>'user_id')::bigint = @u GROUP BY 1),
		lg AS (SELECT biz_id, count(*) AS n FROM points_ledger WHERE user_id = @u GROUP BY 1)
		SELECT count(*) FILTER (WHERE o.status <> 'PAID') AS not_paid,
		       count(*) FILTER (WHERE COALESCE(cb.applied, 0) <> 1) AS applied_not_once,
		       count(*) FILTER (WHERE COALESCE(ob.n, 0) <> 1) AS outbox_not_once,
		       count(*) FILTER (WHERE COALESCE(lg.n, 0) <> 1) AS ledger_not_once,
		       (SELECT stock FROM products WHERE id = @p) AS stock,
		       (SELECT COALESCE((SELECT balance FROM points_accounts WHERE user_id = @u), 0)) AS balance
		FROM o LEFT JOIN cb ON cb.order_id = o.id LEFT JOIN ob ON ob.oid = o.id
		       LEFT JOIN lg ON lg.biz_id = 'order-paid:' || o.id`,
		map[string]any{"u": f.UserID, "p": productID, "ids": ids}).Scan(&c).Error // GORM expands a slice after IN
	if err != nil {
		return nil, err
	}
	var vs []string
	add := func(n int64, what string) {
		if n != 0 {
			vs = append(vs, fmt.Sprintf("%d of %d orders %s", n, len(ids), what))
		}
	}
	add(c.NotPaid, "not PAID")
	add(c.AppliedNotOnce, "without exactly one applied callback")
	add(c.OutboxNotOnce, "without exactly one order.paid event")
	add(c.LedgerNotOnce, "without exactly one points credit")
	if got, wantStock := c.Stock, int64(10_000_000)-want; got != wantStock {
		vs = append(vs, fmt.Sprintf("stock %d, want %d (one unit per order)", got, wantStock))
	}
	if wantBal := want * events.PointsFor(orderPrice); c.Balance != wantBal {
		vs = append(vs, fmt.Sprintf("points balance %d, want %d", c.Balance, wantBal))
	}
	return vs, nil
}
