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

	"idemshop/internal/callback"
	"idemshop/internal/invariants"
	"idemshop/internal/lock"
	"idemshop/internal/payclient"
	"idemshop/internal/platform/postgres"
)

// S5's sale: 30 buyers of one unit each for the last 10 units, and s5Queue of them get past the stock
// check while the product's row is held.
const (
	s5Stock, s5Buyers = 10, 30
	// s5Queue is how many callbacks the slow step lets queue on the product's row before it ends: one
	// more than there are units. Each holds a connection of orders' pool (DB_MAX_CONNS) while it waits.
	s5Queue = s5Stock + 1
	// s5MaxRowWait bounds the guarded side's slow step by the oldest waiter's wait (PostgreSQL's clock):
	// half the default DB_LOCK_TIMEOUT (2 s), after which a guarded callback queued on the row would give
	// up with a 503. It shortens the demonstration on a slow machine; the guarded numbers do not depend
	// on it.
	s5MaxRowWait = time.Second
)

// runS5 is a flash sale: s5Buyers buyers of one unit each for the last s5Stock units, and all their
// payments succeed at once (one signed SUCCESS callback per order, in parallel). The database is slow, as
// it is in a flash sale: another transaction (think of a back-office stock sync) holds the product's row
// when the callbacks arrive, and lets go once s5Queue of them queue behind it. Nothing is slept: the lab
// counts the queue in pg_locks, and plays the lease clock itself.
//
// Unsafe: POST /lab/unsafe/s5/payments/callback, whose stock step is check-then-write under a Redis
// lease per product without a fence. A holder reads the stock (10: nobody has taken any yet) and queues
// on the held row; the lab sees it there and runs its lease out (it deletes the lock's key: the lease
// ends while its holder is stuck, as a TTL shorter than the slow step makes it end). The next buyer takes
// the lock, reads the same 10, queues, and so on, until s5Queue holders have passed a check that only
// s5Stock of them can honour. Then the slow step ends; the lab takes the lock for itself (the last
// holder's lease runs out too) until those s5Queue have committed, so that the buyers still waiting for
// the lock read what they left: the stock ends at s5Stock - s5Queue = -1 exactly, however fast the
// machine is. (With a short LAB_STOCK_LOCK_TTL the lease also ends by itself, more holders get in, and
// the stock goes lower still.)
// Guarded: POST /v1/payments/callback, the conditional decrement, which waits on the row and then
// re-checks `stock >= qty` against the row it finally gets: 10 PAID, 20 REFUND_REQUIRED, stock 0.
func runS5(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	var u Unsafe
	var g Guarded
	for _, side := range []struct {
		unsafe bool
		path   string
	}{{true, "/lab/unsafe/s5/payments/callback"}, {false, "/v1/payments/callback"}} {
		f, err := env.NewFixture(ctx, SideName("S5", side.unsafe))
		if err != nil {
			return u, g, err
		}
		m, err := s5Side(ctx, env, f, side.path, side.unsafe)
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		if err != nil {
			return u, g, err
		}
		detail := fmt.Sprintf("%d paid for %d units, %d queued on a row held %d ms: stock %d, %d PAID, %d REFUND_REQUIRED",
			s5Buyers, s5Stock, m["queued_on_row"], m["slow_step_ms"], m["stock_final"], m["paid"], m["refund_required"])
		if side.unsafe {
			u.Measured = m
			u.Reproduced = m["stock_final"] < 0
			u.Detail = detail + fmt.Sprintf("; %d leases ran out under holders stuck on the row", m["leases_run_out"])
		} else {
			g.Measured = m
			g.OK = m["stock_final"] == 0 && m["paid"] == s5Stock && m["refund_required"] == s5Buyers-s5Stock &&
				m["outbox_rows"] == s5Stock && m["refund_requests"] == s5Buyers-s5Stock && m["non_200"] == 0 &&
				m["violations"] == 0
			g.Detail = detail
		}
	}
	return u, g, nil
}

