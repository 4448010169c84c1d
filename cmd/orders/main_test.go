package main_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/testenv"
)

// End to end: the built binary creates its missing database, migrates, serves, replays a retried
// create, and exits 0 on SIGTERM.
func TestOrdersBinaryEndToEnd(t *testing.T) {
	t.Parallel()
	svc := testenv.Find(t)
	bin := testenv.Build(t, "idemshop/cmd/orders")

	name := fmt.Sprintf("idemshop_test_%d_e2e", os.Getpid())
	dbURL := strings.Replace(svc.PostgresURL, "/postgres?", "/"+name+"?", 1)
	t.Cleanup(func() {
		ctx := context.Background()
		if conn, err := pgx.Connect(ctx, svc.PostgresURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			conn.Close(ctx)
		}
	})
	addr := testenv.FreeAddr(t)
	prefix := cleanPrefix(t, svc, "e2e") // not the shop's own names on the shared broker and Redis
	var logs testenv.Output
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HTTP_ADDR="+addr, "DATABASE_URL="+dbURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix, "LOG_FORMAT=json")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	base := "http://" + addr
	testenv.WaitReady(t, base, 30*time.Second, &logs)

	post := func() (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/orders", strings.NewReader(`{"product_id":2,"quantity":1}`))
		req.Header.Set("Authorization", "Bearer carol-token")
		req.Header.Set("Idempotency-Key", "e2e-1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	r1, b1 := post()
	r2, b2 := post()
	assert.Equal(t, http.StatusCreated, r1.StatusCode, b1)
	assert.Equal(t, http.StatusCreated, r2.StatusCode)
	assert.Equal(t, b1, b2)
	assert.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		assert.NoError(t, err, "graceful shutdown exits 0; logs:\n%s", logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("orders did not stop within 20s of SIGTERM; logs:\n%s", logs.String())
	}
	assert.Contains(t, logs.String(), `"request_id"`, "request lines carry the request id")
	assert.Contains(t, logs.String(), "orders stopped")
}

// A command that takes no arguments refuses them instead of ignoring them: `orders migrate now`
// is a typo, not a migration, and nothing is opened.
func TestCommandsRefuseExtraArguments(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	for _, args := range [][]string{{"migrate", "now"}, {"serve", "--port", "1"}, {"sweep", "--once", "again"}, {"sweep"}} {
		cmd := exec.Command(bin, args...)
		// A server that does not exist: a command that got past its arguments would fail differently.
		cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://nobody@127.0.0.1:1/none?sslmode=disable", "HTTP_ADDR=127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", args, out)
		assert.Equal(t, 1, ee.ExitCode(), "%v", args)
		assert.Contains(t, string(out), fmt.Sprintf("unknown command %q", strings.Join(args, " ")), "%v", args)
	}
}

// The one-shot commands do not create the database they are pointed at: a mistyped DATABASE_URL is an
// error, not a new empty shop with nothing to sweep and an exit status of 0.
func TestOneShotCommandsDoNotCreateTheDatabase(t *testing.T) {
	t.Parallel()
	svc := testenv.Find(t)
	bin := testenv.Build(t, "idemshop/cmd/orders")
	name := fmt.Sprintf("idemshop_test_%d_typo", os.Getpid())
	dbURL := strings.Replace(svc.PostgresURL, "/postgres?", "/"+name+"?", 1)
	exists := func() bool {
		conn, err := pgx.Connect(context.Background(), svc.PostgresURL)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		var n int
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n))
		return n > 0
	}
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), svc.PostgresURL); err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			conn.Close(context.Background())
		}
	})
	for _, args := range [][]string{{"sweep", "--once"}, {"reconcile", "--once"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%v: %s", args, out)
		assert.Contains(t, string(out), fmt.Sprintf("database %q does not exist", name), "%v", args)
		assert.False(t, exists(), "%v created the database", args)
	}
}

// A one-shot command ends within ONCE_TIMEOUT even when the database accepts its connection and never
// answers (paused, or a black hole in between): the connection's own bound (connect_timeout, 3 s
// here) is not what ends it, and the command says which limit did.
func TestOneShotCommandsEndWithinOnceTimeout(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	addr := testenv.SilentListener(t)
	for _, args := range [][]string{{"migrate"}, {"sweep", "--once"}, {"reconcile", "--once"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://postgres@"+addr+"/shop?connect_timeout=3&sslmode=disable",
			"ONCE_TIMEOUT=500ms")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", args, out)
		assert.Equal(t, 1, ee.ExitCode(), "%v", args)
		require.Contains(t, string(out), "did not finish within ONCE_TIMEOUT (500ms)", "%v", args)
	}
}
