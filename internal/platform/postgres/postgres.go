// Package postgres opens GORM on the pgx driver, creates and migrates the database with goose, and
// translates driver errors at the repository edge so nothing above it sees pgconn types.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"idemshop/internal/platform/problem"
	"idemshop/migrations"
)

// Options tunes the pool. Zero values mean: no lock or statement timeout, pool of 10.
type Options struct {
	// LockTimeout is sent as the session's lock_timeout: every lock wait longer than this fails with
	// SQLSTATE 55P03, which TranslateError turns into ErrLockTimeout.
	LockTimeout time.Duration
	// StatementTimeout is sent as the session's statement_timeout, and bounds on the client's side
	// too how long a connection may go without the answer to what it sent (AnswerMargin more: see
	// answerDeadlineConn).
	StatementTimeout time.Duration
	// IdleInTransactionTimeout is sent as idle_in_transaction_session_timeout: PostgreSQL ends a
	// session that has sat inside a transaction this long without a statement, which rolls it back and
	// releases its locks. Without it, a client whose connection went half-open in a transaction (a
	// stalled proxy, a partition) left its row and advisory locks held until the server's TCP
	// keepalive gave up, 2 h 11 min by default, or for ever behind a proxy that keeps the socket open: a
	// create key and a user's points account stayed locked (a helper's finding, 2026-12-06). It must be
	// longer than any wait a transaction makes between two of its statements (the outbox relay's
	// confirms). 0: PostgreSQL's setting.
	IdleInTransactionTimeout time.Duration
	MaxConns                 int
	Logger                   *slog.Logger
}

// AnswerMargin is what a connection waits for an answer beyond StatementTimeout before it gives up on
// the server (answerDeadlineConn): the server's own timeout ends a statement it received, and reports
// it, well within it.
const AnswerMargin = 2 * time.Second

// DefaultConnectTimeout bounds each new connection (dial, TLS, start-up and authentication) when
// DATABASE_URL sets no connect_timeout (libpq's parameter, in seconds). Without a bound, a server
// that accepts the TCP connection and never answers (paused, or a black hole in between) holds the
// caller forever: a one-shot command would never exit.
const DefaultConnectTimeout = 10 * time.Second

// ApplicationName is what each connection says it is (PostgreSQL's application_name, in
// pg_stat_activity) when DATABASE_URL sets none: the binary and its pid, as the AMQP connections name
// themselves (rabbitmq.ConnectionName). Every pool connection had an empty one, so an operator could
// not tell orders' connections from points-consumer's or a one-shot command's (a helper's finding,
// 2026-12-07). PostgreSQL keeps its first 63 bytes.
var ApplicationName = fmt.Sprintf("%s (pid %d)", filepath.Base(os.Args[0]), os.Getpid())

// parseURL parses DATABASE_URL, with DefaultConnectTimeout where the URL sets none, and
// ApplicationName where it names none.
func parseURL(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if _, set := cfg.RuntimeParams["application_name"]; !set {
		cfg.RuntimeParams["application_name"] = ApplicationName
	}
	return cfg, nil
}

// Open connects GORM to url through pgx's database/sql driver and checks the connection.
func Open(ctx context.Context, url string, o Options) (*gorm.DB, error) {
	pcfg, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if o.LockTimeout > 0 {
		pcfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(o.LockTimeout.Milliseconds(), 10)
	}
	if o.StatementTimeout > 0 {
		pcfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(o.StatementTimeout.Milliseconds(), 10)
		pcfg.DialFunc = answerDeadline(pcfg.DialFunc, o.StatementTimeout+AnswerMargin)
	}
	if o.IdleInTransactionTimeout > 0 {
		pcfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(o.IdleInTransactionTimeout.Milliseconds(), 10)
	}
	sqlDB := stdlib.OpenDB(*pcfg)
	maxConns := o.MaxConns
	if maxConns <= 0 {
		maxConns = 10
	}
	sqlDB.SetMaxOpenConns(maxConns)
	sqlDB.SetMaxIdleConns(maxConns)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)

	lg := gormlogger.Discard
	if o.Logger != nil {
		lg = handledLogger{Interface: gormlogger.NewSlogLogger(o.Logger, gormlogger.Config{
			SlowThreshold: slowStatement, LogLevel: gormlogger.Warn, IgnoreRecordNotFoundError: true,
			// Parameters carry tokens and personal data; logs get the SQL text only. GORM asks the
			// outer logger (handledLogger.ParamsFilter) rather than this setting; it is kept for the
			// day that changes.
			ParameterizedQueries: true,
		}), logger: o.Logger, slow: slowStatement, level: gormlogger.Warn}
	}
	db, err := gorm.Open(gormpg.New(gormpg.Config{Conn: sqlDB}), &gorm.Config{
		// Each repository method opens the transaction it needs; GORM's implicit one per write is waste.
		SkipDefaultTransaction: true,
		Logger:                 lg,
		TranslateError:         false,
		// The ping below is bounded by ctx; GORM's own would not be, and it logs each failure at ERROR,
		// once per attempt while a process waits for its database at start.
		DisableAutomaticPing: true,
	})
	if err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open gorm: %w", err)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	return db, nil
}

