package outbox_test

import (
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

	insertPaid(t, env.DB, 1, 5)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published through the proxy")
	proxy.Stall() // every connection the relay holds now is half-open; new ones pass
	insertPaid(t, env.DB, 6, 10)
	// A statement gives up 300 ms + postgres.AnswerMargin after it was written; the rest is slack.
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 },
		"the rows paid after the stall published, on a new connection")
	waitCount(t, 10*time.Second, 10, func() int64 { return ledgerRows(t, env.DB) }, "all credited")
	assertCreditedOnce(t, env.DB, 10)
}
