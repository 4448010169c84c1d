package idempotency

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// keyTx is the Guard's transaction: one pooled connection, on which the guard sends its own statements
// in pgx batches and the work runs its statements through GORM.
//
// Why not db.Transaction: database/sql sends BEGIN and COMMIT as round trips of their own, so the
// guard's two statements (the key read, the key row) would cost two round trips more than the route
// without the key layer: 7 instead of 5 for a create order, where a round trip is most of a statement's
// cost. A batch sends several statements in one round trip (pipelining), so the guard sends BEGIN with
// its key read, and its key row with COMMIT: two statements more, no round trip more
// (docs/performance.md).
type keyTx struct {
	conn *sql.Conn
	// work is the handle the work gets: GORM on conn, inside the open transaction.
	work *gorm.DB
}

// withKeyTx runs f on a keyTx over one connection of db's pool. Whatever f leaves open (a key that was
// found, a work that failed, a key row that could not be inserted) is rolled back before the
// connection goes back to the pool.
func withKeyTx(ctx context.Context, db *gorm.DB, f func(t *keyTx) error) error {
	return db.WithContext(ctx).Connection(func(c *gorm.DB) error {
		conn, ok := c.Statement.ConnPool.(*sql.Conn)
		if !ok {
			return fmt.Errorf("idempotency: want a *sql.Conn from gorm's Connection, got %T", c.Statement.ConnPool)
		}
		t := &keyTx{conn: conn, work: c.Session(&gorm.Session{NewDB: true})}
		t.work.Statement.ConnPool = workConn{conn}
		defer t.rollbackIfOpen(ctx)
		return f(t)
	})
}

// beginAndRead begins the transaction and reads the committed record of s, in one round trip. It
// returns nil when s is a new key. The record holds the four columns Respond needs (fingerprint,
// state, response status and body), nothing else.
func (t *keyTx) beginAndRead(ctx context.Context, s Scope) (*Record, error) {
	var rec Record
	found := false
	err := t.batch(ctx, func(b *pgx.Batch) {
		b.Queue("BEGIN")
		b.Queue(`SELECT fingerprint, state, response_status, response_body FROM idempotency_keys
			WHERE user_id = $1 AND idempotency_key = $2`, s.UserID, s.Key)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		err := br.QueryRow().Scan(&rec.Fingerprint, &rec.State, &rec.ResponseStatus, &rec.ResponseBody)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("find idempotency record: %w", err)
		}
		found = true
		return nil
	})
	if err != nil || !found {
		return nil, err
	}
	return &rec, nil
}

// insertAndCommit sends insert (the key row) and COMMIT in one round trip. The INSERT must fail, not
// skip, when the key is taken (no ON CONFLICT DO NOTHING): its error aborts the transaction, so
// PostgreSQL skips the COMMIT queued behind it and the work does not commit without its key row.
// It returns the INSERT's error, or the COMMIT's.
func (t *keyTx) insertAndCommit(ctx context.Context, insert string, args ...any) error {
	return t.batch(ctx, func(b *pgx.Batch) {
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

// rollbackIfOpen ends a transaction that did not commit. It costs no round trip when there is none
// (after COMMIT). A ROLLBACK that fails leaves the connection in a transaction, and pgx's driver then
// discards it instead of handing it to the next caller (stdlib.Conn.ResetSession).
func (t *keyTx) rollbackIfOpen(ctx context.Context) {
	_ = t.pgx(func(c *pgx.Conn) error {
		if c.PgConn().TxStatus() == 'I' { // idle: not in a transaction
			return nil
		}
		_, err := c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	})
}

// batch queues statements with queue, sends them in one round trip and reads their results with read.
func (t *keyTx) batch(ctx context.Context, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	return t.pgx(func(c *pgx.Conn) error {
		b := &pgx.Batch{}
		queue(b)
		br := c.SendBatch(ctx, b)
		err := read(br)
		if cerr := br.Close(); err == nil {
			err = cerr // the first error is read's: Close repeats it
		}
		return err
	})
}

// pgx runs f with the pgx connection under t.conn (database/sql gives it only for the length of f).
func (t *keyTx) pgx(f func(*pgx.Conn) error) error {
	return t.conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("idempotency: the guard needs the pgx driver, the pool uses %T", driverConn)
		}
		return f(c.Conn())
	})
}

// workConn is t.conn as the work's GORM handle sees it: a connection inside a transaction
// (gorm.TxCommitter), so that a work which calls tx.Transaction gets a SAVEPOINT, never a BEGIN or a
// COMMIT of its own. Only the guard ends the transaction.
type workConn struct{ *sql.Conn }

var errGuardEndsTx = errors.New("idempotency: the guard commits or rolls back its transaction, not the work")

// Commit refuses: the guard commits, with the key row.
func (workConn) Commit() error { return errGuardEndsTx }

// Rollback refuses: a work rolls back by returning an error.
func (workConn) Rollback() error { return errGuardEndsTx }
