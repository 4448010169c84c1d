package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goosepglock "github.com/pressly/goose/v3/lock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// PostgreSQL does not answer when orders starts (the proxy in front of it refuses every connection):
// orders stays up, /healthz answers, /readyz says "starting", and once the server answers it creates
// and migrates its database and becomes ready (docs/reliability.md, "Start-up order").
func TestWaitsForPostgres(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	svc := testenv.Find(t)
	_, dbURL := freshDatabase(t, svc, "owait")
	proxy, viaProxy := tcpproxy.ForURL(t, dbURL)
	proxy.Cut()

	prefix := cleanPrefix(t, svc, "owait")
	p := launch(t, bin, "DATABASE_URL="+viaProxy, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix)
	waitFor(t, 15*time.Second, func() bool { return p.logs.Contains("attempt=3") }, "three attempts; logs:\n%s", p.logs)
	p.requireRunning(t)
	r := p.get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, r.code)
	assert.Equal(t, "starting", r.readiness.Status)
	assert.Contains(t, r.readiness.Checks, "postgres", "says what it waits for")
	assert.Equal(t, http.StatusServiceUnavailable, p.get("/v1/products").code, "no traffic before ready")

	proxy.Restore()
	waitFor(t, 30*time.Second, func() bool { return p.get("/readyz").code == http.StatusOK },
		"ready once PostgreSQL answers; logs:\n%s", p.logs)
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.addr+"/v1/products", nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the database was created, migrated and seeded")
	p.stop(t)
}

// With MIGRATE_ON_START=false a separate `orders migrate` job owns the schema (docker-compose.yml):
// orders waits for the database to exist and be migrated rather than failing.
func TestWaitsForTheMigrateJob(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	svc := testenv.Find(t)
	_, dbURL := freshDatabase(t, svc, "omigr")
	prefix := cleanPrefix(t, svc, "omigr")
	p := launch(t, bin, "DATABASE_URL="+dbURL, "MIGRATE_ON_START=false", "REDIS_URL="+svc.RedisURL,
		"AMQP_URL="+svc.AMQPURL, "REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix)
	waitFor(t, 15*time.Second, func() bool {
		return strings.Contains(p.get("/readyz").readiness.Checks["postgres"], "does not exist")
	}, "waits for the database; logs:\n%s", p.logs)
	p.requireRunning(t)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, postgres.EnsureAndMigrate(ctx, dbURL, 0, slog.New(slog.NewTextHandler(io.Discard, nil))))
	waitFor(t, 20*time.Second, func() bool { return p.get("/readyz").code == http.StatusOK },
		"ready once migrated; logs:\n%s", p.logs)
	p.stop(t)
}

// The migration orders runs at start is bounded by ONCE_TIMEOUT, as `orders migrate` is: here another
// migrator holds the migrations' lock (goose's session lock, which goose waits 5 minutes for); a
// database that stops answering in the middle of a migration held the start for good.
func TestMigrationOnStartEndsWithinOnceTimeout(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	svc := testenv.Find(t)
	_, dbURL := freshDatabase(t, svc, "omigto")
	ctx := context.Background()
	require.NoError(t, postgres.EnsureDatabase(ctx, dbURL))
	holder, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", goosepglock.DefaultLockID)
	require.NoError(t, err)

	prefix := cleanPrefix(t, svc, "omigto")
	p := launch(t, bin, "DATABASE_URL="+dbURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix, "ONCE_TIMEOUT=1s")
	var ee *exec.ExitError
	require.ErrorAs(t, p.wait(t, 20*time.Second), &ee, "logs:\n%s", p.logs) // 1 s, and slack; without the bound, goose's 5 minutes
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, p.logs.String(), "did not finish within ONCE_TIMEOUT (1s)")
}

// SIGTERM during the wait: a prompt exit with status 0.
func TestSignalDuringTheWaitExitsZero(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	svc := testenv.Find(t)
	_, dbURL := freshDatabase(t, svc, "osig")
	prefix := cleanPrefix(t, svc, "osig")
	p := launch(t, bin, "DATABASE_URL="+dbURL, "MIGRATE_ON_START=false", "STARTUP_RETRY_MIN=5s",
		"STARTUP_RETRY_MAX=5s", "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix)
	waitFor(t, 15*time.Second, func() bool { return p.logs.Contains("waiting for a dependency") }, "waiting; logs:\n%s", p.logs)
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, p.wait(t, 3*time.Second), "exit 0; logs:\n%s", p.logs)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Contains(t, p.logs.String(), "stopped before it was ready")
}

