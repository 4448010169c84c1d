// Package labtest runs the whole shop in-process for tests: orders in lab mode with its workers,
// payments-mock and a points consumer, on the test's own database, Redis prefix and broker names. The
// lab's scenario tests and the bench's test share it.
package labtest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
	"idemshop/internal/ordersapp"
	"idemshop/internal/paymock"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

// NewEnv runs the whole shop in-process for one test, on its own database, Redis prefix and broker
// names: orders in lab mode (with its relay, sweeper and reaper), payments-mock, and points-consumer.
// Env.Keep is left off, as `loadtest` leaves it; the lab's scenario tests set it themselves, to read a
// scenario's rows back after it ran.
func NewEnv(t *testing.T, mutate func(*config.Orders)) *lab.Env {
	t.Helper()
	env := testenv.New(t, testenv.Options{MaxConns: 12})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logger := slog.New(slog.DiscardHandler)
	cfg := config.DefaultOrders()
	secret := []byte(cfg.PaymentWebhookSecret)

	// payments-mock
	mock := testenv.StartPaymentsMock(t, paymock.Config{Secret: secret, AutoApproveDelay: 20 * time.Millisecond,
		RetrySchedule:   []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond},
		CallbackTimeout: 5 * time.Second, CreateTimeoutDelay: 2 * time.Second, DeliveryLogLimit: 10000,
		Chaos: paymock.Chaos{Duplicates: 1, Parallel: true, Seed: 42}})
	msrv := mock.Server

	// orders, in lab mode
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	for _, base := range []string{"idemshop.events", "points.order-paid", "idemshop.events.dlx", "points.order-paid.dlq"} {
		env.Queue(base) // deleted at cleanup
	}
	cfg.Lab = true
	cfg.Postgres.URL, cfg.Redis.URL, cfg.Redis.KeyPrefix = env.DatabaseURL, env.RedisURL, env.Prefix
	cfg.AMQPURL, cfg.NamePrefix = env.AMQPURL, env.Prefix
	cfg.PaymentsURL = msrv.URL
	cfg.CallbackURL = "http://" + ln.Addr().String() + "/v1/payments/callback"
	cfg.SweepInterval, cfg.OutboxPollInterval = 200*time.Millisecond, 20*time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	app, err := ordersapp.New(ordersapp.Deps{Config: cfg, Logger: logger, DB: env.DB, Redis: env.Redis,
		Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: app.Echo}}
	srv.Start()
	t.Cleanup(srv.Close)
	workersDone := make(chan struct{})
	go func() { app.RunWorkers(ctx); close(workersDone) }()
	t.Cleanup(func() { cancel(); <-workersDone })

	// points-consumer
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

	return &lab.Env{OrdersURL: srv.URL, PaymentsURL: msrv.URL, DB: env.DB, Redis: env.Redis,
		RedisPrefix: env.Prefix, AMQPURL: env.AMQPURL, AMQPPrefix: env.Prefix, DatabaseURL: env.DatabaseURL,
		RedisURL: env.RedisURL, Secret: secret, HTTP: &http.Client{Timeout: 10 * time.Second},
		Log: logger, Seed: 42, Quiet: 15 * time.Second}
}
