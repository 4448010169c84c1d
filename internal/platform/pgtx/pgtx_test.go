package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/pgtx"
	"idemshop/internal/testenv"
)

// Begin opens the transaction with its first read: the row comes back, the transaction is open, and
// what the work writes in it commits with the caller's COMMIT.
func TestBeginReadsInTheOpenedTransaction(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	require.NoError(t, env.DB.Exec(`CREATE TABLE pgtx_probe (id int PRIMARY KEY, v text NOT NULL)`).Error)
	require.NoError(t, env.DB.Exec(`INSERT INTO pgtx_probe VALUES (1, 'one')`).Error)

	err := pgtx.Run(ctx, env.DB, func(tx *pgtx.Tx) error {
		var v string
		if err := tx.Begin(ctx, `SELECT v FROM pgtx_probe WHERE id = $1`, []any{1}, &v); err != nil {
			return err
		}
		assert.Equal(t, "one", v)
		var inTx bool
		if err := tx.Work.Raw(`SELECT now() <> statement_timestamp()`).Row().Scan(&inTx); err != nil {
			return err
		}
		assert.True(t, inTx, "the read and the next statement share one transaction")
		if err := tx.Work.Exec(`INSERT INTO pgtx_probe VALUES (2, 'two')`).Error; err != nil {
			return err
		}
		return tx.Exec(ctx, "COMMIT")
	})
	require.NoError(t, err)
	var n int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM pgtx_probe`).Row().Scan(&n))
	assert.EqualValues(t, 2, n)
}

// No row is pgx.ErrNoRows, and the transaction Begin opened is rolled back when Run ends: nothing the
// work wrote before giving up stays.
func TestBeginWithoutARowRollsBackAtRunsEnd(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	require.NoError(t, env.DB.Exec(`CREATE TABLE pgtx_probe (id int PRIMARY KEY, v text NOT NULL)`).Error)

	err := pgtx.Run(ctx, env.DB, func(tx *pgtx.Tx) error {
		var v string
		err := tx.Begin(ctx, `SELECT v FROM pgtx_probe WHERE id = $1`, []any{1}, &v)
		require.ErrorIs(t, err, pgx.ErrNoRows)
		require.NoError(t, tx.Work.Exec(`INSERT INTO pgtx_probe VALUES (1, 'left behind?')`).Error)
		return err
	})
	require.ErrorIs(t, err, pgx.ErrNoRows)
	var n int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM pgtx_probe`).Row().Scan(&n))
	assert.Zero(t, n, "the open transaction was rolled back")
}

// A COMMIT's outcome is unknown only if the server did not answer and the request was written.
func TestCommitOutcome(t *testing.T) {
	if pgtx.CommitOutcome(nil) != nil {
		t.Fatal("nil is no failure")
	}
	refused := &pgconn.PgError{Code: "40001"}
	if err := pgtx.CommitOutcome(refused); errors.Is(err, pgtx.ErrCommitUnknown) {
		t.Errorf("the server answered %v: it skipped the COMMIT", err)
	}
	if err := pgtx.CommitOutcome(fmt.Errorf("batch: %w", io.ErrUnexpectedEOF)); !errors.Is(err, pgtx.ErrCommitUnknown) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a broken connection after the write: got %v", err)
	}
}
