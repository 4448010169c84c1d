// Package points credits loyalty points for paid orders and reverses them for refunded ones. The
// consumer (consumer.go) reads order.paid and order.refunded from RabbitMQ and de-duplicates on the
// business key (order-paid:<id>, order-refunded:<id>) in two layers: a Redis lease (lease.go, an
// efficiency layer) and the unique index on points_ledger.biz_id (this file, the source of truth).
// docs/points.md walks through the flow, the reversal rules and the crash windows.
//
// Every writer of points_ledger writes the row's user's points_accounts row in the same transaction
// (insertCredits: the account upsert in the same statement; Reverse; Debit). That is what refuses an
// unknown user: points_accounts.user_id references users, and the ledger's own foreign key was dropped
// for the cost of its per-row check (migrations/00009, docs/performance.md). A new writer must do the
// same.
package points

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
)

// ErrRejected marks a credit the database refuses for what it is (an unknown user, a value out of
// range): retrying it cannot succeed, so the consumer lets it run into the delivery limit and the DLQ
// instead of retrying in place.
var ErrRejected = errors.New("points: credit rejected by the database")

// BizIDOrderPaid is the ledger's business key for the credit of a paid order. The unique index on
// biz_id makes every order credit at most once, whatever the broker delivers.
func BizIDOrderPaid(orderID int64) string { return "order-paid:" + strconv.FormatInt(orderID, 10) }

// BizIDOrderRefunded is the ledger's business key for the reversal of a refunded order's credit: at
// most one reversal per order, like at most one credit.
func BizIDOrderRefunded(orderID int64) string {
	return "order-refunded:" + strconv.FormatInt(orderID, 10)
}

// Ledger reasons, as GET /v1/points shows them.
const (
	ReasonOrderPaid     = "order_paid"     // the credit of a paid order
	ReasonOrderRefunded = "order_refunded" // its reversal after a full refund (delta <= 0)
)

// Credit is one ledger entry to write.
type Credit struct {
	BizID  string `json:"biz_id"`
	UserID int64  `json:"user_id"`
	Delta  int64  `json:"delta"`
	Reason string `json:"reason"`
}

// Entry is a ledger row as GET /v1/points shows it.
type Entry struct {
	BizID     string
	Delta     int64
	Reason    string
	CreatedAt time.Time
}

// ErrInsufficientBalance is Debit's answer when the account has fewer points than asked (or none):
// nothing was written.
var ErrInsufficientBalance = errors.New("points: balance below the debit")

// ErrAccountLocked is Debit's answer when the account row stayed locked past the lock timeout: another
// transaction of this user's points held it (a submit still in the database, a reversal). It wraps
// the translated postgres.ErrLockTimeout. A lock wait elsewhere (a table an operator locked) is
// postgres.ErrLockTimeout alone: only this row says another transaction of the user is at work.
var ErrAccountLocked = errors.New("points: the account row stayed locked past the lock timeout")

// Debit takes amount points from userID's balance and writes the ledger row that records it, inside the
// caller's transaction tx, so that the debit commits (or rolls back) with the caller's own rows (a
// coupon). bizID is the debit's business key: the unique index on biz_id makes it happen at most once.
// It returns the balance after the debit.
//
// Errors: ErrInsufficientBalance (no row changed), ErrAccountLocked (another transaction held the account
// row), or a database error translated by postgres.TranslateError (postgres.ErrDuplicate: this bizID
// was already debited, by a transaction that committed first).
func Debit(ctx context.Context, tx *gorm.DB, userID int64, bizID string, amount int64, reason string) (int64, error) {
	// The guard is in the WHERE clause, never a read-then-write: the row lock makes concurrent debits of
	// one account queue, and each re-checks balance >= amount on the row it finally sees, so the balance
	// never goes below zero (the CHECK constraint would refuse it anyway).
	var balance int64
	err := tx.WithContext(ctx).Raw(`UPDATE points_accounts SET balance = balance - ?, updated_at = now()
		WHERE user_id = ? AND balance >= ? RETURNING balance`, amount, userID, amount).Row().Scan(&balance)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrInsufficientBalance // no account, or too few points: 0 rows
	}
	if err != nil {
		err = postgres.TranslateError(err)
		if errors.Is(err, postgres.ErrLockTimeout) {
			return 0, fmt.Errorf("debit points: %w: %w", ErrAccountLocked, err)
		}
		return 0, fmt.Errorf("debit points: %w", err)
	}
	// The ledger row is the debit's record. Its biz_id is unique: a second transaction for the same key
	// fails here (23505) and rolls back its debit with it.
	err = tx.WithContext(ctx).Exec(`INSERT INTO points_ledger (user_id, biz_id, delta, reason) VALUES (?, ?, ?, ?)`,
		userID, bizID, -amount, reason).Error
	if err != nil {
		return 0, fmt.Errorf("insert ledger row: %w", postgres.TranslateError(err))
	}
	return balance, nil
}

