package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// Started before orders has created its database (a fresh machine, or compose without depends_on),
// points-consumer stays up: /healthz answers at once, /readyz says "starting" while the database is
// missing and while it is not migrated yet, and it becomes ready once orders' migration is done. It
// never creates the database itself (docs/reliability.md, "Start-up order").
func TestWaitsForTheDatabaseToBeCreatedAndMigrated(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	svc := testenv.Find(t)
	name, dbURL := freshDatabase(t, svc, "pcwait")
	prefix := fmt.Sprintf("pcwait-%d:", os.Getpid())
	cleanPrefix(t, svc, prefix)

	p := launch(t, bin, "DATABASE_URL="+dbURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix)
	waitFor(t, 15*time.Second, func() bool { return p.logs.Contains("attempt=3") },
		"three attempts logged; logs:\n%s", p.logs.String())
	p.requireRunning(t)
	assert.Equal(t, http.StatusOK, p.get(t, "/healthz").code, "alive while waiting")
	r := p.get(t, "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, r.code)
	assert.Equal(t, "starting", r.readiness.Status)
	assert.Contains(t, r.readiness.Checks["postgres"], "does not exist", "says what it waits for")
	assert.Equal(t, http.StatusServiceUnavailable, p.get(t, "/v1/anything").code, "no traffic before ready")

	// The database appears empty (orders has created it, not migrated it yet): still not ready.
	sqlExec(t, svc.PostgresURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	waitFor(t, 15*time.Second, func() bool {
		return strings.Contains(p.get(t, "/readyz").readiness.Checks["postgres"], "not migrated")
	}, "waits for the migration; logs:\n%s", p.logs.String())
	p.requireRunning(t)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, postgres.EnsureAndMigrate(ctx, dbURL, 0, slog.New(slog.NewTextHandler(io.Discard, nil))))
	waitFor(t, 20*time.Second, func() bool { return p.get(t, "/readyz").code == http.StatusOK },
		"ready once migrated; logs:\n%s", p.logs.String())
	waitFor(t, 15*time.Second, func() bool { return p.logs.Contains("points consumer connected") },
		"subscribed; logs:\n%s", p.logs.String())
	assert.Contains(t, p.logs.String(), "dependency is up")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, p.wait(t, 15*time.Second), "graceful exit 0; logs:\n%s", p.logs.String())
}

// SIGTERM while waiting for the database ends the process promptly, with status 0: an orchestrator
// that gives up on a start must not see a crash.
func TestSignalDuringTheWaitExitsZero(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	svc := testenv.Find(t)
	_, dbURL := freshDatabase(t, svc, "pcsig")
	prefix := fmt.Sprintf("pcsig-%d:", os.Getpid())
	cleanPrefix(t, svc, prefix)
	p := launch(t, bin, "DATABASE_URL="+dbURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix,
		"STARTUP_RETRY_MIN=5s", "STARTUP_RETRY_MAX=5s") // the signal lands inside a long backoff
	waitFor(t, 15*time.Second, func() bool { return p.logs.Contains("waiting for a dependency") },
		"waiting; logs:\n%s", p.logs.String())
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, p.wait(t, 3*time.Second), "exit 0; logs:\n%s", p.logs.String())
	assert.Less(t, time.Since(start), 3*time.Second, "without sitting out the backoff")
	assert.Contains(t, p.logs.String(), "stopped before it was ready")
}

// A configuration mistake is not a dependency: it stops the process at once.
func TestBadDatabaseURLFailsAtOnce(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	for _, url := range []string{
		"postgres://postgres@127.0.0.1:5432/?sslmode=disable",       // names no database
		"postgres://postgres@127.0.0.1:5432/x?sslmode=sometimes",    // malformed
		"postgres://postgres@127.0.0.1:5432/x?connect_timeout=-abc", // malformed
	} {
		cmd := osexec(bin, "DATABASE_URL="+url, "HTTP_ADDR="+testenv.FreeAddr(t))
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: still running after 10s", url)
		}
		require.Error(t, err, url)
		assert.Contains(t, string(out), "DATABASE_URL", url)
	}
}

