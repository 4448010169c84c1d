package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"idemshop/internal/outbox"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// The relay's database connection goes half-open (a proxy or a network that keeps both sockets open and
// forwards nothing): the relay's statement must give up and the next drain, on a new connection, must
// publish what was paid meanwhile. Before the pool's answer deadline (2026-12-06) the relay waited on
// that connection for good, in silence: orders PAID, their events never sent (a helper's finding, on the
// binaries). The postgres package proves the deadline itself; this proves the relay converges through it.
func TestRelayPublishesAfterItsDatabaseConnectionWentHalfOpen(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	proxy, viaProxy := tcpproxy.ForURL(t, env.DatabaseURL)
	db, err := postgres.Open(t.Context(), viaProxy, postgres.Options{StatementTimeout: 300 * time.Millisecond, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(db) })
	r, err := outbox.NewRelay(db, relayConfig(env.AMQPURL, top), logger(), prometheus.NewRegistry())
	require.NoError(t, err)
	runInBackground(t, r.Run)
	// Cleanups run last first: the proxy's connections close before the relay is stopped, so a relay
	// stuck on a half-open one (the guard removed) fails this test instead of hanging it.
	t.Cleanup(proxy.Cut)
	startConsumer(t, env, top)
	// A statement gives up 300 ms + postgres.AnswerMargin after it was written; the rest is slack.
	publishedThroughAStall(t, env, proxy, 5, 10, 10*time.Second, "the rows paid after the stall published, on a new connection")
}

// The broker stalls (both sockets open, nothing answered) while the relay has rows to publish: the
// confirm wait gives up at ConfirmTimeout, and closing that connection must not wait for the broker's
// answer longer than that either. amqp091's Close waited for it until the heartbeat gave up, and the
// relay reconnected 11-13 s after its confirm timeout (a helper's finding, 2026-12-06).
func TestRelayReconnectsSoonAfterTheBrokerStalled(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	proxy, viaProxy := tcpproxy.ForURL(t, env.AMQPURL)
	startRelay(t, env, viaProxy, top, nil) // ConfirmTimeout 2 s
	startConsumer(t, env, top)
	// 2 s for the confirms, at most 2 s for the close, then a new connection: 8 s leaves 4 s of slack,
	// and the heartbeat's ~12 s is past it.
	publishedThroughAStall(t, env, proxy, 3, 6, 8*time.Second,
		"the rows paid during the stall published on a new connection within two ConfirmTimeouts")
}

// publishedThroughAStall pays orders 1..before and waits for their events (the relay is connected
// through proxy), makes every connection proxy holds half-open (new ones pass), pays orders
// before+1..total, and requires their events published within limit and every order credited once.
func publishedThroughAStall(t *testing.T, env *testenv.Env, proxy *tcpproxy.Proxy, before, total int64, limit time.Duration, msg string) {
	t.Helper()
	insertPaid(t, env.DB, 1, before)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published through the proxy")
	proxy.Stall()
	insertPaid(t, env.DB, before+1, total)
	waitFor(t, limit, func() bool { return pending(t, env.DB) == 0 }, msg)
	waitCount(t, 10*time.Second, total, func() int64 { return ledgerRows(t, env.DB) }, "all credited")
	assertCreditedOnce(t, env.DB, total)
}

// SIGTERM with the broker stalled: the relay stops within ConfirmTimeout of its cancel, so orders
// drains within SHUTDOWN_TIMEOUT. With amqp091's Close it took 12 s (SHUTDOWN_TIMEOUT=3s; a helper's
// finding, 2026-12-06).
func TestRelayStopsSoonWhileTheBrokerIsStalled(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	proxy, viaProxy := tcpproxy.ForURL(t, env.AMQPURL)
	reg := prometheus.NewRegistry()
	r, err := outbox.NewRelay(env.DB, relayConfig(viaProxy, top), logger(), reg) // ConfirmTimeout 2 s
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(proxy.Cut) // a relay that never stops (the guard removed) is freed, and the test fails
	insertPaid(t, env.DB, 1, 1)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "connected: published through the proxy")

	proxy.Stall()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second): // 2 s for the close, 3 s of slack; the heartbeat's ~12 s is past it
		t.Fatal("the relay did not stop within 5 s of its cancel with the broker stalled")
	}
}