func s5Side(ctx context.Context, env *Env, f *Fixture, path string, unsafe bool) (map[string]int64, error) {
	const price = 1999
	stock, buyers := int64(s5Stock), s5Buyers
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
	// execute. The lab sends the SUCCESS callbacks itself, all at once, so the payments are created
	// without a notify_url: the platform then sends no callback of its own, neither for the settlement
	// nor for the refunds. (A path no route serves is no substitute: the platform retries a 404, as the
	// shop answers 404 for an order it does not know yet, and filled orders' log with them.)
	ids := make([]int64, buyers)
	cbs := make([]callback.Callback, buyers)
	for i := range buyers {
		o, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s5-%d-%d", time.Now().UnixNano(), i), product, 1)
		if err != nil || r.Status != http.StatusCreated {
			return nil, notCreated("S5: create order", err, r)
		}
		p, _, err := platform.CreatePayment(ctx, payclient.CreatePaymentRequest{MerchantOrderNo: strconv.FormatInt(o.ID, 10),
			AmountCents: o.AmountCents, Currency: "EUR"})
		if err != nil {
			return nil, fmt.Errorf("S5: create payment: %w", err)
		}
		if _, err := platform.Approve(ctx, p.ID); err != nil {
			if _, _, refused := payclient.Refused(err); !refused { // refused: auto-approve was first
				return nil, fmt.Errorf("S5: approve %s: %w", p.ID, err)
			}
		}
		ids[i] = o.ID
		cbs[i] = Callback(o.ID, callback.StatusSuccess, o.AmountCents, fmt.Sprintf("lab-s5-%d", o.ID))
		cbs[i].PaymentID = p.ID
	}

	slow, err := s5HoldRow(ctx, env, product)
	if err != nil {
		return nil, err
	}
	defer slow.close()
	m := map[string]int64{"initial_stock": stock, "buyers": int64(buyers)}
	var stepErr error
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		defer slow.release() // on every path: the callbacks must not wait for ever
		if unsafe {
			stepErr = slow.unsafeStep(ctx, env, product, ids, m)
		} else {
			stepErr = slow.guardedStep(ctx, env, m)
		}
	}()
	statuses := Parallel(buyers, func(i int) int {
		r, err := env.PostCallback(ctx, path, cbs[i])
		if err != nil {
			return 0
		}
		return r.Status
	})
	<-stepped
	if err := slow.wait(); err != nil {
		return nil, err
	}
	m["slow_step_ms"] = slow.held.Milliseconds()
	if stepErr != nil {
		return nil, stepErr
	}
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

// s5Row is the slow database step: a transaction holding a product's row. It runs on a pool of its own
// (two connections: the holder and a watcher), so that neither is taken from the pool the callbacks
// queue for when orders and the lab share one (in-process tests).
type s5Row struct {
	db  *gorm.DB // the slow step's own pool (env.DB when the lab has no DatabaseURL)
	own bool     // db was opened here, and is closed by close
	pid int64    // the holding session's backend pid
	// page and tuple are the held row's ctid: the waiters counted are the ones queued on this row, not
	// on another product's (another S5 run on the same stack: a workshop walker's finding, 2026-12-07).
	page, tuple int64
	watch       *sql.Conn // the watcher's connection: counts the waiters, reads the orders' states
	start       time.Time // when the row was taken
	held        time.Duration
	once        sync.Once
	stop        chan struct{}
	done        chan error
}

// s5HoldRow starts a transaction that locks the product's row (SELECT ... FOR UPDATE) and holds it
// until release.
func s5HoldRow(ctx context.Context, env *Env, product int64) (*s5Row, error) {
	r := &s5Row{db: env.DB, stop: make(chan struct{}), done: make(chan error, 1)}
	if env.DatabaseURL != "" {
		db, err := postgres.Open(ctx, env.DatabaseURL, postgres.Options{MaxConns: 2, Logger: env.Log})
		if err != nil {
			return nil, fmt.Errorf("S5: open the slow step's connections: %w", err)
		}
		r.db, r.own = db, true
	}
	pool, err := r.db.DB()
	if err != nil {
		r.close()
		return nil, err
	}
	if r.watch, err = pool.Conn(ctx); err != nil {
		r.close()
		return nil, fmt.Errorf("S5: reserve a connection: %w", err)
	}
	held := make(chan error, 1)
	go func() {
		r.done <- r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			err := tx.Raw(`SELECT pg_backend_pid(), (ctid::text::point)[0]::bigint, (ctid::text::point)[1]::bigint
				FROM products WHERE id = ? FOR UPDATE`, product).Row().Scan(&r.pid, &r.page, &r.tuple)
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
		r.close()
		return nil, fmt.Errorf("S5: hold the product row: %w", err)
	}
	r.start = time.Now()
	return r, nil
}

// waiters counts the transactions queued on the held row (the first waits for the holder's
// transaction id, the others for the row's tuple lock, which the first holds: the row's version, by
// its ctid, which stays while the holder only locks it), and how long the oldest of them has waited, by
// PostgreSQL's clock.
func (r *s5Row) waiters(ctx context.Context) (n, oldestMs int64, err error) {
	err = r.watch.QueryRowContext(ctx, `SELECT count(*),
		  COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(a.query_start)) * 1000, 0)::bigint
		FROM pg_locks w JOIN pg_stat_activity a ON a.pid = w.pid
		WHERE NOT w.granted AND (
		  (w.locktype = 'transactionid' AND w.transactionid IN
		     (SELECT h.transactionid FROM pg_locks h WHERE h.pid = $1 AND h.locktype = 'transactionid' AND h.granted))
		  OR (w.locktype = 'tuple' AND w.relation = 'products'::regclass AND w.page = $2 AND w.tuple = $3
		      AND w.database = (SELECT oid FROM pg_database WHERE datname = current_database())))`,
		r.pid, r.page, r.tuple).Scan(&n, &oldestMs)
	if err != nil {
		return 0, 0, fmt.Errorf("S5: count waiters on the product row: %w", err)
	}
	return n, oldestMs, nil
}