// The broker is not there at start (the proxy refuses every connection): the process stays up and
// not ready, since the consumer cannot work without it, and subscribes once the broker answers.
func TestWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	env := testenv.New(t)
	env.Topology("")
	proxy, amqpURL := tcpproxy.ForURL(t, env.AMQPURL)
	proxy.Cut()

	p := launch(t, bin, "DATABASE_URL="+env.DatabaseURL, "REDIS_URL="+env.RedisURL, "AMQP_URL="+amqpURL,
		"REDIS_KEY_PREFIX="+env.Prefix, "AMQP_NAME_PREFIX="+env.Prefix)
	waitFor(t, 15*time.Second, func() bool {
		r := p.get(t, "/readyz")
		return r.code == http.StatusServiceUnavailable && strings.HasPrefix(r.readiness.Checks["rabbitmq"], "down")
	}, "not ready without the broker; logs:\n%s", p.logs.String())
	waitFor(t, 15*time.Second, func() bool { return strings.Count(p.logs.String(), "reconnecting") >= 2 },
		"retries the broker; logs:\n%s", p.logs.String())
	p.requireRunning(t)

	proxy.Restore()
	waitFor(t, 20*time.Second, func() bool { return p.get(t, "/readyz").code == http.StatusOK },
		"ready once the broker answers; logs:\n%s", p.logs.String())
	waitFor(t, 15*time.Second, func() bool { return p.logs.Contains("points consumer connected") },
		"subscribed; logs:\n%s", p.logs.String())
}

// A broker that answers is not a consumer that works: while its queue is held exclusively by another
// connection (its declaration refused, 405), /readyz says unavailable with why, though a ping of the
// broker succeeds; once the queue is free, the consumer subscribes and is ready. It said "ok" while the
// session failed in a loop (a newcomer's, 2026-12-06).
func TestNotReadyWhileItCannotSubscribe(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	env := testenv.New(t)
	top := env.Topology("")
	holder, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	ch, err := holder.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(top.Queue, false, true, true, false, nil) // exclusive to this connection
	require.NoError(t, err)

	p := launch(t, bin, "DATABASE_URL="+env.DatabaseURL, "REDIS_URL="+env.RedisURL, "AMQP_URL="+env.AMQPURL,
		"REDIS_KEY_PREFIX="+env.Prefix, "AMQP_NAME_PREFIX="+env.Prefix)
	// Until the broker check has its answer: 503 with the refusal, or a 200 (refused at once, not
	// waited out: nothing can subscribe while the queue is held).
	var r answer
	waitFor(t, 15*time.Second, func() bool {
		r = p.get(t, "/readyz")
		return r.code == http.StatusOK ||
			r.code == http.StatusServiceUnavailable && strings.Contains(r.readiness.Checks["rabbitmq"], "405")
	}, "not ready while its queue cannot be declared; logs:\n%s", p.logs.String())
	require.Equal(t, http.StatusServiceUnavailable, r.code, "ready though it cannot subscribe: %+v", r.readiness)
	p.requireRunning(t)

	require.NoError(t, holder.Close()) // the exclusive queue goes with its connection
	waitFor(t, 20*time.Second, func() bool { return p.get(t, "/readyz").code == http.StatusOK },
		"ready once it subscribed; logs:\n%s", p.logs.String())
	assert.True(t, p.logs.Contains("points consumer connected"))
}

// Redis is not there at start (nothing listens on its port): Redis is layer 1 only, so the process is
// up and ready but degraded, and the check turns ok once a redis-server starts on that port.
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
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	env := testenv.New(t)
	env.Topology("")
	redisAddr := testenv.FreeAddr(t)
	p := launch(t, bin, "DATABASE_URL="+env.DatabaseURL, "REDIS_URL=redis://"+redisAddr+"/0",
		"AMQP_URL="+env.AMQPURL, "REDIS_KEY_PREFIX="+env.Prefix, "AMQP_NAME_PREFIX="+env.Prefix)
	waitFor(t, 15*time.Second, func() bool {
		r := p.get(t, "/readyz")
		return r.code == http.StatusOK && r.readiness.Status == "degraded" &&
			strings.HasPrefix(r.readiness.Checks["redis"], "down")
	}, "ready, degraded without Redis; logs:\n%s", p.logs.String())

	_, port, _ := strings.Cut(redisAddr, ":")
	startRedis(t, redisServer, port)
	waitFor(t, 15*time.Second, func() bool {
		r := p.get(t, "/readyz")
		return r.code == http.StatusOK && r.readiness.Status == "ok"
	}, "ok once Redis answers; logs:\n%s", p.logs.String())
	p.requireRunning(t)
}