// Ledger is the repository of points_ledger and points_accounts.
type Ledger struct {
	db *gorm.DB
}

// NewLedger returns the repository over db.
func NewLedger(db *gorm.DB) (*Ledger, error) {
	if db == nil {
		return nil, errors.New("points: NewLedger needs a db")
	}
	return &Ledger{db: db}, nil
}

// Applied is what Apply did with the biz_ids of its credits. Inserted: written now. Any other was in the
// ledger already (ON CONFLICT DO NOTHING: the statement is not aborted by the duplicate), and wrote
// nothing: a duplicate, unless it is in Conflicting, whose row there has another user or delta. That is
// not the same credit: one of the two messages is broken or forged (a reversal that overtook its
// order.paid writes the credit from its own data, and this is where the real one finds it differs).
type Applied struct {
	Inserted    map[string]bool
	Conflicting map[string]bool
}

// Apply writes credits in ONE transaction: the ledger rows and the balance changes commit together or
// not at all. It says which biz_ids were inserted now and which were in the ledger with another user or
// delta (Applied). Duplicate biz_ids inside credits are applied once.
//
// The transaction is one statement (insertCredits), so it needs no BEGIN and COMMIT of its own: a
// single statement is atomic in PostgreSQL, and one round trip does the whole batch. A read follows it
// only when a row another transaction committed meanwhile must be compared (insertCredits); it writes
// nothing.
//
// The whole batch fails together: one unknown user aborts every credit of the call, and the caller
// retries the others one by one. Errors the database raises for the data itself wrap ErrRejected.
func (l *Ledger) Apply(ctx context.Context, credits []Credit) (Applied, error) {
	ctx = postgres.RejectionsHandled(ctx) // a refused batch is retried one by one, and poison dead-lettered
	return insertCredits(l.db.WithContext(ctx), credits)
}

