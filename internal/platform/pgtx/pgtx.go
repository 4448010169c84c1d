// Package pgtx is a transaction on one pooled connection in which the caller sends its own statements
// in pgx batches and the business code runs its statements through GORM.
//
// Why: database/sql sends BEGIN, SAVEPOINT and COMMIT as round trips of their own, and on this
// project's paths a round trip is most of a statement's cost (docs/performance.md). A batch sends
// several statements in one round trip (pipelining), so a guard can send its statements with BEGIN or
// with COMMIT and cost no round trip more than the route without it. The rule that makes that safe:
// within one batch, a statement that fails aborts the transaction and PostgreSQL skips every statement
// queued behind it, COMMIT included, so a COMMIT queued after a guard statement only happens if that
// statement succeeded.
package pgtx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// ErrCommitUnknown marks a failure after a COMMIT was sent and before its answer came back (the
// connection broke, or the wait for the answer was cancelled): the transaction may have committed or
// not, and only the database's rows can say which.
var ErrCommitUnknown = errors.New("pgtx: COMMIT sent, its outcome unknown")

// CommitOutcome is for the error of a round trip that carried a COMMIT: it wraps err in
// ErrCommitUnknown unless the server answered (an error with a SQLSTATE: PostgreSQL then skipped the
// COMMIT). nil stays nil.
//
// pgconn.SafeToRetry ("nothing was written") is not asked: pgx 5.12 answers a COMMIT sent by the simple
// protocol (pgx's Tx.Commit, and so database/sql's and GORM's) whose answer the connection lost with
// "conn closed", which says SafeToRetry (its reader closes the connection on the failed read, then
// finds it closed). Taking that at its word called a committed change "not applied" (a helper's
// finding, 2026-12-07, under the reconciler).
func CommitOutcome(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
}

// Tx is one pooled connection with a transaction that the caller begins and ends with Batch (or Exec).
type Tx struct {
	conn *sql.Conn
	// Work is the handle the business code gets: GORM on the same connection, inside the open
	// transaction. A Work that calls tx.Transaction gets a SAVEPOINT; it can never BEGIN, COMMIT or
	// ROLLBACK the transaction itself (ErrCallerEndsTx).
	Work *gorm.DB
}

// Run runs f on a Tx over one connection of db's pool. Whatever f leaves open (a transaction it began
// and did not commit) is rolled back before the connection goes back to the pool.
func Run(ctx context.Context, db *gorm.DB, f func(t *Tx) error) error {
	return db.WithContext(ctx).Connection(func(c *gorm.DB) error {
		conn, ok := c.Statement.ConnPool.(*sql.Conn)
		if !ok {
			return fmt.Errorf("pgtx: want a *sql.Conn from gorm's Connection, got %T", c.Statement.ConnPool)
		}
		t := &Tx{conn: conn, Work: c.Session(&gorm.Session{NewDB: true})}
		t.Work.Statement.ConnPool = workConn{conn}
		defer t.rollbackIfOpen(ctx)
		return f(t)
	})
}

// Batch queues statements with queue, sends them in one round trip and reads their results with read.
// It returns read's error, else the batch's.
func (t *Tx) Batch(ctx context.Context, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
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

// Begin opens the transaction and runs its first query in the same round trip: BEGIN and query are
// sent in one batch, and the query's one row is scanned into dest. No row is pgx.ErrNoRows. Whatever
// it returns, a transaction may be open, and Run's end rolls back one that nobody committed.
func (t *Tx) Begin(ctx context.Context, query string, args []any, dest ...any) error {
	return t.Batch(ctx, func(b *pgx.Batch) {
		b.Queue("BEGIN")
		b.Queue(query, args...)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("pgtx: begin: %w", err)
		}
		return br.QueryRow().Scan(dest...)
	})
}

// Exec sends statements (without parameters: BEGIN, ROLLBACK TO SAVEPOINT, COMMIT) in one round trip,
// over the simple query protocol, and returns the first error. The simple protocol prepares nothing, so
// it also works on a transaction a failed batch left aborted, where pgx cannot yet prepare again
// statements the failure made it forget.
func (t *Tx) Exec(ctx context.Context, statements ...string) error {
	return t.pgx(func(c *pgx.Conn) error {
		_, err := c.PgConn().Exec(ctx, strings.Join(statements, "; ")).ReadAll()
		return err
	})
}

// rollbackIfOpen ends a transaction that did not commit. It costs no round trip when there is none
// (after COMMIT). A ROLLBACK that fails leaves the connection in a transaction, and pgx's driver then
// discards it instead of handing it to the next caller (stdlib.Conn.ResetSession).
func (t *Tx) rollbackIfOpen(ctx context.Context) {
	_ = t.pgx(func(c *pgx.Conn) error {
		if c.PgConn().TxStatus() == 'I' { // idle: not in a transaction
			return nil
		}
		_, err := c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	})
}

// pgx runs f with the pgx connection under t.conn (database/sql gives it only for the length of f).
func (t *Tx) pgx(f func(*pgx.Conn) error) error {
	return t.conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pgtx: batches need the pgx driver, the pool uses %T", driverConn)
		}
		return f(c.Conn())
	})
}

// workConn is t.conn as the Work handle sees it: a connection inside a transaction
// (gorm.TxCommitter), so that a work which calls tx.Transaction gets a SAVEPOINT, never a BEGIN or a
// COMMIT of its own. Only the caller of Run ends the transaction.
type workConn struct{ *sql.Conn }

// ErrCallerEndsTx is what a Work gets if it tries to commit or roll back the transaction itself.
var ErrCallerEndsTx = errors.New("pgtx: the caller of Run commits or rolls back its transaction, not the work")

// Commit refuses: the caller commits, with its own statements.
func (workConn) Commit() error { return ErrCallerEndsTx }

// Rollback refuses: a work rolls back by returning an error.
func (workConn) Rollback() error { return ErrCallerEndsTx }
