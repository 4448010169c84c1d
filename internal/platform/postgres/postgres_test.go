package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/postgres"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
	"idemshop/migrations"
)

// scratchDatabaseURL is the URL of a database named for the test process and tag, which the test may
// create (it does not exist yet) and which is dropped at the test's end.
func scratchDatabaseURL(t *testing.T, tag string) string {
	t.Helper()
	svc := testenv.Find(t)
	name := fmt.Sprintf("idemshop_test_%d_%s", os.Getpid(), tag)
	url := strings.Replace(svc.PostgresURL, "/postgres?", "/"+name+"?", 1)
	require.NotEqual(t, svc.PostgresURL, url)
	t.Cleanup(func() {
		ctx := context.Background()
		if conn, err := pgx.Connect(ctx, svc.PostgresURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			conn.Close(ctx)
		}
	})
	return url
}

// EnsureAndMigrate creates a missing database, migrates it with the seed, and is a no-op when repeated.
func TestEnsureAndMigrateCreatesMissingDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := scratchDatabaseURL(t, "ensure")

	for range 2 {
		require.NoError(t, postgres.EnsureAndMigrate(ctx, url, 0, slog.New(slog.DiscardHandler)))
	}
	db, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer postgres.Close(db)
	var users []string
	require.NoError(t, db.Raw(`SELECT name FROM users ORDER BY name`).Scan(&users).Error)
	assert.Equal(t, []string{"alice", "bob", "carol"}, users)
	var stock map[string]any = map[string]any{}
	require.NoError(t, db.Raw(`SELECT stock FROM products WHERE id = 1`).Scan(&stock).Error)
	assert.EqualValues(t, 100, stock["stock"])
}

// A migration that waits for a table another transaction holds gives up after MIGRATE_LOCK_TIMEOUT,
// rolled back, and says what to do, instead of queueing the shop's writes to that table behind it for
// as long as the transaction lasts; run again once the table is free, it applies. Whatever the last
// migration touches: the holder locks every table but goose's own in ROW EXCLUSIVE mode, which both an
// ALTER and a CREATE INDEX must wait for. Guards the migrate-lock-timeout mutant (internal/mutants).
func TestAMigrationBehindALongTransactionGivesUpAtItsLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := scratchDatabaseURL(t, "migratelock")
	require.NoError(t, postgres.EnsureDatabase(ctx, url))
	db, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { postgres.Close(db) })
	sqlDB, err := db.DB()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS)
	require.NoError(t, err)
	sources := p.ListSources()
	last := sources[len(sources)-1].Version
	_, err = p.UpTo(ctx, sources[len(sources)-2].Version)
	require.NoError(t, err)

	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(ctx) })
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	var tables string
	require.NoError(t, tx.QueryRow(ctx, `SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables
		WHERE schemaname = 'public' AND tablename <> 'goose_db_version'`).Scan(&tables))
	_, err = tx.Exec(ctx, "LOCK TABLE "+tables+" IN ROW EXCLUSIVE MODE")
	require.NoError(t, err)

	// The test's own bound: without the lock timeout the migration would wait for the holder for good.
	bounded, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	start := time.Now()
	err = postgres.MigrateExisting(bounded, url, 300*time.Millisecond, slog.New(slog.DiscardHandler))
	require.Error(t, err)
	assert.NoError(t, bounded.Err(), "ended by the lock timeout, not by the test's bound")
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Contains(t, err.Error(), "waited MIGRATE_LOCK_TIMEOUT (300ms) for a table another transaction holds")
	version, err := p.GetDBVersion(ctx)
	require.NoError(t, err)
	assert.Equal(t, sources[len(sources)-2].Version, version, "rolled back")

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, postgres.MigrateExisting(ctx, url, 300*time.Millisecond, slog.New(slog.DiscardHandler)))
	version, err = p.GetDBVersion(ctx)
	require.NoError(t, err)
	assert.Equal(t, last, version)
}

// Callers that race to create one missing database all succeed: the losers' CREATE DATABASE fails with
// 42P04 or, when the two catalog inserts meet, 23505 on pg_database's name index; either way the
// database is there. (Two `orders migrate` started together on a fresh machine.)
func TestEnsureDatabaseRacingCallersAllSucceed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for round := range 5 {
		url := scratchDatabaseURL(t, fmt.Sprintf("race_%d", round))
		const callers = 6
		start := make(chan struct{})
		errs := make(chan error, callers)
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- postgres.EnsureDatabase(ctx, url)
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d", round)
		}
	}
}

