package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"idemshop/internal/platform/pgtx"
	"idemshop/internal/platform/postgres"
)

// keyTx is the Guard's transaction: one pooled connection (internal/platform/pgtx), on which the
// guard sends its own statements in pgx batches and the work runs its statements through GORM.
//
// Why not db.Transaction: database/sql sends BEGIN and COMMIT as round trips of their own, so the
// guard's two statements (the key read, the key row) would cost two round trips more than the route
// without the key layer: 7 instead of 5 for a create order, where a round trip is most of a statement's
// cost. A batch sends several statements in one round trip (pipelining), so the guard sends BEGIN with
// its key read, and its key row with COMMIT: two statements more, no round trip more
// (docs/performance.md).
type keyTx struct {
	*pgtx.Tx
	// work is the handle the work gets: GORM on the same connection, inside the open transaction.
	work *gorm.DB
}

// withKeyTx runs f on a keyTx over one connection of db's pool. Whatever f leaves open (a key that was
// found, a work that failed, a key row that could not be inserted) is rolled back before the
// connection goes back to the pool.
func withKeyTx(ctx context.Context, db *gorm.DB, f func(t *keyTx) error) error {
	return pgtx.Run(ctx, db, func(t *pgtx.Tx) error {
		return f(&keyTx{Tx: t, work: t.Work})
	})
}

// beginAndRead begins the transaction, takes the key's lock and reads the committed record of s, in one
// round trip. It returns nil when s is a new key. The record holds the four columns Respond needs
// (fingerprint, state, response status and body), nothing else.
//
// The lock (a transaction-scoped advisory lock on a 64-bit hash of the user and the key) is what makes
// a duplicate wait for a first request that is still in its work: until the key row is inserted, at
// the end, nothing else shows that the key is in use, and a duplicate would run its own work and
// could answer with a refusal the first's work did not meet (sold out since). Held until COMMIT or
// ROLLBACK; a wait past DB_LOCK_TIMEOUT is a lock timeout. The read is a statement of its own after
// it, so its snapshot is taken once the lock is held and sees what the first request committed.
func (t *keyTx) beginAndRead(ctx context.Context, s Scope, retryAfter time.Duration) (*Record, error) {
	var rec Record
	err := t.Batch(ctx, func(b *pgx.Batch) {
		b.Queue("BEGIN")
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($2, $1))`, s.UserID, s.Key)
		b.Queue(`SELECT fingerprint, state, response_status, response_body FROM idempotency_keys
			WHERE user_id = $1 AND idempotency_key = $2`, s.UserID, s.Key)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.QueryRow().Scan(&rec.Fingerprint, &rec.State, &rec.ResponseStatus, &rec.ResponseBody)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case errors.Is(postgres.TranslateError(err), postgres.ErrLockTimeout):
		return nil, ErrKeyInUse.WithRetryAfter(retryAfter).Wrap(err)
	case err != nil:
		return nil, fmt.Errorf("find idempotency record: %w", err)
	}
	return &rec, nil
}

// insertAndCommit sends insert (the key row) and COMMIT in one round trip. The INSERT must fail, not
// skip, when the key is taken (no ON CONFLICT DO NOTHING): its error aborts the transaction, so
// PostgreSQL skips the COMMIT queued behind it and the work does not commit without its key row.
// It returns the INSERT's error, or the COMMIT's.
func (t *keyTx) insertAndCommit(ctx context.Context, insert string, args ...any) error {
	return t.Batch(ctx, func(b *pgx.Batch) {
		b.Queue(insert, args...)
		b.Queue("COMMIT")
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	})
}