// insertCredits inserts the ledger rows and adds exactly the inserted deltas to the balances, in ONE
// statement: atomic on its own (Apply), or part of the caller's transaction tx (Reverse, for the
// credit a reversal may have to apply first). Deltas must not be negative: the account upsert would
// refuse a new account with a negative balance (CHECK balance >= 0) even when the account exists.
//
//   - ins: the ledger rows; the unique biz_id is the guard (layer 2), and a biz_id already there
//     inserts nothing, so RETURNING lists exactly the credits applied now;
//   - the account upsert sums only what ins returned: the ledger row and its balance change are one
//     fact. A data-modifying WITH runs to completion even though the final SELECT does not read it;
//   - the final SELECT returns the inserted biz_ids, then each skipped one with whether its row
//     differs. The statement reads the ledger as it was when it started (the rows ins writes are not
//     visible to it), so the join finds exactly the rows that were there before; NOT IN (ins) keeps
//     the probes to the skipped ones, a few in a batch of new credits.
//   - a skipped biz_id the join did not find is a row another transaction committed while this one
//     waited on it. It is compared in a statement of its own, which sees every committed row (a round
//     trip only when that happens). Left uncompared, a forged reversal that wrote a credit from its
//     own data first (its lease is order-refunded's, not order-paid's: nothing in Redis keeps the two
//     apart) made the real credit a silent duplicate, and the user's points were lost without a dead
//     letter; the other way round, the forged reversal went through (a helper's findings, 2026-12-08).
//
// Both inserts take their locks in a fixed order (credits sorted by biz_id, accounts by user id), so
// that concurrent batches cannot deadlock on each other.
func insertCredits(tx *gorm.DB, credits []Credit) (Applied, error) {
	applied := Applied{Inserted: make(map[string]bool, len(credits)), Conflicting: map[string]bool{}}
	if len(credits) == 0 {
		return applied, nil
	}
	sorted := slices.Clone(credits)
	slices.SortFunc(sorted, func(a, b Credit) int { return strings.Compare(a.BizID, b.BizID) })
	n := len(sorted)
	bizIDs, users, deltas, reasons := make([]string, n), make([]int64, n), make([]int64, n), make([]string, n)
	for i, c := range sorted {
		bizIDs[i], users[i], deltas[i], reasons[i] = c.BizID, c.UserID, c.Delta, c.Reason
	}
	// One array per column, unnested side by side, rather than one JSON document: no JSON to marshal
	// here and to parse there, which was about a sixth of the statement's time for a batch of 100.
	// Rows(), not Scan(): GORM's Scan renders the statement's SQL with its parameters for its logger,
	// four arrays of a hundred values each, on the batch's path.
	rows, err := tx.Raw(`WITH c AS (
		SELECT * FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::text[]) AS c(biz_id, user_id, delta, reason)
	), ins AS (
		INSERT INTO points_ledger (biz_id, user_id, delta, reason)
		SELECT biz_id, user_id, delta, reason FROM c
		ON CONFLICT (biz_id) DO NOTHING
		RETURNING biz_id, user_id, delta
	), balances AS (
		INSERT INTO points_accounts (user_id, balance, updated_at)
		SELECT user_id, sum(delta), now() FROM ins GROUP BY user_id ORDER BY user_id
		ON CONFLICT (user_id) DO UPDATE
		SET balance = points_accounts.balance + EXCLUDED.balance, updated_at = now()
	)
	SELECT biz_id, true, false FROM ins
	UNION ALL
	SELECT c.biz_id, false, (l.user_id, l.delta) <> (c.user_id, c.delta) FROM c JOIN points_ledger l ON l.biz_id = c.biz_id
	WHERE c.biz_id NOT IN (SELECT biz_id FROM ins)`,
		pgArray[string](bizIDs), pgArray[int64](users), pgArray[int64](deltas), pgArray[string](reasons)).
		Rows()
	if err != nil {
		return Applied{}, fmt.Errorf("insert ledger rows and update balances: %w", translate(err))
	}
	defer rows.Close()
	seen := make(map[string]bool, len(sorted))
	for rows.Next() {
		var id string
		var inserted, differs bool
		if err := rows.Scan(&id, &inserted, &differs); err != nil {
			return Applied{}, fmt.Errorf("read inserted ledger rows: %w", translate(err))
		}
		seen[id] = true
		switch {
		case inserted:
			applied.Inserted[id] = true
		case differs:
			applied.Conflicting[id] = true
		}
	}
	// An error the database raises while the statement runs (an unknown user: 23503) can arrive with
	// the rows rather than before them.
	if err := rows.Err(); err != nil {
		return Applied{}, fmt.Errorf("insert ledger rows and update balances: %w", translate(err))
	}
	rows.Close() // the connection is the transaction's: the next statement needs it
	var unseen []Credit
	for _, c := range sorted {
		if !seen[c.BizID] {
			unseen = append(unseen, c)
		}
	}
	if len(unseen) > 0 {
		conflicting, err := committedMeanwhileAndUnlike(tx, unseen)
		if err != nil {
			return Applied{}, err
		}
		for _, id := range conflicting {
			applied.Conflicting[id] = true
		}
	}
	return applied, nil
}

