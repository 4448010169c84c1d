package postgres_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/problem"
	"idemshop/internal/testenv"
)

// The one classification of transient database errors: each becomes 503 unavailable with Retry-After;
// a data error stays what it is.
func TestTranslateErrorTransient(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"55P03", "57014", "40001", "40P01", "53300", "57P01", "57P02", "57P03", "08006", "08001"} {
		err := postgres.TranslateError(fmt.Errorf("insert order: %w", &pgconn.PgError{Code: code}))
		pe := httpproblem.Resolve(err)
		assert.Equal(t, problem.KindUnavailable, pe.Kind, code)
		assert.Positive(t, pe.RetryAfter, code)
		assert.ErrorIs(t, err, postgres.ErrTransient, code)
	}
	// The server closed the connection where an answer should have come (TestCallbackWhoseCommitAnswer-
	// IsLostConvergesOnResend meets it for real).
	for _, eof := range []error{io.ErrUnexpectedEOF, io.EOF} {
		err := postgres.TranslateError(fmt.Errorf("audit savepoint: %w", eof))
		assert.ErrorIs(t, err, postgres.ErrTransient, eof.Error())
		assert.Equal(t, problem.KindUnavailable, httpproblem.Resolve(err).Kind, eof.Error())
	}
	assert.ErrorIs(t, postgres.TranslateError(&pgconn.PgError{Code: "55P03"}), postgres.ErrLockTimeout)
	assert.ErrorIs(t, postgres.TranslateError(&pgconn.PgError{Code: "23505"}), postgres.ErrDuplicate)
	for _, code := range []string{"23503", "22021", "42601"} {
		err := postgres.TranslateError(&pgconn.PgError{Code: code})
		assert.False(t, errors.Is(err, postgres.ErrTransient), code)
		assert.Equal(t, problem.KindInternal, httpproblem.Resolve(err).Kind, code)
	}
	assert.Equal(t, problem.KindInternal, httpproblem.Resolve(postgres.TranslateError(errors.New("a bug"))).Kind)
}

// A statement a connection prepared before a migration added a column to its table fails once with
// "cached plan must not change result type" (SQLSTATE 0A000): that is transient, 503 with Retry-After,
// because pgx forgets the statement and the same query succeeds when retried. Any other 0A000 stays a
// 500. Guards the cached-plan-transient mutant (internal/mutants).
func TestAStatementPreparedBeforeAColumnWasAddedIsTransient(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	read := func() error {
		var n int
		rows, err := conn.Query(ctx, `SELECT * FROM products WHERE id = $1`, 1)
		if err != nil {
			return err
		}
		for rows.Next() {
			n++
		}
		rows.Close()
		if rows.Err() == nil && n != 1 {
			return fmt.Errorf("read %d rows, want 1", n)
		}
		return rows.Err()
	}
	require.NoError(t, read()) // prepared and cached on this connection
	require.NoError(t, env.DB.Exec(`ALTER TABLE products ADD COLUMN added_by_a_migration text`).Error)

	err = postgres.TranslateError(read())
	require.Error(t, err, "the cached plan no longer fits the table")
	assert.ErrorIs(t, err, postgres.ErrTransient)
	pe := httpproblem.Resolve(err)
	assert.Equal(t, problem.KindUnavailable, pe.Kind)
	assert.Positive(t, pe.RetryAfter)
	require.NoError(t, read(), "retried, it succeeds")

	other := postgres.TranslateError(&pgconn.PgError{Code: "0A000", Message: "some feature is not supported"})
	assert.False(t, errors.Is(other, postgres.ErrTransient))
	assert.Equal(t, problem.KindInternal, httpproblem.Resolve(other).Kind)
}

// A connection the server refused with a FATAL (the database does not exist: the window of a recreate
// or a restore) is 503, not 500: the error carries the FATAL's SQLSTATE, 3D000, which is not a
// statement's (a helper's finding, 2026-12-06).
func TestARefusedConnectionIsTransient(t *testing.T) {
	t.Parallel()
	svc := testenv.Find(t)
	u, err := url.Parse(svc.PostgresURL)
	require.NoError(t, err)
	u.Path = "/idemshop_no_such_database"
	_, err = pgx.Connect(context.Background(), u.String())
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the server's FATAL")
	require.Equal(t, "3D000", pgErr.Code)
	translated := postgres.TranslateError(fmt.Errorf("list products: %w", err))
	assert.ErrorIs(t, translated, postgres.ErrTransient)
	assert.Equal(t, problem.KindUnavailable, httpproblem.Resolve(translated).Kind)
}

// A statement whose answer never came may have run; one the server refused, or that never left, did
// not. Pure classification; TestAPayWhoseClaimAnswerIsLostSaysItsLease (ordersapp) meets the lost
// answer for real.
func TestMayHaveRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the connection broke where the answer should have come", fmt.Errorf("claim: %w", io.ErrUnexpectedEOF), true},
		{"the server closed it", fmt.Errorf("claim: %w", io.EOF), true},
		{"a reset", fmt.Errorf("claim: %w", &net.OpError{Op: "read", Err: syscall.ECONNRESET}), true},
		{"the wait for the answer ran out", fmt.Errorf("claim: %w", context.DeadlineExceeded), true},
		{"the caller gave up", fmt.Errorf("claim: %w", context.Canceled), true},
		{"the server refused the statement", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "23505"}), false},
		{"the server cancelled it", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "57014"}), false},
		{"database/sql's bad connection, which pgx also says of a lost answer", fmt.Errorf("claim: %w", driver.ErrBadConn), true},
		{"no connection could be opened", fmt.Errorf("claim: %w", &pgconn.ConnectError{}), false},
		{"not a database failure", errors.New("scan: a bug"), false},
		{"no error", nil, false},
	} {
		assert.Equal(t, tc.want, postgres.MayHaveRun(tc.err), tc.name)
	}
}