// SIGTERM with a broker that stopped answering (its connection half-open): orders exits within
// SHUTDOWN_TIMEOUT and a margin. The relay's close waits for the broker up to OUTBOX_CONFIRM_TIMEOUT
// (here 20 s), and SIGTERM took 9-20 s at a 3 s SHUTDOWN_TIMEOUT (a helper's finding, 2026-12-06).
func TestSIGTERMWithABrokerThatStoppedAnsweringEndsInTime(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	svc := testenv.Find(t)
	_, dbURL := freshDatabase(t, svc, "ostall")
	prefix := cleanPrefix(t, svc, "ostall")
	proxy, amqpURL := tcpproxy.ForURL(t, svc.AMQPURL)
	p := launch(t, bin, "DATABASE_URL="+dbURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+amqpURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix, "SHUTDOWN_TIMEOUT=1s", "OUTBOX_CONFIRM_TIMEOUT=20s")
	waitFor(t, 20*time.Second, func() bool { return p.logs.Contains("outbox relay connected") },
		"the relay connected; logs:\n%s", p.logs)

	proxy.Stall()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	// Exit 0, a shutdown, not a crash, within 1 s + the 2 s margin, and slack; without the bound, 20 s.
	assert.NoError(t, p.wait(t, 7*time.Second), "logs:\n%s", p.logs)
	assert.Contains(t, p.logs.String(), "did not stop within SHUTDOWN_TIMEOUT")
}

// SIGTERM with a client that sent half its request and went quiet: orders closes it at
// SHUTDOWN_TIMEOUT and exits 0 with a WARN. It exited 1 ("graceful shutdown: context deadline
// exceeded", in plain text whatever LOG_FORMAT) with the connection still open (a helper's finding,
// 2026-12-06).
func TestSIGTERMWithAStragglingClientExitsZero(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	svc := testenv.Find(t)
	_, dbURL := freshDatabase(t, svc, "ostrag")
	prefix := cleanPrefix(t, svc, "ostrag")
	p := launch(t, bin, "DATABASE_URL="+dbURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix, "SHUTDOWN_TIMEOUT=1s")
	waitFor(t, 20*time.Second, func() bool { return p.get("/readyz").code == http.StatusOK }, "ready; logs:\n%s", p.logs)
	straggler, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = straggler.Close() })
	// Its request is in the handler, waiting for its body: the server answers 100 Continue when the
	// handler starts reading it. (Signalled before the server had accepted the connection, orders
	// exited at once: the connection was still in the listener's backlog.)
	_, err = straggler.Write([]byte("POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\n" +
		"Idempotency-Key: straggler-1\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, straggler.SetReadDeadline(time.Now().Add(10*time.Second)))
	status, err := bufio.NewReader(straggler).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, status, "100 Continue", "the handler reads the body")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, p.wait(t, 7*time.Second), "exit 0; logs:\n%s", p.logs) // 1 s, and slack
	assert.Contains(t, p.logs.String(), "connections still open at SHUTDOWN_TIMEOUT were closed")
	assert.Contains(t, p.logs.String(), "orders stopped")
}