// committedMeanwhileAndUnlike returns the biz_ids of credits whose ledger row, committed by another
// transaction while insertCredits waited on it, has another user or delta.
func committedMeanwhileAndUnlike(tx *gorm.DB, credits []Credit) ([]string, error) {
	bizIDs, users, deltas := make([]string, len(credits)), make([]int64, len(credits)), make([]int64, len(credits))
	for i, c := range credits {
		bizIDs[i], users[i], deltas[i] = c.BizID, c.UserID, c.Delta
	}
	var ids []string
	err := tx.Raw(`SELECT l.biz_id FROM unnest(?::text[], ?::bigint[], ?::bigint[]) AS c(biz_id, user_id, delta)
		JOIN points_ledger l ON l.biz_id = c.biz_id WHERE (l.user_id, l.delta) <> (c.user_id, c.delta)`,
		pgArray[string](bizIDs), pgArray[int64](users), pgArray[int64](deltas)).Scan(&ids).Error
	if err != nil {
		return nil, fmt.Errorf("compare credits committed meanwhile: %w", translate(err))
	}
	return ids, nil
}

// pgArray passes a slice to pgx as one array parameter. GORM would expand a bare slice in Raw into a
// list of parameters (for IN (?)); a driver.Valuer is passed as it is, and pgx encodes the slice.
type pgArray[T any] []T

// Value implements driver.Valuer.
func (a pgArray[T]) Value() (driver.Value, error) { return []T(a), nil }

// Reversal takes back the credit of an order whose payment was refunded in full (order.refunded).
type Reversal struct {
	OrderID int64
	UserID  int64
	Points  int64 // the order's credit: the most the reversal takes back
}

// Reverse applies r in ONE transaction and reports whether it did so now (false: the order was already
// reversed, a duplicate) and the delta it wrote (<= 0). The rules, in the order they run:
//
//  1. The credit first, from the reversal's own data: biz_id order-paid:<id>, +Points, ON CONFLICT DO
//     NOTHING. Usually it exists and this is a no-op; if the reversal overtook its order.paid (requeue,
//     redelivery), the credit is applied here, and the order.paid that comes later is a duplicate.
//     Without it the reversal would find nothing to take back, and the late credit would stay forever.
//     Then the credit is compared (insertCredits: in its statement, or in a second one if another
//     transaction committed the row meanwhile): a reversal whose user or points are not its credit's is
//     ErrRejected (dead-lettered), since it would take points from another user or more than the order
//     earned.
//  2. Lock the user's account row (SELECT ... FOR UPDATE) and read the committed balance: a concurrent
//     reversal or redeem of this user waits here, so the amount below is computed on the balance it
//     will actually change.
//  3. Insert the reversal, biz_id order-refunded:<id>, with delta -min(Points, balance), ON CONFLICT
//     DO NOTHING: the unique biz_id makes it exactly once per order. Points the user already spent on
//     rewards are not clawed back below zero (points_accounts has CHECK balance >= 0); the row records
//     what was actually taken back, possibly less than Points, possibly 0.
//  4. Take that amount off the balance, so that balance == sum of the ledger deltas still holds. It is
//     an upsert, run even when the amount is 0: the reversal row, like every ledger row, is written
//     with its user's account row, whose foreign key refuses a user who does not exist (the ledger
//     has no key of its own, migrations/00009). Without it, a reversal naming an unknown user for an
//     order credited to someone else would write a row for nobody and take the order's reversal key.
func (l *Ledger) Reverse(ctx context.Context, r Reversal) (applied bool, delta int64, err error) {
	ctx = postgres.RejectionsHandled(ctx) // a refused reversal is poison, dead-lettered with a WARN
	if r.OrderID <= 0 || r.UserID <= 0 || r.Points < 0 {
		return false, 0, fmt.Errorf("%w: reversal of order %d for user %d, points %d", ErrRejected, r.OrderID, r.UserID, r.Points)
	}
	err = l.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		credit := Credit{BizID: BizIDOrderPaid(r.OrderID), UserID: r.UserID, Delta: r.Points, Reason: ReasonOrderPaid}
		// The reversal must be of the credit it reverses: the same user, the same points. The shop writes
		// both events from one order row, so a difference is a broken or forged message, and acting on it
		// would take points from a user the order never credited, or more than the order earned.
		credited, err := insertCredits(tx, []Credit{credit})
		if err != nil {
			return err
		}
		if credited.Conflicting[credit.BizID] {
			return fmt.Errorf("%w: reversal of order %d for user %d, %d points, but the order's credit has another user or amount",
				ErrRejected, r.OrderID, r.UserID, r.Points)
		}
		var balance int64
		err = tx.Raw(`SELECT balance FROM points_accounts WHERE user_id = ? FOR UPDATE`, r.UserID).Row().Scan(&balance)
		if err != nil && !errors.Is(err, sql.ErrNoRows) { // no account (it was deleted): nothing to take back
			return fmt.Errorf("lock account: %w", translate(err))
		}
		taken := min(r.Points, balance)
		var ids []int64
		err = tx.Raw(`INSERT INTO points_ledger (biz_id, user_id, delta, reason) VALUES (?, ?, ?, ?)
			ON CONFLICT (biz_id) DO NOTHING RETURNING id`,
			BizIDOrderRefunded(r.OrderID), r.UserID, -taken, ReasonOrderRefunded).Scan(&ids).Error
		if err != nil {
			return fmt.Errorf("insert reversal: %w", translate(err))
		}
		if len(ids) == 0 {
			return nil // already reversed: the balance was changed then, not now
		}
		applied, delta = true, -taken
		// A missing account gets balance 0 (taken is 0 then); an existing one (we hold its lock) loses
		// taken, never below 0.
		err = tx.Exec(`INSERT INTO points_accounts (user_id, balance) VALUES (?, 0)
			ON CONFLICT (user_id) DO UPDATE SET balance = points_accounts.balance - ?, updated_at = now()`,
			r.UserID, taken).Error
		if err != nil {
			return fmt.Errorf("debit balance: %w", translate(err))
		}
		return nil
	})
	if err != nil {
		return false, 0, err
	}
	return applied, delta, nil
}

