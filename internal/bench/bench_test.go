package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"idemshop/internal/bench"
	"idemshop/internal/lab"
	"idemshop/internal/ordersapp"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

// TestRunShapeAndInvariants runs every measure, growth mode included, for a tiny duration against
// the shop in-process, and checks what does not depend on the machine: the JSON shape of DESIGN.md
// and zero violations. No figure is asserted.
func TestRunShapeAndInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL, Redis and RabbitMQ")
	}
	env := newShop(t)
	rep, err := bench.Run(context.Background(), env, bench.Config{Duration: 300 * time.Millisecond, Concurrency: 4,
		OutboxRate: 100, Growth: true, GrowthSizes: []int64{200, 1000}})
	require.NoError(t, err)

	var text bytes.Buffer
	bench.WriteText(&text, rep)
	t.Log("\n" + text.String())
	for _, r := range rep.Results {
		require.Empty(t, r.Error, r.Name)
		require.Zero(t, r.Violations, "%s: %v", r.Name, r.ViolationDetails)
	}
	require.True(t, rep.Passed())

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var shape struct {
		Results []map[string]any `json:"results"`
	}
	require.NoError(t, json.Unmarshal(b, &shape))
	var names []string
	for _, r := range shape.Results {
		for _, k := range []string{"name", "rps", "baseline_rps", "ratio", "p50_ms", "p99_ms", "errors", "violations"} {
			require.Contains(t, r, k)
		}
		names = append(names, r["name"].(string))
	}
	require.Equal(t, []string{"create_order_fresh", "create_order_replay", "callback_storm", "points_consumer",
		"outbox_lag", "create_p99_growth"}, names)
	require.Len(t, rep.Growth, 2)

	var page bytes.Buffer
	require.NoError(t, bench.WriteHTML(&page, rep))
	require.Contains(t, page.String(), "<svg")
	require.NotContains(t, page.String(), "<script", "static report: no scripts, no CDN")
}

func TestRunRefusesRemoteTargets(t *testing.T) {
	t.Parallel()
	_, err := bench.Run(context.Background(), &lab.Env{OrdersURL: "http://example.com:8080"},
		bench.Config{Duration: time.Second})
	require.ErrorContains(t, err, "loopback")
}

// newShop runs orders (lab mode, with its relay), payments-mock's absence notwithstanding (the bench
// sends callbacks itself), and a points consumer in-process, on a database, Redis prefix and broker
// names of this test's own.
func newShop(t *testing.T) *lab.Env {
	t.Helper()
	env := testenv.New(t, testenv.Options{MaxConns: 12})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logger := slog.New(slog.DiscardHandler)
	cfg := config.DefaultOrders()
	for _, base := range []string{"idemshop.events", "points.order-paid", "idemshop.events.dlx", "points.order-paid.dlq"} {
		env.Queue(base) // deleted at cleanup
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg.Lab = true
	cfg.Postgres.URL, cfg.Redis.URL, cfg.Redis.KeyPrefix = env.DatabaseURL, env.RedisURL, env.Prefix
	cfg.AMQPURL, cfg.NamePrefix = env.AMQPURL, env.Prefix
	cfg.CallbackURL = "http://" + ln.Addr().String() + "/v1/payments/callback"
	cfg.OutboxPollInterval = 20 * time.Millisecond
	app, err := ordersapp.New(ordersapp.Deps{Config: cfg, Logger: logger, DB: env.DB, Redis: env.Redis,
		Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: app.Echo}}
	srv.Start()
	t.Cleanup(srv.Close)
	workersDone := make(chan struct{})
	go func() { app.RunWorkers(ctx); close(workersDone) }()
	t.Cleanup(func() { cancel(); <-workersDone })

	consumer, err := points.NewConsumer(env.DB, env.Redis, points.ConsumerConfig{
		AMQPURL: env.AMQPURL, Topology: rabbitmq.OrderPaidTopology().WithPrefix(env.Prefix),
		Prefetch: 50, BatchSize: 20, BatchWait: 5 * time.Millisecond, KeyPrefix: env.Prefix,
		LeaseTTL: 2 * time.Second, DoneTTL: time.Hour, LeasePoll: 50 * time.Millisecond,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second,
	}, logger, prometheus.NewRegistry())
	require.NoError(t, err)
	consumerDone := make(chan struct{})
	go func() { _ = consumer.Run(ctx); close(consumerDone) }()
	t.Cleanup(func() { cancel(); <-consumerDone })

	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"))
	return &lab.Env{OrdersURL: srv.URL, DB: env.DB, Redis: env.Redis, RedisPrefix: env.Prefix, AMQPURL: env.AMQPURL,
		AMQPPrefix: env.Prefix, DatabaseURL: env.DatabaseURL, RedisURL: env.RedisURL,
		Secret: []byte(cfg.PaymentWebhookSecret), HTTP: &http.Client{Timeout: 10 * time.Second}, Log: logger,
		Seed: 42, Quiet: 15 * time.Second}
}
