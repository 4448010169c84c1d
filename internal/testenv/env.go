package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/testenv/tcpproxy"
	"idemshop/migrations"
)

// Env is one test's isolated slice of the backing services.
type Env struct {
	Services
	// DatabaseURL is this test's own database, cloned from the migrated template (seed data included).
	DatabaseURL string
	DB          *gorm.DB
	Redis       *redis.Client
	// Prefix namespaces every Redis key and queue name of this test, e.g. "t42-1234:".
	Prefix string

	t      testing.TB
	mu     sync.Mutex
	queues []string
}

// Options tune New.
type Options struct {
	// LockTimeout is the DB session's lock_timeout (0: 2 s, the service default).
	LockTimeout time.Duration
	// MaxConns bounds the test's pool (0: 6). Keep it small: test packages and parallel tests share one
	// PostgreSQL whose max_connections is 100.
	MaxConns int
}

var seq atomic.Int64

// New gives t its own database, Redis prefix and queue namespace, and removes them when t ends.
func New(t testing.TB, opts ...Options) *Env {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = 2 * time.Second
	}
	if o.MaxConns == 0 {
		o.MaxConns = 6
	}
	svc := Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tmpl, err := templateDB(ctx, svc.PostgresURL)
	if err != nil {
		t.Fatalf("testenv: template database: %v", err)
	}
	n := seq.Add(1)
	name := fmt.Sprintf("idemshop_test_%d_%d", os.Getpid(), n)
	admin, err := pgx.Connect(ctx, svc.PostgresURL)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	_, err = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{tmpl}.Sanitize()))
	admin.Close(ctx)
	if err != nil {
		t.Fatalf("testenv: clone template into %s: %v", name, err)
	}
	e := &Env{Services: svc, DatabaseURL: withDatabase(svc.PostgresURL, name), t: t,
		Prefix: fmt.Sprintf("t%d-%d:", os.Getpid(), n)}
	t.Cleanup(func() { dropDatabase(t, svc.PostgresURL, name) })

	e.DB, err = postgres.Open(ctx, e.DatabaseURL, postgres.Options{
		LockTimeout: o.LockTimeout, StatementTimeout: 30 * time.Second, MaxConns: o.MaxConns})
	if err != nil {
		t.Fatalf("testenv: open %s: %v", name, err)
	}
	t.Cleanup(func() { _ = postgres.Close(e.DB) })

	ropt, err := redis.ParseURL(svc.RedisURL)
	if err != nil {
		t.Fatalf("testenv: REDIS url: %v", err)
	}
	e.Redis = redis.NewClient(ropt)
	t.Cleanup(func() {
		e.cleanRedis()
		e.deleteQueues()
		_ = e.Redis.Close()
	})
	return e
}

// Queue returns a queue (or exchange) name unique to this test, and deletes the queue or exchange of
// that name when the test ends.
func (e *Env) Queue(base string) string {
	name := e.Prefix + base
	e.mu.Lock()
	e.queues = append(e.queues, name)
	e.mu.Unlock()
	return name
}

// Topology returns the shop's event topology under this test's prefix followed by sub (a process's
// own AMQP_NAME_PREFIX is then Prefix+sub), and deletes its queues and exchanges when the test ends,
// whoever declared them.
func (e *Env) Topology(sub string) rabbitmq.Topology {
	top := rabbitmq.OrderPaidTopology().WithPrefix(e.Prefix + sub)
	for _, n := range []string{top.Queue, top.DeadLetterQueue, top.Exchange, top.DeadLetterExchange} {
		e.Queue(n[len(e.Prefix):])
	}
	return top
}

// DeleteWhileCut cuts p, so that the process connected through it loses its broker connection,
// deletes the queues and exchanges names on the broker directly, and restores p: the process's next
// session finds them gone, as after an operator's deletion between two of its sessions.
func (e *Env) DeleteWhileCut(p *tcpproxy.Proxy, names ...string) {
	e.t.Helper()
	p.Cut()
	defer p.Restore()
	conn, err := amqp.Dial(e.AMQPURL)
	if err != nil {
		e.t.Fatalf("testenv: connect to delete %v: %v", names, err)
	}
	defer conn.Close()
	if err := rabbitmq.DeleteNames(conn, names...); err != nil {
		e.t.Fatalf("testenv: delete %v: %v", names, err)
	}
}

// Missing returns which of top's exchanges and queues the broker does not have (rabbitmq.Missing).
func (e *Env) Missing(top rabbitmq.Topology) []string {
	e.t.Helper()
	conn, err := amqp.Dial(e.AMQPURL)
	if err != nil {
		e.t.Fatalf("testenv: connect to look %s up: %v", top.Queue, err)
	}
	defer conn.Close()
	missing, err := rabbitmq.Missing(conn, top)
	if err != nil {
		e.t.Fatalf("testenv: look %s up: %v", top.Queue, err)
	}
	return missing
}

func (e *Env) cleanRedis() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = redisx.DeletePrefix(ctx, e.Redis, e.Prefix)
}

// deleteQueues deletes every queue and exchange named through Queue (rabbitmq.DeleteNames).
func (e *Env) deleteQueues() {
	e.mu.Lock()
	names := e.queues
	e.mu.Unlock()
	if len(names) == 0 {
		return
	}
	conn, err := amqp.Dial(e.AMQPURL)
	if err != nil {
		e.t.Logf("testenv: queues not deleted: %v", err)
		return
	}
	defer conn.Close()
	if err := rabbitmq.DeleteNames(conn, names...); err != nil {
		e.t.Logf("testenv: queues not deleted: %v", err)
	}
}