// Redis is not there at start: orders is ready but degraded (Redis is an efficiency layer), and the
// check turns ok once a redis-server starts on that port.
func TestRedisStartedLater(t *testing.T) {
	t.Parallel()
	redisServer, err := exec.LookPath("redis-server")
	if err != nil {
		// A missing binary is a broken test machine, not a reason to pass: fail loudly, as testenv does.
		if testing.Short() {
			t.Skip("redis-server not on PATH (-short)")
		}
		t.Fatalf("redis-server not on PATH (Debian: apt-get install redis-server): %v", err)
	}
	bin := testenv.Build(t, "idemshop/cmd/orders")
	svc := testenv.Find(t)
	_, dbURL := freshDatabase(t, svc, "oredis")
	redisAddr := testenv.FreeAddr(t)
	prefix := cleanPrefix(t, svc, "oredis")
	p := launch(t, bin, "DATABASE_URL="+dbURL, "REDIS_URL=redis://"+redisAddr+"/0", "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix)
	waitFor(t, 30*time.Second, func() bool {
		r := p.get("/readyz")
		return r.code == http.StatusOK && r.readiness.Status == "degraded" &&
			strings.HasPrefix(r.readiness.Checks["redis"], "down")
	}, "ready, degraded without Redis; logs:\n%s", p.logs)

	_, port, _ := strings.Cut(redisAddr, ":")
	rs := exec.Command(redisServer, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(t, rs.Start())
	t.Cleanup(func() { _ = rs.Process.Kill(); _ = rs.Wait() })
	waitFor(t, 15*time.Second, func() bool {
		r := p.get("/readyz")
		return r.code == http.StatusOK && r.readiness.Status == "ok"
	}, "ok once Redis answers; logs:\n%s", p.logs)
	p.stop(t)
}

// --- helpers ---

type proc struct {
	cmd    *exec.Cmd
	logs   *testenv.Output
	addr   string
	exited chan error
}

// launch starts bin with short start-up backoffs and does not wait for readiness, only for /healthz,
// which must answer at once.
func launch(t *testing.T, bin string, extra ...string) *proc {
	t.Helper()
	p := &proc{logs: &testenv.Output{}, addr: testenv.FreeAddr(t), exited: make(chan error, 1)}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(os.Environ(), append([]string{"HTTP_ADDR=" + p.addr, "STARTUP_RETRY_MIN=20ms",
		"STARTUP_RETRY_MAX=200ms", "STARTUP_ATTEMPT_TIMEOUT=2s", "AMQP_RECONNECT_MIN=50ms",
		"AMQP_RECONNECT_MAX=500ms", "LOG_LEVEL=debug"}, extra...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	waitFor(t, 10*time.Second, func() bool { return p.get("/healthz").code == http.StatusOK },
		"/healthz answers at once; logs:\n%s", p.logs)
	return p
}

func (p *proc) requireRunning(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("the process exited (%v); logs:\n%s", err, p.logs)
	default:
	}
}

// stop sends SIGTERM and requires exit 0.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, p.wait(t, 20*time.Second), "exit 0; logs:\n%s", p.logs)
}

// wait returns the process's exit error, and fails t if it is still running d from now.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exited:
		return err
	case <-time.After(d):
		t.Fatalf("still running %s from now; logs:\n%s", d, p.logs)
		return nil
	}
}

type answer struct {
	code      int
	readiness struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
}

func (p *proc) get(path string) answer {
	var a answer
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return a
	}
	defer resp.Body.Close()
	a.code = resp.StatusCode
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &a.readiness)
	return a
}

func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, timeout, 25*time.Millisecond, append([]any{msg}, args...)...)
}

// freshDatabase names a database that does not exist yet, and drops it when t ends.
func freshDatabase(t *testing.T, svc testenv.Services, tag string) (name, url string) {
	t.Helper()
	name = fmt.Sprintf("idemshop_test_%d_%s", os.Getpid(), tag)
	url = strings.Replace(svc.PostgresURL, "/postgres?", "/"+name+"?", 1)
	require.NotEqual(t, svc.PostgresURL, url)
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, svc.PostgresURL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	}
	drop()
	t.Cleanup(drop)
	return name, url
}

// cleanPrefix returns a Redis and AMQP prefix for tag, and deletes what orders created under it (the
// relay declares the topology; the guards write keys) when t ends.
func cleanPrefix(t *testing.T, svc testenv.Services, tag string) string {
	prefix := fmt.Sprintf("%s-%d:", tag, os.Getpid())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := rabbitmq.Dial(ctx, svc.AMQPURL); err == nil {
			rabbitmq.Delete(conn, rabbitmq.OrderPaidTopology().WithPrefix(prefix))
			_ = conn.Close()
		}
		if rdb, err := redisx.Open(svc.RedisURL, time.Second); err == nil {
			_ = redisx.DeletePrefix(ctx, rdb, prefix)
			_ = rdb.Close()
		}
	})
	return prefix
}
