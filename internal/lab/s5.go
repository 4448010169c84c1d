package lab

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"gorm.io/gorm"

	"idemshop/internal/invariants"
	"idemshop/internal/lock"
	"idemshop/internal/payclient"
	"idemshop/internal/payments"
)

// runS5 is a flash sale: 30 buyers of one unit each for the last 10 units, and all 30 payments succeed
// at once (one signed SUCCESS callback per order, in parallel). The database is slow, as it is in a
// flash sale: another transaction (think of a back-office stock sync) holds the product's row when the
// callbacks arrive, and lets go once 15 of them queue behind it. That wait is measured, not slept: the
// lab polls pg_locks.
// Unsafe: POST /lab/unsafe/s5/payments/callback, whose stock step is check-then-write under a Redis
// lease of LAB_STOCK_LOCK_TTL per product without a fence. A holder stuck on the row outlives its lease,
// the next waiter walks in and reads the same stock, and so on: stock goes below zero.
// Guarded: POST /v1/payments/callback, the conditional decrement, which waits on the row and then
// re-checks `stock >= qty` against the row it finally gets.
func runS5(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	const stock, buyers = 10, 30
	var u Unsafe
	var g Guarded
	for _, side := range []struct {
		unsafe bool
		path   string
	}{{true, "/lab/unsafe/s5/payments/callback"}, {false, "/v1/payments/callback"}} {
		f, err := env.NewFixture(ctx, "S5")
		if err != nil {
			return u, g, err
		}
		m, err := s5Side(ctx, env, f, side.path, stock, buyers, side.unsafe)
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		if err != nil {
			return u, g, err
		}
		detail := fmt.Sprintf("%d paid for %d units, %d queued on a row held %d ms: stock %d, %d PAID, %d REFUND_REQUIRED",
			buyers, stock, m["queued_on_row"], m["slow_step_ms"], m["stock_final"], m["paid"], m["refund_required"])
		if side.unsafe {
			u.Measured = m
			u.Reproduced = m["stock_final"] < 0
			u.Detail = detail
		} else {
			g.Measured = m
			g.OK = m["stock_final"] == 0 && m["paid"] == stock && m["refund_required"] == buyers-stock &&
				m["outbox_rows"] == stock && m["refund_requests"] == buyers-stock && m["non_200"] == 0 &&
				m["violations"] == 0
			g.Detail = detail
		}
	}
	return u, g, nil
}

func s5Side(ctx context.Context, env *Env, f *Fixture, path string, stock int64, buyers int, unsafe bool) (map[string]int64, error) {
	const price = 1999
	product, err := f.Product(ctx, stock, price)
	if err != nil {
		return nil, err
	}
	if unsafe {
		// The lock's fence counter never expires (internal/lock): remove this product's with the sale.
		defer s5ForgetLock(ctx, env, product)
	}
	platform, err := payclient.New(env.PaymentsURL, 10*time.Second)
	if err != nil {
		return nil, err
	}
	// Stock is checked, not taken, at order time: all 30 orders are accepted. Each gets a real, approved
	// payment at the platform, so that the refunds the sale ends up owing are ones the sweeper can
	// execute. The lab sends the SUCCESS callbacks itself, all at once; the platform's own notifications
	// go to a path no route serves, and its first 404 ends them.
	ids := make([]int64, buyers)
	cbs := make([]payments.Callback, buyers)
	for i := range buyers {
		o, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s5-%d-%d", time.Now().UnixNano(), i), product, 1)
		if err != nil || r.Status != http.StatusCreated {
			return nil, fmt.Errorf("S5: create order: %v (HTTP %d %s)", err, r.Status, r.Body)
		}
		p, _, err := platform.CreatePayment(ctx, payclient.CreatePaymentRequest{MerchantOrderNo: strconv.FormatInt(o.ID, 10),
			AmountCents: o.AmountCents, Currency: "EUR", NotifyURL: env.OrdersURL + "/lab/s5/no-notifications"})
		if err != nil {
			return nil, fmt.Errorf("S5: create payment: %w", err)
		}
		if _, err := platform.Approve(ctx, p.ID); err != nil {
			if _, _, refused := payclient.Refused(err); !refused { // refused: auto-approve was first
				return nil, fmt.Errorf("S5: approve %s: %w", p.ID, err)
			}
		}
		ids[i] = o.ID
		cbs[i] = Callback(o.ID, payments.StatusSuccess, o.AmountCents, fmt.Sprintf("lab-s5-%d", o.ID))
		cbs[i].PaymentID = p.ID
	}

	slow, err := s5HoldRow(ctx, env, product)
	if err != nil {
		return nil, err
	}
	defer slow.release()
	queued := stock + stock/2 // half again as many buyers past the stock check as there are units
	var slowStep time.Duration
	var waiting int64
	var waitErr error
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		defer slow.release()
		start := time.Now()
		// Bounded well below DB_LOCK_TIMEOUT (2 s), after which a queued callback would fail.
		_, waitErr = Eventually(ctx, 1500*time.Millisecond, func() (bool, error) {
			n, err := slow.waiters(ctx)
			waiting = n
			return n >= queued, err
		})
		slowStep = time.Since(start)
	}()
	statuses := Parallel(buyers, func(i int) int {
		r, err := env.PostCallback(ctx, path, cbs[i])
		if err != nil {
			return 0
		}
		return r.Status
	})
	<-watched
	if err := slow.wait(); err != nil {
		return nil, err
	}
	if waitErr != nil {
		return nil, waitErr
	}
	m := map[string]int64{"initial_stock": stock, "buyers": int64(buyers), "queued_on_row": waiting,
		"slow_step_ms": slowStep.Milliseconds()}
	for _, st := range statuses {
		if st != http.StatusOK {
			m["non_200"]++
		}
	}

	delta, vs, err := invariants.Stock(ctx, env.DB, product, stock, -stock)
	if err != nil {
		return nil, err
	}
	m["stock_final"] = stock + delta
	m["units_sold"] = -delta
	var rows []struct {
		Status string
		N      int64
	}
	if err := env.DB.WithContext(ctx).Raw(`SELECT status, count(*) AS n FROM orders WHERE id IN ? GROUP BY status`,
		ids).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("S5: count orders: %w", err)
	}
	for _, r := range rows {
		switch r.Status {
		case "PAID":
			m["paid"] = r.N
		case "REFUND_REQUIRED":
			m["refund_required"] = r.N
		default:
			m["other_status"] += r.N
		}
	}
	facts, err := invariants.Load(ctx, env.DB, ids)
	if err != nil {
		return nil, err
	}
	for _, fa := range facts {
		m["outbox_rows"] += fa.OutboxRows
		m["callbacks_applied"] += fa.CallbacksApplied
	}
	var refunds int64
	if err := env.DB.WithContext(ctx).Raw(`SELECT count(*) FROM refund_requests WHERE order_id IN ?`, ids).
		Scan(&refunds).Error; err != nil {
		return nil, fmt.Errorf("S5: count refund requests: %w", err)
	}
	m["refund_requests"] = refunds
	if !unsafe {
		m["violations"] = int64(len(vs))
	}

	// Paid orders credit points through outbox → RabbitMQ → points-consumer: let that finish before the
	// fixture deletes the user, bounded by Quiet.
	if err := payAwaitPoints(ctx, env, ids); err != nil {
		return nil, err
	}
	return m, nil
}