// settled counts the orders of ids whose callback has committed (no longer PENDING).
func (r *s5Row) settled(ctx context.Context, ids []int64) (int64, error) {
	var n int64
	err := r.watch.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1::bigint[]) AND status <> 'PENDING'`,
		ids).Scan(&n) // pgx encodes a []int64 as a bigint[]
	if err != nil {
		return 0, fmt.Errorf("S5: count settled orders: %w", err)
	}
	return n, nil
}

// unsafeStep is the unsafe side's slow step, with the lab as the lease's clock. Each time one more
// holder of the flash-sale lock is seen queued on the row (it has read the stock, and waits to write
// it), its lease runs out: the lab deletes the lock's key, and the next buyer takes the lock. Once
// s5Queue holders are queued, the lab takes the lock itself (SET over the last holder's lease, which
// runs out as well), lets the row go, waits until those holders have committed, and gives the lock up:
// the buyers still waiting for it then read the stock the queue left. Measured: queued_on_row,
// leases_run_out.
func (r *s5Row) unsafeStep(ctx context.Context, env *Env, product int64, ids []int64, m map[string]int64) error {
	within := s5Within(env)
	locker, err := lock.New(env.Redis, env.RedisPrefix)
	if err != nil {
		return err
	}
	key := locker.LockKey(callback.FlashSaleLockName(product))
	var queued int64
	full, err := Eventually(ctx, within, func() (bool, error) {
		n, _, err := r.waiters(ctx)
		if err != nil || n >= s5Queue {
			queued = max(queued, n)
			return err == nil, err
		}
		if n > queued {
			queued = n
			if err := env.Redis.Del(ctx, key).Err(); err != nil {
				return false, fmt.Errorf("S5: run the lease out: %w", err)
			}
			m["leases_run_out"]++
		}
		return false, nil
	})
	m["queued_on_row"] = queued
	if err != nil {
		return err
	}
	if !full {
		return fmt.Errorf("S5: only %d of %d callbacks queued on the held row within %s (each needs a connection of orders' pool: DB_MAX_CONNS > %d?)",
			queued, s5Queue, within, s5Queue)
	}
	if err := env.Redis.Set(ctx, key, "lab-s5-slow-step", within).Err(); err != nil {
		return fmt.Errorf("S5: take the lock: %w", err)
	}
	m["leases_run_out"]++
	defer env.Redis.Del(context.WithoutCancel(ctx), key) // the lock goes back on every path
	r.release()
	done, err := Eventually(ctx, within, func() (bool, error) {
		n, err := r.settled(ctx, ids)
		return n >= queued, err
	})
	if err != nil {
		return err
	}
	if !done {
		return fmt.Errorf("S5: the %d callbacks queued on the row did not commit within %s", queued, within)
	}
	return nil
}

// guardedStep is the guarded side's slow step: the row is held until s5Queue callbacks queue on it, or
// until the oldest has waited s5MaxRowWait. Measured: queued_on_row.
func (r *s5Row) guardedStep(ctx context.Context, env *Env, m map[string]int64) error {
	within := s5Within(env)
	var queued int64
	full, err := Eventually(ctx, within, func() (bool, error) {
		n, oldest, err := r.waiters(ctx)
		queued = max(queued, n)
		return n >= s5Queue || (n > 0 && oldest >= s5MaxRowWait.Milliseconds()), err
	})
	m["queued_on_row"] = queued
	if err == nil && !full {
		err = fmt.Errorf("S5: no callback queued on the held row within %s", within)
	}
	return err
}

// s5Within bounds each wait of S5's slow step.
func s5Within(env *Env) time.Duration {
	if env.Quiet > 0 {
		return env.Quiet
	}
	return 15 * time.Second
}

// release lets the row go (idempotent) and notes how long it was held; wait returns the holding
// transaction's result; close returns the watcher's connection and closes the step's own pool.
func (r *s5Row) release() {
	r.once.Do(func() {
		r.held = time.Since(r.start)
		close(r.stop)
	})
}

func (r *s5Row) wait() error { r.release(); return <-r.done }

func (r *s5Row) close() {
	if r.watch != nil {
		_ = r.watch.Close()
	}
	if r.own {
		_ = postgres.Close(r.db)
	}
}

// s5ForgetLock removes the S5 product lock's keys from Redis (best effort).
func s5ForgetLock(ctx context.Context, env *Env, productID int64) {
	l, err := lock.New(env.Redis, env.RedisPrefix)
	if err != nil {
		return
	}
	name := callback.FlashSaleLockName(productID)
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