// --- helpers of the start-up tests ---

// launch starts bin with short start-up backoffs and extra settings, and does not wait for readiness.
func launch(t *testing.T, bin string, extra ...string) *proc {
	t.Helper()
	p := &proc{logs: &testenv.Output{}, addr: testenv.FreeAddr(t), exited: make(chan error, 1)}
	p.cmd = osexec(bin, append([]string{"HTTP_ADDR=" + p.addr, "STARTUP_RETRY_MIN=20ms",
		"STARTUP_RETRY_MAX=200ms", "STARTUP_ATTEMPT_TIMEOUT=2s", "AMQP_RECONNECT_MIN=50ms",
		"AMQP_RECONNECT_MAX=500ms", "LOG_LEVEL=debug"}, extra...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	waitFor(t, 10*time.Second, func() bool { return p.get(t, "/healthz").code == http.StatusOK },
		"/healthz answers at once; logs:\n%s", p.logs.String())
	return p
}

func osexec(bin string, env ...string) *exec.Cmd {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// requireRunning fails the test if the process has exited.
func (p *proc) requireRunning(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("the process exited (%v); logs:\n%s", err, p.logs.String())
	default:
	}
}

type answer struct {
	code      int
	readiness struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
}

// get is one GET with a timeout; code 0 means no answer.
func (p *proc) get(t *testing.T, path string) answer {
	t.Helper()
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

// freshDatabase names a database that does not exist yet, and drops it when t ends.
func freshDatabase(t *testing.T, svc testenv.Services, tag string) (name, url string) {
	t.Helper()
	name = fmt.Sprintf("idemshop_test_%d_%s", os.Getpid(), tag)
	url = strings.Replace(svc.PostgresURL, "/postgres?", "/"+name+"?", 1)
	require.NotEqual(t, svc.PostgresURL, url)
	sqlExec(t, svc.PostgresURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	t.Cleanup(func() {
		sqlExec(t, svc.PostgresURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return name, url
}

func sqlExec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

// cleanPrefix deletes the topology a process declared under prefix when t ends (Redis keys too).
func cleanPrefix(t *testing.T, svc testenv.Services, prefix string) {
	t.Cleanup(func() {
		conn, err := amqp.Dial(svc.AMQPURL)
		if err != nil {
			return
		}
		defer conn.Close()
		rabbitmq.Delete(conn, rabbitmq.OrderPaidTopology().WithPrefix(prefix))
	})
}

// startRedis runs a throwaway redis-server on port until t ends.
func startRedis(t *testing.T, redisServer, port string) {
	t.Helper()
	cmd := exec.Command(redisServer, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// SIGTERM with a broker that stopped answering (its connection half-open) ends within SHUTDOWN_TIMEOUT
// and a margin: the unsubscribe and the close wait for answers that never come, until the heartbeat
// gives up, and SIGTERM took 11-26 s at a 3 s SHUTDOWN_TIMEOUT (a helper's finding, 2026-12-06).
func TestSIGTERMWithABrokerThatStoppedAnsweringEndsInTime(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	env := testenv.New(t)
	env.Topology("")
	proxy, amqpURL := tcpproxy.ForURL(t, env.AMQPURL)
	p := launch(t, bin, "DATABASE_URL="+env.DatabaseURL, "REDIS_URL="+env.RedisURL, "AMQP_URL="+amqpURL,
		"REDIS_KEY_PREFIX="+env.Prefix, "AMQP_NAME_PREFIX="+env.Prefix, "SHUTDOWN_TIMEOUT=1s")
	waitFor(t, 20*time.Second, func() bool { return p.get(t, "/readyz").code == http.StatusOK },
		"ready; logs:\n%s", p.logs.String())

	proxy.Stall()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	// 1 s + the 2 s margin; without the bound, the heartbeat's 10 s or more. Exit 0: a shutdown, not a crash.
	assert.NoError(t, p.wait(t, 7*time.Second), "logs:\n%s", p.logs.String())
	assert.Contains(t, p.logs.String(), "did not stop within SHUTDOWN_TIMEOUT")
}