// s5Row is the slow database step: a transaction holding a product's row.
type s5Row struct {
	pid   int64     // the holding session's backend pid
	watch *sql.Conn // a connection of its own for counting waiters: the storm may drain the pool
	once  sync.Once
	stop  chan struct{}
	done  chan error
}

// s5HoldRow starts a transaction that locks the product's row (SELECT ... FOR UPDATE) and holds it
// until release.
func s5HoldRow(ctx context.Context, env *Env, product int64) (*s5Row, error) {
	pool, err := env.DB.DB()
	if err != nil {
		return nil, err
	}
	watch, err := pool.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("S5: reserve a connection: %w", err)
	}
	r := &s5Row{watch: watch, stop: make(chan struct{}), done: make(chan error, 1)}
	held := make(chan error, 1)
	go func() {
		r.done <- env.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			err := tx.Raw(`SELECT pg_backend_pid() FROM products WHERE id = ? FOR UPDATE`, product).Scan(&r.pid).Error
			held <- err
			if err != nil {
				return err
			}
			<-r.stop
			return nil
		})
	}()
	if err := <-held; err != nil {
		<-r.done
		_ = watch.Close()
		return nil, fmt.Errorf("S5: hold the product row: %w", err)
	}
	return r, nil
}

// waiters counts the transactions queued on the held row: the first waits for the holder's
// transaction id, the others for the row's tuple lock, which the first holds.
func (r *s5Row) waiters(ctx context.Context) (int64, error) {
	var n int64
	err := r.watch.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks w
		WHERE NOT w.granted AND (
		  (w.locktype = 'transactionid' AND w.transactionid IN
		     (SELECT h.transactionid FROM pg_locks h WHERE h.pid = $1 AND h.locktype = 'transactionid' AND h.granted))
		  OR (w.locktype = 'tuple' AND w.relation = 'products'::regclass))`, r.pid).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("S5: count waiters on the product row: %w", err)
	}
	return n, nil
}

// release lets the row go and returns the watching connection to the pool (idempotent); wait returns
// the holding transaction's result.
func (r *s5Row) release() {
	r.once.Do(func() {
		close(r.stop)
		_ = r.watch.Close()
	})
}

func (r *s5Row) wait() error { r.release(); return <-r.done }

// s5ForgetLock removes the S5 product lock's keys from Redis (best effort).
func s5ForgetLock(ctx context.Context, env *Env, productID int64) {
	l, err := lock.New(env.Redis, env.RedisPrefix)
	if err != nil {
		return
	}
	name := payments.FlashSaleLockName(productID)
	_ = env.Redis.Del(context.WithoutCancel(ctx), l.LockKey(name), l.FenceKey(name)).Err()
}

// payAwaitPoints waits, bounded by env.Quiet, until every order.paid event of ids has been credited
// (one ledger row per outbox row), so that no credit lands after the fixture is gone.
func payAwaitPoints(ctx context.Context, env *Env, ids []int64) error {
	_, err := Eventually(ctx, env.Quiet, func() (bool, error) {
		facts, err := invariants.Load(ctx, env.DB, ids)
		if err != nil {
			return false, err
		}
		for _, fa := range facts {
			if fa.LedgerRows < fa.OutboxRows {
				return false, nil
			}
		}
		return true, nil
	})
	return err
}