func withDatabase(serverURL, db string) string {
	cfg := strings.SplitN(serverURL, "?", 2)
	base := cfg[0][:strings.LastIndex(cfg[0], "/")+1] + db
	if len(cfg) == 2 {
		return base + "?" + cfg[1]
	}
	return base
}

func dropDatabase(t testing.TB, serverURL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Logf("testenv: drop %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Logf("testenv: drop %s: %v", name, err)
	}
}

var (
	tmplOnce sync.Once
	tmplName string
	tmplErr  error
)

// templateDB returns the name of a database holding the current migrations, creating it once per
// migration set. Test binaries run in parallel, so creation is serialised by an advisory lock and a
// template is only used once it is marked IS_TEMPLATE (the mark is the "finished" flag).
func templateDB(ctx context.Context, serverURL string) (string, error) {
	tmplOnce.Do(func() { tmplName, tmplErr = buildTemplate(ctx, serverURL) })
	return tmplName, tmplErr
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\n%d\n", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

func buildTemplate(ctx context.Context, serverURL string) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "idemshop_tmpl_" + sum
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('idemshop-testenv-template'))"); err != nil {
		return "", err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext('idemshop-testenv-template'))")

	dropStaleTestDatabases(ctx, conn)

	var isTemplate *bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	if err != nil && err != pgx.ErrNoRows {
		return "", err
	}
	if isTemplate != nil && *isTemplate {
		return name, nil
	}
	ident := pgx.Identifier{name}.Sanitize()
	if isTemplate != nil { // a half-built template from a run that died: start over
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident+" WITH (FORCE)"); err != nil {
			return "", err
		}
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", err
	}
	db, err := postgres.Open(ctx, withDatabase(serverURL, name), postgres.Options{MaxConns: 1})
	if err != nil {
		return "", err
	}
	sqlDB, _ := db.DB()
	_, err = postgres.Migrate(ctx, sqlDB)
	_ = sqlDB.Close()
	if err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" IS_TEMPLATE true"); err != nil {
		return "", err
	}
	return name, nil
}

// dropStaleTestDatabases removes databases left by test processes that were killed before cleanup.
// The creating pid is part of the name; a pid with no /proc entry is gone.
func dropStaleTestDatabases(ctx context.Context, conn *pgx.Conn) {
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'idemshop\\_test\\_%'")
	if err != nil {
		return
	}
	names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, n := range names {
		parts := strings.Split(n, "_") // idemshop, test, pid, seq
		if len(parts) != 4 {
			continue
		}
		pid, err := strconv.Atoi(parts[2])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + parts[2]); err == nil {
			continue
		}
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
	}
}

// OpenDB opens another pool on url with its own lock_timeout, as a second replica would have; it is
// closed when t ends.
func OpenDB(t testing.TB, url string, lockTimeout time.Duration) *gorm.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), url, postgres.Options{LockTimeout: lockTimeout, MaxConns: 4})
	if err != nil {
		t.Fatalf("testenv: open %s: %v", url, err)
	}
	t.Cleanup(func() { _ = postgres.Close(db) })
	return db
}

// OpenLoggedDB opens another pool on url whose SQL logger writes every level, DEBUG up, to the returned
// Output, for a test that asserts what a statement logged; it is closed when t ends.
func OpenLoggedDB(t testing.TB, url string) (*gorm.DB, *Output) {
	t.Helper()
	out := &Output{}
	db, err := postgres.Open(context.Background(), url, postgres.Options{
		Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatalf("testenv: open %s: %v", url, err)
	}
	t.Cleanup(func() { _ = postgres.Close(db) })
	return db, out
}

// SlowUpdates makes every UPDATE of table in db's database take 5 seconds (a trigger that sleeps), so
// that a caller's context runs out inside the statement: a process stopping mid-write. The trigger
// stays until the test's database is dropped, or until the returned restore is called.
func SlowUpdates(t testing.TB, db *gorm.DB, table string) (restore func()) {
	t.Helper()
	tb := pgx.Identifier{table}.Sanitize()
	for _, sql := range []string{`CREATE FUNCTION test_slow_update() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(5); RETURN NEW; END $$`,
		`CREATE TRIGGER test_slow_update BEFORE UPDATE ON ` + tb + ` FOR EACH ROW EXECUTE FUNCTION test_slow_update()`} {
		if err := db.Exec(sql).Error; err != nil {
			t.Fatalf("testenv: %s: %v", sql, err)
		}
	}
	return func() {
		t.Helper()
		if err := db.Exec(`DROP TRIGGER test_slow_update ON ` + tb).Error; err != nil {
			t.Fatalf("testenv: drop the slow-update trigger: %v", err)
		}
	}
}

// RefuseUpdates makes every UPDATE of the named tables in db's database fail, as a database refusing
// writes would (a trigger raising an error), for a test of what a failed write leaves; the returned
// func drops the triggers again.
func RefuseUpdates(t testing.TB, db *gorm.DB, tables ...string) (restore func()) {
	t.Helper()
	exec := func(sql string) {
		t.Helper()
		if err := db.Exec(sql).Error; err != nil {
			t.Fatalf("testenv: %s: %v", sql, err)
		}
	}
	exec(`CREATE FUNCTION test_refuse_update() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'test: % refuses updates', TG_TABLE_NAME; END $$`)
	for _, tb := range tables {
		exec(fmt.Sprintf(`CREATE TRIGGER test_refuse_update BEFORE UPDATE ON %s
			FOR EACH ROW EXECUTE FUNCTION test_refuse_update()`, pgx.Identifier{tb}.Sanitize()))
	}
	return func() {
		t.Helper()
		for _, tb := range tables {
			exec(fmt.Sprintf(`DROP TRIGGER test_refuse_update ON %s`, pgx.Identifier{tb}.Sanitize()))
		}
		exec(`DROP FUNCTION test_refuse_update()`)
	}
}