// Close closes the pool behind db.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// Reachable reports whether a new connection to url's database can be made and answers a ping, within
// ctx: the question a pool cannot answer, since its connections may be the ones that broke. The
// connection is closed before it returns.
func Reachable(ctx context.Context, url string) error {
	cfg, err := parseURL(url)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	return conn.Ping(ctx)
}

// closeConn closes conn within a second: a half-open connection does not hold its closer.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// Prober is /readyz's check that PostgreSQL answers, on one connection of its own, outside the pool. A
// probe through the pool waited in its queue behind the requests, and read "down" whenever the pool was
// only busy (an overload tester saw 4 of 40 probes time out at 300 pays a second on DB_MAX_CONNS=2,
// PostgreSQL up all along, 2026-12-07): an orchestrator would have taken every busy replica out of
// service. The connection is kept between probes and dialed again after a failure, so that a server that
// refuses new connections (max_connections reached) while it serves the pool does not read as down either.
type Prober struct {
	cfg  *pgx.ConnConfig
	turn chan struct{} // one probe at a time on the connection
	conn *pgx.Conn     // nil until the first probe, and after a failed one
}

// NewProber returns the probe of url's database. Its connection names itself "<application_name>
// readyz" unless the URL sets application_name.
func NewProber(url string) (*Prober, error) {
	cfg, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if cfg.RuntimeParams["application_name"] == ApplicationName {
		cfg.RuntimeParams["application_name"] = ApplicationName + " readyz"
	}
	return &Prober{cfg: cfg, turn: make(chan struct{}, 1)}, nil
}

// Ping reports whether the database answers within ctx: dial (once), then a ping.
func (p *Prober) Ping(ctx context.Context) error {
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.turn }()
	if p.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, p.cfg)
		if err != nil {
			return err
		}
		p.conn = conn
	}
	if err := p.conn.Ping(ctx); err != nil {
		closeConn(p.conn)
		p.conn = nil
		return err
	}
	return nil
}

// Close closes the probe's connection, if it has one.
func (p *Prober) Close() {
	p.turn <- struct{}{}
	defer func() { <-p.turn }()
	if p.conn != nil {
		closeConn(p.conn)
		p.conn = nil
	}
}

