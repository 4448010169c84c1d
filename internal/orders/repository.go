package orders

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"idemshop/internal/platform/pgtx"
)

// Repository holds the orders SQL.
type Repository struct {
	db *gorm.DB
}

// NewRepository returns a Repository over db.
func NewRepository(db *gorm.DB) (*Repository, error) {
	if db == nil {
		return nil, errors.New("orders: NewRepository needs a db")
	}
	return &Repository{db: db}, nil
}

// Products lists the catalogue, by id.
func (r *Repository) Products(ctx context.Context) ([]Product, error) {
	ps := []Product{}
	if err := r.db.WithContext(ctx).Table("products").Order("id").Find(&ps).Error; err != nil {
		return nil, fmt.Errorf("list products: %w", err)
	}
	return ps, nil
}

// Create inserts a PENDING order for userID inside tx, the caller's transaction (the one that also holds
// the idempotency key row). Stock is checked, not deducted: it is deducted once, when payment succeeds.
// Errors: ErrUnknownProduct, ErrInsufficientStock, or a wrapped database error.
func (r *Repository) Create(ctx context.Context, tx *gorm.DB, userID int64, req CreateRequest) (Order, error) {
	var p Product
	res := tx.WithContext(ctx).Table("products").Where("id = ?", req.ProductID).Limit(1).Find(&p)
	if res.Error != nil {
		return Order{}, fmt.Errorf("read product %d: %w", req.ProductID, res.Error)
	}
	if res.RowsAffected == 0 {
		return Order{}, ErrUnknownProduct
	}
	if p.Stock < int64(req.Quantity) {
		return Order{}, ErrInsufficientStock
	}
	amount, err := Amount(p.PriceCents, req.Quantity)
	if err != nil {
		return Order{}, err
	}
	o := Order{UserID: userID, Status: StatusPending, ProductID: p.ID, Quantity: req.Quantity,
		AmountCents: amount, Currency: p.Currency}
	err = tx.WithContext(ctx).Raw(`INSERT INTO orders (user_id, product_id, quantity, amount_cents, currency, status)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id, created_at, updated_at`,
		o.UserID, o.ProductID, o.Quantity, o.AmountCents, o.Currency, o.Status).
		Row().Scan(&o.ID, &o.CreatedAt, &o.UpdatedAt)
	if err != nil {
		return Order{}, fmt.Errorf("insert order: %w", err)
	}
	return o, nil
}

// Line is one order of a user's list, with its product's name (the storefront's "my orders").
type Line struct {
	ID          int64
	ProductName string
	Quantity    int
	AmountCents int64 // minor units of Currency
	Currency    string
	Status      string
}

// Newest returns userID's newest orders, at most limit, newest first, each with its product's name.
func (r *Repository) Newest(ctx context.Context, userID int64, limit int) ([]Line, error) {
	lines := []Line{}
	err := r.db.WithContext(ctx).Raw(`SELECT o.id, p.name AS product_name, o.quantity, o.amount_cents,
		o.currency, o.status FROM orders o JOIN products p ON p.id = o.product_id
		WHERE o.user_id = ? ORDER BY o.id DESC LIMIT ?`, userID, limit).Scan(&lines).Error
	if err != nil {
		return nil, fmt.Errorf("list orders of user %d: %w", userID, err)
	}
	return lines, nil
}