// Balance returns userID's balance (0 without an account) and the newest limit ledger entries (newest
// first: by id, the order the rows were written in), read in ONE statement, so from one snapshot: the
// entries are exactly the ones the balance adds up. Read in two statements, a credit that commits
// between them is in the entries and not yet in the balance.
func (l *Ledger) Balance(ctx context.Context, userID int64, limit int) (int64, []Entry, error) {
	// One row per entry, each carrying the balance; one row with no entry (NULLs) when there is none.
	var rows []struct {
		Balance   int64
		BizID     *string
		Delta     *int64
		Reason    *string
		CreatedAt *time.Time
	}
	err := l.db.WithContext(ctx).Raw(`SELECT a.balance, e.biz_id, e.delta, e.reason, e.created_at
		FROM (SELECT COALESCE((SELECT balance FROM points_accounts WHERE user_id = @user), 0) AS balance) a
		LEFT JOIN LATERAL (SELECT id, biz_id, delta, reason, created_at FROM points_ledger
			WHERE user_id = @user ORDER BY id DESC LIMIT @limit) e ON true
		ORDER BY e.id DESC`, map[string]any{"user": userID, "limit": limit}).Scan(&rows).Error
	if err != nil {
		return 0, nil, fmt.Errorf("read balance and ledger: %w", err)
	}
	entries := []Entry{}
	var balance int64
	for _, r := range rows {
		balance = r.Balance
		if r.BizID != nil {
			entries = append(entries, Entry{BizID: *r.BizID, Delta: *r.Delta, Reason: *r.Reason, CreatedAt: *r.CreatedAt})
		}
	}
	return balance, entries, nil
}

// translate keeps pgconn types inside the repository: integrity violations (SQLSTATE class 23, e.g.
// 23503 for an unknown user) and data exceptions (class 22) are the data's fault and become
// ErrRejected; anything else (connection lost, timeout, deadlock) is transient.
func translate(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "23") || strings.HasPrefix(pgErr.Code, "22")) {
		return fmt.Errorf("%w: %s: %w", ErrRejected, pgErr.Code, err)
	}
	return err
}