// EnsureDatabase creates the database named in url when it does not exist, by connecting to the
// server's "postgres" maintenance database. Concurrent callers are safe: a caller whose CREATE DATABASE
// loses the race (42P04, or 23505 on pg_database's name index when the two catalog inserts meet) finds
// the database there and succeeds; one refused because another CREATE is copying the template (55006)
// tries again, a few times.
func EnsureDatabase(ctx context.Context, url string) error {
	cfg, err := parseURL(url)
	if err != nil {
		return err
	}
	name := cfg.Database
	if name == "" {
		return errors.New("DATABASE_URL names no database")
	}
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	exists := func() (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok)
		if err != nil {
			return false, fmt.Errorf("look up database %q: %w", name, err)
		}
		return ok, nil
	}
	for attempt := 1; ; attempt++ {
		if ok, err := exists(); err != nil || ok {
			return err
		}
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		if err == nil {
			return nil
		}
		if ok, lookErr := exists(); lookErr == nil && ok {
			return nil // another caller created it first
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt == 10 { // 55006: template in use
			return fmt.Errorf("create database %q: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// Migrate applies every pending migration from the embedded migrations/ folder. A PostgreSQL advisory
// lock (goose's session locker) serialises replicas that start at the same time.
func Migrate(ctx context.Context, db *sql.DB) ([]*goose.MigrationResult, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migration locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migration provider: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate up: %w", err)
	}
	return res, nil
}

// EnsureAndMigrate is what `orders migrate` and MIGRATE_ON_START run: create the database if missing,
// then apply the migrations (MigrateExisting, with lockTimeout).
func EnsureAndMigrate(ctx context.Context, url string, lockTimeout time.Duration, logger *slog.Logger) error {
	if err := EnsureDatabase(ctx, url); err != nil {
		return err
	}
	return MigrateExisting(ctx, url, lockTimeout, logger)
}

// MigrateExisting applies the migrations to a database that must exist already: what the one-shot
// commands (`orders sweep --once`, `reconcile --once`) run, which have nothing to do on a new database,
// and for which a missing one is a mistyped DATABASE_URL, not a database to create.
//
// lockTimeout (MIGRATE_LOCK_TIMEOUT; 0: none) bounds each lock wait of a migration. A migration's
// statement that waits for a table (an ALTER behind a long transaction that read it, a CREATE INDEX
// behind one that wrote it) queues every later statement on that table behind itself, the running
// shop's included: unbounded, it stopped writes to the table for as long as the transaction lasted
// (a DBA helper's finding, 2026-12-07). Bounded, the migration fails, its transaction rolled back, and
// the error says to run it again.
func MigrateExisting(ctx context.Context, url string, lockTimeout time.Duration, logger *slog.Logger) error {
	db, err := Open(ctx, url, Options{MaxConns: 2, LockTimeout: lockTimeout})
	if err != nil {
		return err
	}
	defer Close(db)
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	res, err := Migrate(ctx, sqlDB)
	if err != nil && errors.Is(TranslateError(err), ErrLockTimeout) {
		return fmt.Errorf("a migration waited MIGRATE_LOCK_TIMEOUT (%s) for a table another transaction holds, and was rolled back; run it again once that transaction has ended (pg_stat_activity shows it): %w", lockTimeout, err)
	}
	if err != nil {
		return err
	}
	logger.Info("migrations applied", "count", len(res))
	return nil
}

// Driver errors translated for the layers above.
var (
	// ErrDuplicate is a unique violation (SQLSTATE 23505).
	ErrDuplicate = errors.New("duplicate key")
	// ErrLockTimeout is a lock wait that exceeded lock_timeout (SQLSTATE 55P03). It is also transient.
	ErrLockTimeout = errors.New("lock wait timed out")
	// ErrTransient is a failure that says nothing about the request, only about now: a lock or statement
	// timeout, a serialization failure, a deadlock, a lost or refused connection, too many connections,
	// a server shutting down. The transaction rolled back, so nothing was written, and the same request
	// may succeed in a moment: 503 unavailable with Retry-After (never 500).
	ErrTransient = problem.ErrUnavailable.WithRetryAfter(time.Second)
)

// transientCodes are the SQLSTATEs of ErrTransient (PostgreSQL manual, appendix A); class 08, connection
// exceptions, is matched by its prefix.
var transientCodes = map[string]bool{
	"55P03": true, // lock_not_available (lock_timeout)
	"57014": true, // query_canceled (statement_timeout)
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"53300": true, // too_many_connections
	"57P01": true, // admin_shutdown (also pg_terminate_backend)
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now (starting up)
}

// TranslateError maps driver errors to the sentinels above, wrapped so the original stays in the chain
// for logs. Other errors are returned unchanged.
func TranslateError(err error) error {
	// A connection that could not be opened wrote nothing, whatever the server said to refuse it: a
	// database that does not exist (yet: the window of a recreate or a restore, 3D000), a role refused
	// (28xxx). Its FATAL carries a SQLSTATE, which the switch below took for a failed statement: a 500.
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: connect: %w", ErrTransient, err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		if err != nil && connectionLost(err) {
			return fmt.Errorf("%w: connection: %w", ErrTransient, err)
		}
		return err
	}
	switch {
	case pgErr.Code == "23505":
		return fmt.Errorf("%w: %s: %w", ErrDuplicate, pgErr.ConstraintName, err)
	case pgErr.Code == "55P03":
		return fmt.Errorf("%w: %w: %w", ErrLockTimeout, ErrTransient, err)
	case transientCodes[pgErr.Code] || strings.HasPrefix(pgErr.Code, "08"):
		return fmt.Errorf("%w: SQLSTATE %s: %w", ErrTransient, pgErr.Code, err)
	case pgErr.Code == "0A000" && pgErr.Message == cachedPlanChanged:
		return fmt.Errorf("%w: a prepared statement outlived a schema change: %w", ErrTransient, err)
	}
	return err
}

// cachedPlanChanged is PostgreSQL's refusal of a statement prepared before its table's columns changed
// (a migration that adds one, under a running orders: `SELECT *` then returns another row type). pgx
// forgets a statement that failed, so the same request succeeds when retried on any connection: 503
// with Retry-After, where it was a 500 for up to one request per pooled connection (a DBA helper's
// finding, 2026-12-07). Matched by its text as well, because its SQLSTATE, feature_not_supported, is
// mostly a bug's.
const cachedPlanChanged = "cached plan must not change result type"

// connectionLost reports a failure to reach or keep the server that carries no SQLSTATE: a refused
// dial, a connection closed under a statement (a reset, or an EOF where an answer should have been),
// a pool that could not hand out a connection in time.
func connectionLost(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

// MayHaveRun reports whether a statement that failed with err may have run all the same, and outside a
// transaction committed: its answer never came back (the wait for it ran out, or the connection broke,
// perhaps after the request was written). False when the server answered with an error (a SQLSTATE: the
// statement failed), when no connection could be opened, and for a failure that is not the database's.
// A caller that wrote a row with one statement, such as a pay record's claim, cannot tell its client
// "nothing was written" when this is true (a helper's finding, 2026-12-07: a claim whose answer was
// lost said Retry-After 1, and its retry met 409 for the lease).
//
// "Never written" (pgconn.SafeToRetry, and database/sql's ErrBadConn made of it) is not taken at its
// word: pgx 5.12 says it of a statement sent by the simple protocol whose answer the connection lost
// (pgtx.CommitOutcome says how), so the cost of trusting it is the untrue answer, and the cost of not
// trusting it a Retry-After as long as the lease.
func MayHaveRun(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var pgErr *pgconn.PgError
	var ce *pgconn.ConnectError
	if err == nil || errors.As(err, &pgErr) || errors.As(err, &ce) {
		return false
	}
	return connectionLost(err)
}

type rejectionsHandledKey struct{}

// RejectionsHandled returns ctx marked for a caller that handles the database refusing its data
// (SQLSTATE class 22, a data exception, or 23, an integrity violation: an unknown user's foreign key):
// such a failure of a statement run with the returned context is logged at DEBUG as handled, not as an
// ERROR. The points consumer dead-letters such a message and logs a WARN of its own; without the mark,
// each of a poison message's deliveries left ERROR lines of GORM's beside it.
func RejectionsHandled(ctx context.Context) context.Context {
	return context.WithValue(ctx, rejectionsHandledKey{}, true)
}

func rejectionsHandled(ctx context.Context) bool {
	v, _ := ctx.Value(rejectionsHandledKey{}).(bool)
	return v
}

// rejection reports whether err is the database refusing the statement's data: SQLSTATE class 22 or 23.
func rejection(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23"))
}

// handledLogger keeps GORM's ERROR lines for failures nobody handles. A statement that failed for a
// transient reason (ErrTransient: the caller answers 503 or retries) is logged at WARN, and an expected
// unique violation or a cancelled statement at DEBUG: an operator's ERROR lines must mean "look at this".
//
// A statement that succeeded within slow is not handed on at all: GORM's slog logger renders every
// statement's SQL before it decides whether to log it (ExplainSQL, a few regular expressions over the
// text), which was about a twentieth of the orders process's CPU in a callback storm.
type handledLogger struct {
	gormlogger.Interface
	logger *slog.Logger
	slow   time.Duration       // GORM's SlowThreshold: a slower statement is logged at WARN
	level  gormlogger.LogLevel // Info (db.Debug()) logs every statement
}

// slowStatement is the duration past which a statement that succeeded is logged (WARN).
const slowStatement = 500 * time.Millisecond

// ParamsFilter keeps the parameters out of every logged statement. GORM asks the logger it was given
// (this one) for the filter; the ParameterizedQueries setting of the logger inside is never reached,
// so without this method a failed statement was logged with its values (tokens' hashes, keys, bodies).
func (l handledLogger) ParamsFilter(ctx context.Context, sql string, params ...any) (string, []any) {
	return withoutParams(ctx, sql, params...)
}

// DB.Scan records each statement's SQL through a logger of GORM's own, which asks this package-wide
// filter, not ours, for the parameters: without it a failed Raw(...).Scan logged its values. Set once,
// at start: Open runs concurrently in the tests.
func init() {
	gormlogger.RecorderParamsFilter = withoutParams
}

// withoutParams is the parameters filter of every statement logged: the SQL text, no values.
func withoutParams(_ context.Context, sql string, _ ...any) (string, []any) { return sql, nil }

func (l handledLogger) LogMode(level gormlogger.LogLevel) gormlogger.Interface {
	return handledLogger{Interface: l.Interface.LogMode(level), logger: l.logger, slow: l.slow, level: level}
}

func (l handledLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	if err == nil && l.level < gormlogger.Info && time.Since(begin) <= l.slow {
		return // nothing to log, so nothing to render
	}
	if err != nil {
		translated := TranslateError(err)
		level := slog.LevelWarn
		switch {
		case errors.Is(translated, ErrDuplicate):
			level = slog.LevelDebug
		case errors.Is(err, context.Canceled):
			// The caller gave up (a shutdown, a client that went away): nothing to look at. It used to
			// leave one ERROR line per worker query in flight at every SIGTERM.
			level = slog.LevelDebug
		case errors.Is(translated, ErrTransient):
		case rejectionsHandled(ctx) && rejection(err):
			// The caller said it turns a refusal of the data into an answer of its own, and logs it.
			level = slog.LevelDebug
		default:
			l.Interface.Trace(ctx, begin, fc, err)
			return
		}
		sql, rows := fc()
		l.logger.Log(ctx, level, "statement failed (handled by its caller)", "err", err,
			"elapsed_ms", time.Since(begin).Milliseconds(), "rows", rows, "sql", sql)
		return
	}
	l.Interface.Trace(ctx, begin, fc, err)
}

// answerDeadline wraps dial so that every connection it makes is an answerDeadlineConn with limit.
func answerDeadline(dial pgconn.DialFunc, limit time.Duration) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &answerDeadlineConn{Conn: c, limit: limit}, nil
	}
}

// answerDeadlineConn gives up on a server that has not answered within limit of the last thing sent
// to it: each Write sets the connection's deadline limit ahead, so the reads that wait for the answer
// fail with a timeout, and pgx closes the connection (the pool then drops it). statement_timeout
// alone did not do that, for it is the server's, and a server that never receives the statement
// never starts it. On a half-open connection (a stalled proxy, a partition) every caller without a
// deadline of its own waited for good: the outbox relay stopped publishing, with nothing in the log
// and /readyz answering ok, until a person restarted orders (a helper's finding, 2026-12-06); the
// sweeper, the reconciler and the reapers were the same. A deadline pgx sets (a cancelled context,
// its close) is kept when it is earlier.
type answerDeadlineConn struct {
	net.Conn
	limit time.Duration
	mu    sync.Mutex
	set   time.Time // the last deadline pgx set (zero: none)
}

func (c *answerDeadlineConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	d := time.Now().Add(c.limit)
	if !c.set.IsZero() && c.set.Before(d) {
		d = c.set
	}
	err := c.Conn.SetDeadline(d)
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *answerDeadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set = t
	return c.Conn.SetDeadline(t)
}