// Get returns userID's order id. Another user's order is ErrOrderNotFound, exactly like a missing one,
// so ids cannot be probed.
func (r *Repository) Get(ctx context.Context, userID, id int64) (Order, error) {
	var o Order
	res := r.db.WithContext(ctx).Table("orders").Where("id = ? AND user_id = ?", id, userID).Limit(1).Find(&o)
	if res.Error != nil {
		return Order{}, fmt.Errorf("read order %d: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return Order{}, ErrOrderNotFound
	}
	return o, nil
}

// Lookup returns order id whoever owns it (for callbacks, which carry no user). ErrOrderNotFound if absent.
func (r *Repository) Lookup(ctx context.Context, db *gorm.DB, id int64) (Order, error) {
	var o Order
	res := db.WithContext(ctx).Table("orders").Where("id = ?", id).Limit(1).Find(&o)
	if res.Error != nil {
		return Order{}, fmt.Errorf("read order %d: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return Order{}, ErrOrderNotFound
	}
	return o, nil
}

// Reread returns order id as it is now (Lookup on the repository's pool), for a caller that holds an
// older copy and must not act on it alone: the reconciler, before it alerts.
func (r *Repository) Reread(ctx context.Context, id int64) (Order, error) {
	return r.Lookup(ctx, r.db, id)
}

// BeginAndLookup opens t's transaction and reads order id in the same round trip (pgtx.Tx.Begin): the
// first read of a transaction that will change the order costs no round trip of its own for the
// BEGIN. It is Lookup's read (no lock: the conditional UPDATEs that follow decide), with Lookup's
// errors: ErrOrderNotFound, or the read's error wrapped.
func (r *Repository) BeginAndLookup(ctx context.Context, t *pgtx.Tx, id int64) (Order, error) {
	var o Order
	err := t.Begin(ctx, `SELECT id, user_id, status, product_id, quantity, amount_cents, currency, payment_id,
		refunded_cents, created_at, updated_at FROM orders WHERE id = $1`, []any{id},
		&o.ID, &o.UserID, &o.Status, &o.ProductID, &o.Quantity, &o.AmountCents, &o.Currency, &o.PaymentID,
		&o.RefundedCents, &o.CreatedAt, &o.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrOrderNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("read order %d: %w", id, err)
	}
	return o, nil
}

// Transition moves order id to status to, if and only if its current status is one the transition
// table allows; paymentID, when not empty, is recorded if the order has none yet. It reports whether
// the row changed. This single conditional UPDATE is the guard against duplicate and out-of-order
// events: the row lock makes concurrent callers queue, and only the first still finds an allowed prior
// status, so exactly one of any number of identical events sees true.
func (r *Repository) Transition(ctx context.Context, tx *gorm.DB, id int64, to Status, paymentID string) (bool, error) {
	changed, _, err := r.transition(ctx, tx, id, to, paymentID)
	return changed, err
}

// Fail is Transition to FAILED that also returns the order's refunded total (cents), as Pay does.
func (r *Repository) Fail(ctx context.Context, tx *gorm.DB, id int64, paymentID string) (failed bool, refundedCents int64, err error) {
	return r.transition(ctx, tx, id, StatusFailed, paymentID)
}

// Pay is Transition to PAID that also returns the order's refunded total (cents) as the UPDATE left it.
// The row lock is held from the UPDATE on, so the figure is current: the caller learns without another
// read whether a refund that arrived before this SUCCESS is owed now. When paid is false the row did
// not change and refundedCents is 0.
func (r *Repository) Pay(ctx context.Context, tx *gorm.DB, id int64, paymentID string) (paid bool, refundedCents int64, err error) {
	return r.transition(ctx, tx, id, StatusPaid, paymentID)
}

// transition is the one statement of the state machine (Transition, Pay). RETURNING hands back the
// refunded total of the row it changed, and no row when it changed none.
func (r *Repository) transition(ctx context.Context, tx *gorm.DB, id int64, to Status, paymentID string) (bool, int64, error) {
	from := AllowedFrom(to)
	if len(from) == 0 {
		return false, 0, ErrIllegalTransition{To: to}
	}
	// Row().Scan, not Raw().Scan: GORM's Scan renders every statement's SQL text for its logger.
	var refundedCents int64
	err := tx.WithContext(ctx).Raw(`UPDATE orders
		SET status = ?, payment_id = COALESCE(payment_id, NULLIF(?, '')), updated_at = now()
		WHERE id = ? AND status IN ? RETURNING refunded_cents`, to, paymentID, id, from).Row().Scan(&refundedCents)
	if errors.Is(err, sql.ErrNoRows) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("order %d → %s: %w", id, to, err)
	}
	return true, refundedCents, nil
}

// TransitionFrom moves order id from exactly status from to status to, if the table allows that move, and
// reports whether the row changed. Use it where the side effects depend on where the order came from:
// a refund gives stock and points back only to an order that was PAID.
func (r *Repository) TransitionFrom(ctx context.Context, tx *gorm.DB, id int64, from, to Status) (bool, error) {
	if !CanTransition(from, to) {
		return false, fmt.Errorf("order %d: %s → %s is not in the transition table", id, from, to)
	}
	res := tx.WithContext(ctx).Exec(`UPDATE orders SET status = ?, updated_at = now() WHERE id = ? AND status = ?`,
		to, id, from)
	if res.Error != nil {
		return false, fmt.Errorf("order %d %s → %s: %w", id, from, to, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// Refunded returns order id's refunded total (cents) and status, read inside tx, without a lock. When
// the caller changed the row in this transaction it holds the row's lock, and the two agree with what it
// wrote. A caller that changed nothing (a resent refund callback, whose refund row was already there)
// may read a total that a concurrent refund is about to raise: that one settles the order itself, under
// the lock, and what this caller does with the older total (cap a pending request less tightly, or a
// conditional transition that finds the row moved) changes nothing. RefundedLocked takes the lock.
func (r *Repository) Refunded(ctx context.Context, tx *gorm.DB, id int64) (int64, Status, error) {
	return readRefunded(ctx, tx, id, "")
}

// RefundedLocked is Refunded for a caller that has not changed the row in this transaction: it takes
// the order's row lock first, so that a refund of this order committing meanwhile is counted rather
// than missed, and no refund can be recorded between this read and the caller's commit.
//
// FOR NO KEY UPDATE, the lock an UPDATE of the row takes, not FOR UPDATE: a refund being recorded holds
// a KEY SHARE lock on the order (its event row's foreign key) and then waits for this transaction to
// update the total. FOR UPDATE would wait for that KEY SHARE, and the two would deadlock.
func (r *Repository) RefundedLocked(ctx context.Context, tx *gorm.DB, id int64) (int64, Status, error) {
	return readRefunded(ctx, tx, id, " FOR NO KEY UPDATE")
}

func readRefunded(ctx context.Context, tx *gorm.DB, id int64, lock string) (int64, Status, error) {
	var refunded int64
	var status Status
	if err := tx.WithContext(ctx).Raw(`SELECT refunded_cents, status FROM orders WHERE id = ?`+lock, id).
		Row().Scan(&refunded, &status); err != nil {
		return 0, "", fmt.Errorf("read refunds of order %d: %w", id, err)
	}
	return refunded, status, nil
}

// RecordRefund adds one refund event of amountCents to order id, once per eventID (the event's primary
// key in order_refund_events: a resent copy adds nothing). The event keeps its own amount; the order's
// total is capped at the order's amount. It reports whether the event was new and by how many cents
// the order's refund events now add up to more than its amount (0 unless a platform refunded more than
// was paid, an anomaly the caller raises an alert for). An eventID already recorded for another order
// or another amount is ErrRefundEventReused, wrapped with both: it is not a resend.
func (r *Repository) RecordRefund(ctx context.Context, tx *gorm.DB, id int64, eventID, paymentID string, amountCents int64) (fresh bool, overCents int64, err error) {
	res := tx.WithContext(ctx).Exec(`INSERT INTO order_refund_events (event_id, order_id, payment_id, amount_cents)
		VALUES (?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING`, eventID, id, paymentID, amountCents)
	if res.Error != nil {
		return false, 0, fmt.Errorf("record refund event %s of order %d: %w", eventID, id, res.Error)
	}
	if res.RowsAffected == 0 {
		return false, 0, sameRefund(ctx, tx, id, eventID, amountCents)
	}
	if err := r.addRefunded(ctx, tx, id, paymentID, amountCents); err != nil {
		return false, 0, err
	}
	// The events' own sum, not refunded_cents: the reconciler may have set that to the whole amount
	// (RecordFullRefund) before the events that make it up arrive, which is no anomaly. Read after the
	// UPDATE, under its row lock, so a refund of this order that committed meanwhile is counted: of two
	// concurrent events that go over together, the later one reports it. Another payment's refunds
	// (OwnRefunds) are not this order's money.
	if err := tx.WithContext(ctx).Raw(`SELECT GREATEST(0, (SELECT COALESCE(SUM(e.amount_cents), 0)
		FROM order_refund_events e WHERE e.order_id = o.id
		AND (e.payment_id IS NULL OR o.payment_id IS NULL OR e.payment_id = o.payment_id)) - o.amount_cents)
		FROM orders o WHERE o.id = ?`, id).
		Scan(&overCents).Error; err != nil {
		return false, 0, fmt.Errorf("sum refund events of order %d: %w", id, err)
	}
	return true, overCents, nil
}

// sameRefund checks that the refund event already recorded under eventID is this one (order id,
// amountCents): only then is this event a resend that adds nothing. The row is committed (the
// INSERT's conflict waited for its transaction), so this statement's snapshot sees it.
func sameRefund(ctx context.Context, tx *gorm.DB, id int64, eventID string, amountCents int64) error {
	var first struct {
		OrderID     int64
		AmountCents int64
	}
	if err := tx.WithContext(ctx).Raw(`SELECT order_id, amount_cents FROM order_refund_events WHERE event_id = ?`,
		eventID).Scan(&first).Error; err != nil {
		return fmt.Errorf("read refund event %s: %w", eventID, err)
	}
	if first.OrderID != id || first.AmountCents != amountCents {
		return ErrRefundEventReused.Wrap(fmt.Errorf("refund event %s was first recorded for order %d, %d cents, "+
			"and now came for order %d, %d cents", eventID, first.OrderID, first.AmountCents, id, amountCents))
	}
	return nil
}

// RecordFullRefund sets order id's refunded total to its whole amount: the platform's query API said the
// payment is REFUNDED (the reconciler). Only the whole amount is safe to set from a total: a partial
// total would be counted again by the refund events that make it up, when they arrive.
func (r *Repository) RecordFullRefund(ctx context.Context, tx *gorm.DB, id int64) error {
	if err := tx.WithContext(ctx).Exec(`UPDATE orders SET refunded_cents = amount_cents, updated_at = now()
		WHERE id = ? AND refunded_cents < amount_cents`, id).Error; err != nil {
		return fmt.Errorf("record full refund of order %d: %w", id, err)
	}
	return nil
}

// OwnRefunds is for the moment order id learns its payment (paymentID): refund events recorded before
// it under another payment id gave back money this order never held (a platform with two payments for
// one order number), so they come out of its refunded total, which is then recomputed from its own
// events. It returns the refunded total and the cents it took out now (0: nothing changed, also on a
// second call). It takes the order's row lock. The common case, no refund before the payment, needs
// no call: settleSuccess makes one only when something was refunded.
func (r *Repository) OwnRefunds(ctx context.Context, tx *gorm.DB, id int64, paymentID string) (refundedCents, takenOutCents int64, err error) {
	var before int64
	before, _, err = r.RefundedLocked(ctx, tx, id)
	if err != nil || paymentID == "" { // no payment to tell the others from: the total as it is
		return before, 0, err
	}
	err = tx.WithContext(ctx).Raw(`WITH e AS (
		SELECT COALESCE(SUM(amount_cents) FILTER (WHERE payment_id IS DISTINCT FROM ? AND payment_id IS NOT NULL), 0) AS other,
		       COALESCE(SUM(amount_cents) FILTER (WHERE payment_id = ? OR payment_id IS NULL), 0) AS own
		FROM order_refund_events WHERE order_id = ?)
	UPDATE orders o SET refunded_cents = CASE WHEN e.other > 0 THEN LEAST(o.amount_cents, e.own) ELSE o.refunded_cents END
	FROM e WHERE o.id = ? RETURNING o.refunded_cents`, paymentID, paymentID, id, id).Row().Scan(&refundedCents)
	if err != nil {
		return 0, 0, fmt.Errorf("refunds of order %d's own payment: %w", id, err)
	}
	return refundedCents, before - refundedCents, nil
}

// addRefunded adds a refund of payment paymentID to order id's total, unless the order's payment is
// another (ErrOtherPayment): the caller checked that on a read without the row lock, and a SUCCESS of the
// order's own payment may have committed since.
func (r *Repository) addRefunded(ctx context.Context, tx *gorm.DB, id int64, paymentID string, amountCents int64) error {
	res := tx.WithContext(ctx).Exec(`UPDATE orders SET refunded_cents = LEAST(amount_cents, refunded_cents + ?),
		updated_at = now() WHERE id = ? AND (payment_id IS NULL OR payment_id = ?)`, amountCents, id, paymentID)
	if res.Error != nil {
		return fmt.Errorf("add refund to order %d: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("order %d, refund of %s: %w", id, paymentID, ErrOtherPayment)
	}
	return nil
}

// RestoreStock gives quantity units of product id back: the compensation of a paid order that was
// refunded in full. It runs in the transaction whose conditional UPDATE moved the order PAID → REFUNDED,
// so it happens once, exactly like the decrement it undoes.
func (r *Repository) RestoreStock(ctx context.Context, tx *gorm.DB, productID int64, quantity int) error {
	res := tx.WithContext(ctx).Exec(`UPDATE products SET stock = stock + ? WHERE id = ?`, quantity, productID)
	if res.Error != nil {
		return fmt.Errorf("restore stock of product %d: %w", productID, res.Error)
	}
	return nil
}

// DecrementStock takes quantity units of product id, if and only if that many are left; it reports
// whether it did. The guard is in the WHERE clause (stock >= quantity), never a read-then-write, so two
// concurrent buyers of the last unit cannot both succeed.
func (r *Repository) DecrementStock(ctx context.Context, tx *gorm.DB, productID int64, quantity int) (bool, error) {
	res := tx.WithContext(ctx).Exec(`UPDATE products SET stock = stock - ? WHERE id = ? AND stock >= ?`,
		quantity, productID, quantity)
	if res.Error != nil {
		return false, fmt.Errorf("decrement stock of product %d: %w", productID, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// Status returns order id's current status, read in tx (inside a transaction, after its own writes).
func (r *Repository) Status(ctx context.Context, tx *gorm.DB, id int64) (Status, error) {
	var st Status
	if err := tx.WithContext(ctx).Raw(`SELECT status FROM orders WHERE id = ?`, id).Row().Scan(&st); err != nil {
		return "", fmt.Errorf("read status of order %d: %w", id, err)
	}
	return st, nil
}

// StatusAndPayment returns order id's current status and payment id ("" while it knows none), read in
// tx. After a conditional UPDATE that changed nothing (it waited for the transaction that moved the
// row, if any), this read sees what that transaction committed: the payment a callback read before may
// have been stored since.
func (r *Repository) StatusAndPayment(ctx context.Context, tx *gorm.DB, id int64) (Status, string, error) {
	var st Status
	var payment sql.NullString
	if err := tx.WithContext(ctx).Raw(`SELECT status, payment_id FROM orders WHERE id = ?`, id).Row().Scan(&st, &payment); err != nil {
		return "", "", fmt.Errorf("read status and payment of order %d: %w", id, err)
	}
	return st, payment.String, nil
}

// ReconcileWindow picks the orders the reconciler compares with the platform. Durations are wall-clock
// ages on the database's clock, which stamped the rows, but for the lookback, which counts from the
// earlier of the database's clock and Now, the process's. The database's alone, stepped forward two
// hours, took every order older than 22 hours out of a 24-hour lookback, and two lost refunds went
// unreported (a clock-skew helper's finding, 2026-12-07): dropping an order waits until both clocks
// agree. Grace and recheck only ever make a comparison wait, so they stay on the database's clock: on
// the earlier clock, a database running two hours ahead held every comparison back two hours (the
// verifier's finding, the same day).
type ReconcileWindow struct {
	Grace    time.Duration // untouched for at least this long (callbacks and the sweeper go first)
	Lookback time.Duration // created less than this long ago
	Recheck  time.Duration // not compared in the last Recheck
	Limit    int           // at most this many
	Now      time.Time     // the process's clock (zero: time.Now())
}

// reconcileCandidatesSQL is ReconcileCandidates' query. Its status list must imply the predicate of
// orders_reconcile_idx (migration 00016), whose key, created_at, keeps a run to the orders created within
// the lookback. When REFUNDED joined the list (2026-12-07) and the index was left as it was, every run
// read the whole orders table (84 ms at 400k orders, a DBA helper's figure). A var, not a const, so that
// `make mutants` holds the mutants of its clauses in one schema (internal/mutants/schema.go).
var reconcileCandidatesSQL = `SELECT * FROM orders
		WHERE status NOT IN ('PENDING', 'CANCELLED')
		  AND updated_at < now() - make_interval(secs => ?)
		  AND created_at > LEAST(now(), ?) - make_interval(secs => ?)
		  AND (reconciled_at IS NULL OR reconciled_at < now() - make_interval(secs => ?))
		ORDER BY reconciled_at NULLS FIRST, id
		LIMIT ?`

// reconcileCandidatesArgs are reconcileCandidatesSQL's parameters for w (seconds, the process's clock
// for the lookback, and the limit).
func reconcileCandidatesArgs(w ReconcileWindow) []any {
	now := w.Now
	if now.IsZero() {
		now = time.Now()
	}
	return []any{w.Grace.Seconds(), now, w.Lookback.Seconds(), w.Recheck.Seconds(), w.Limit}
}

// ReconcileCandidates are the orders that may still differ from the platform: not PENDING or CANCELLED,
// inside w (REFUNDED is final, but compared for its refunded total: a forged full refund). Oldest
// comparison first, so a large backlog is worked through in turn.
// PENDING orders are left out: a payment exists only after a pay record was claimed, and an unfinished
// record is settled first (which moves its order too), so asking about every unpaid cart would only
// cost the platform queries.
func (r *Repository) ReconcileCandidates(ctx context.Context, w ReconcileWindow) ([]Order, error) {
	var list []Order
	err := r.db.WithContext(ctx).Raw(reconcileCandidatesSQL, reconcileCandidatesArgs(w)...).Scan(&list).Error
	if err != nil {
		return nil, fmt.Errorf("list orders to reconcile: %w", err)
	}
	return list, nil
}

// MarkReconciled stamps order id as compared with the platform now (reconciled_at), so that
// ReconcileCandidates leaves it alone for the next Recheck.
func (r *Repository) MarkReconciled(ctx context.Context, id int64) error {
	if err := r.db.WithContext(ctx).Exec(`UPDATE orders SET reconciled_at = now() WHERE id = ?`, id).Error; err != nil {
		return fmt.Errorf("stamp reconciled_at of order %d: %w", id, err)
	}
	return nil
}