func TestTranslateError(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()

	err := env.DB.Exec(`INSERT INTO users (name, token_hash) VALUES ('alice', 'x')`).Error
	assert.ErrorIs(t, postgres.TranslateError(err), postgres.ErrDuplicate)

	// A lock wait past lock_timeout is ErrLockTimeout.
	impatient := testenv.OpenDB(t, env.DatabaseURL, 100*time.Millisecond)
	tx := env.DB.Begin()
	require.NoError(t, tx.Exec(`SELECT 1 FROM products WHERE id = 1 FOR UPDATE`).Error)
	defer tx.Rollback()
	err = impatient.WithContext(ctx).Exec(`UPDATE products SET stock = stock WHERE id = 1`).Error
	assert.ErrorIs(t, postgres.TranslateError(err), postgres.ErrLockTimeout)

	plain := fmt.Errorf("not a driver error")
	assert.Equal(t, plain, postgres.TranslateError(plain))
}

// Handled conditions are not ERROR lines: a lock timeout (its caller answers 503 or 409) is a WARN, an
// expected unique violation a DEBUG; a real failure (a syntax error) stays an ERROR.
func TestHandledFailuresAreNotLoggedAsErrors(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	out := &testenv.Output{}
	db, err := postgres.Open(ctx, env.DatabaseURL, postgres.Options{LockTimeout: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	defer postgres.Close(db)

	tx := env.DB.Begin()
	require.NoError(t, tx.Exec(`SELECT 1 FROM products WHERE id = 1 FOR UPDATE`).Error)
	err = db.Exec(`UPDATE products SET stock = stock WHERE id = 1`).Error
	require.ErrorIs(t, postgres.TranslateError(err), postgres.ErrLockTimeout)
	require.NoError(t, tx.Rollback().Error)
	err = db.Exec(`INSERT INTO users (name, token_hash) VALUES ('alice', 'x')`).Error
	require.ErrorIs(t, postgres.TranslateError(err), postgres.ErrDuplicate)
	lines := out.String()
	assert.NotContains(t, lines, "level=ERROR", lines)
	assert.Contains(t, lines, "level=WARN")
	assert.Contains(t, lines, "level=DEBUG")

	require.Error(t, db.Exec(`SELEC 1`).Error)
	assert.Contains(t, out.String(), "level=ERROR", "an unhandled failure is still an ERROR")
}

// A refusal of the data (an unknown user's foreign key: SQLSTATE 23503) is an ERROR unless the caller
// marked its context as handling it (postgres.RejectionsHandled: the points consumer dead-letters it).
func TestRejectionsHandledByTheCallerAreNotErrors(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	db, out := testenv.OpenLoggedDB(t, env.DatabaseURL)

	const unknownUser = `INSERT INTO points_accounts (user_id, balance) VALUES (987654321, 1)`
	require.Error(t, db.WithContext(postgres.RejectionsHandled(ctx)).Exec(unknownUser).Error)
	assert.NotContains(t, out.String(), "level=ERROR", out.String())
	assert.Contains(t, out.String(), "level=DEBUG", "still logged, as handled")

	require.Error(t, db.WithContext(ctx).Exec(unknownUser).Error)
	assert.Contains(t, out.String(), "level=ERROR", "unmarked, the same refusal is an ERROR")

	before := strings.Count(out.String(), "level=ERROR")
	require.Error(t, db.WithContext(postgres.RejectionsHandled(ctx)).Exec(`SELEC 1`).Error)
	assert.Equal(t, before+1, strings.Count(out.String(), "level=ERROR"), "the mark covers refusals of the data only")
}

// Parameters carry tokens' hashes, idempotency keys and bodies: a failed statement is logged with its
// SQL text and never its values, whether it ran through Exec or through Raw(...).Scan (which records
// the statement with a logger of GORM's own).
func TestFailedStatementsAreLoggedWithoutTheirParameters(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	db, out := testenv.OpenLoggedDB(t, env.DatabaseURL)

	require.Error(t, db.Exec(`SELECT count(*) FROM no_such_table WHERE x = ?`, "secret-exec").Error)
	var n int
	require.Error(t, db.Raw(`SELECT count(*) FROM no_such_table WHERE x = ?`, "secret-scan").Scan(&n).Error)
	lines := out.String()
	assert.Contains(t, lines, "no_such_table", "the SQL text is logged")
	assert.NotContains(t, lines, "secret-exec")
	assert.NotContains(t, lines, "secret-scan")
}

// A server that accepts the connection and never answers (paused, or a black hole in between) fails
// Open and EnsureDatabase once the connect timeout has passed (the URL's here, so that the test is
// short), instead of holding them forever: the context has no deadline, as a one-shot command's has
// none.
func TestOpenGivesUpOnAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	url := "postgres://postgres@" + testenv.SilentListener(t) + "/shop?connect_timeout=1&sslmode=disable"
	done := make(chan error, 2)
	go func() { _, err := postgres.Open(context.Background(), url, postgres.Options{}); done <- err }()
	go func() { done <- postgres.EnsureDatabase(context.Background(), url) }()
	for range 2 {
		select {
		case err := <-done:
			require.Error(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("a connection to a server that never answers was not given up")
		}
	}
}

// A pooled connection that went half-open (a stalled proxy, a partition) held every caller without a
// deadline of its own for good: statement_timeout is the server's, and the server never received the
// statement. The outbox relay stopped publishing with nothing in the log (a helper's finding,
// 2026-12-06). Now a statement gets no longer than StatementTimeout + AnswerMargin for its answer,
// and the next one runs on a new connection.
func TestAStatementOnAHalfOpenConnectionGivesUp(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	proxy, url := tcpproxy.ForURL(t, env.DatabaseURL)
	db, err := postgres.Open(t.Context(), url, postgres.Options{StatementTimeout: 300 * time.Millisecond, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(db) })
	require.NoError(t, db.Exec("SELECT 1").Error, "the pool's one connection, through the proxy")
	proxy.Stall()

	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- db.Exec("SELECT 1").Error }() // context.Background: no deadline of its own
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Less(t, time.Since(start), 300*time.Millisecond+postgres.AnswerMargin+2*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("a statement on a half-open connection waited for good")
	}
	require.NoError(t, db.Exec("SELECT 1").Error, "the next statement, on a new connection")
}

// A transaction whose client went half-open kept its locks until the server's TCP keepalive gave up
// (2 h 11 min by default), or for ever behind a proxy that keeps the socket open: a create key and a
// user's points account stayed locked (a helper's finding, 2026-12-06). With
// IdleInTransactionTimeout the server ends such a session, and another one takes the lock.
func TestALockOfAClientThatWentHalfOpenIsReleased(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	proxy, url := tcpproxy.ForURL(t, env.DatabaseURL)
	db, err := postgres.Open(t.Context(), url, postgres.Options{StatementTimeout: 10 * time.Second,
		IdleInTransactionTimeout: 300 * time.Millisecond, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(db) })
	conn, err := db.DB()
	require.NoError(t, err)
	tx, err := conn.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = tx.Exec("SELECT pg_advisory_xact_lock(42)")
	require.NoError(t, err)
	proxy.Stall() // the client is gone for the server: it sees a session idle in its transaction

	other, err := pgx.Connect(t.Context(), env.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	// Long enough for the server to end the idle session, short of any keepalive.
	_, err = other.Exec(t.Context(), "SET lock_timeout = '5s'")
	require.NoError(t, err)
	_, err = other.Exec(t.Context(), "SELECT pg_advisory_lock(42)")
	require.NoError(t, err, "the lock of the half-open client's transaction was released")
	_, _ = other.Exec(t.Context(), "SELECT pg_advisory_unlock(42)")
}

// Every connection says which process it is (application_name, "<binary> (pid N)"), unless
// DATABASE_URL names one: pool connections had an empty name, and pg_stat_activity could not tell
// orders' from points-consumer's (a helper's finding, 2026-12-07). Guards the pg-application-name
// mutant (internal/mutants).
func TestEveryConnectionNamesItsProcess(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var name string
	require.NoError(t, env.DB.Raw(`SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&name).Error)
	assert.Equal(t, postgres.ApplicationName, name)
	assert.Contains(t, name, fmt.Sprintf("(pid %d)", os.Getpid()))

	sep := "?"
	if strings.Contains(env.DatabaseURL, "?") {
		sep = "&"
	}
	db, err := postgres.Open(context.Background(), env.DatabaseURL+sep+"application_name=chosen", postgres.Options{MaxConns: 1})
	require.NoError(t, err)
	defer postgres.Close(db)
	require.NoError(t, db.Raw(`SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&name).Error)
	assert.Equal(t, "chosen", name, "the URL's own name is kept")
}
