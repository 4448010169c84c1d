package lab_test

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
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

// newLabEnv runs the whole shop in-process for one test, on its own database, Redis prefix and broker
// names: orders in lab mode (with its relay, sweeper and reaper), payments-mock, and points-consumer.
func newLabEnv(t *testing.T, mutate func(*config.Orders)) *lab.Env {
	t.Helper()
	env := testenv.New(t, testenv.Options{MaxConns: 12})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logger := slog.New(slog.DiscardHandler)
	cfg := config.DefaultOrders()
	secret := []byte(cfg.PaymentWebhookSecret)

	// payments-mock
	mreg := prometheus.NewRegistry()
	mock, err := paymock.New(paymock.Config{Secret: secret, AutoApproveDelay: 20 * time.Millisecond,
		RetrySchedule:   []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond},
		CallbackTimeout: 5 * time.Second, CreateTimeoutDelay: 2 * time.Second, DeliveryLogLimit: 10000,
		Chaos: paymock.Chaos{Duplicates: 1, Parallel: true, Seed: 42}}, logger, mreg)
	require.NoError(t, err)
	me := httpserver.New(logger, mreg, 1<<20)
	mock.Register(me)
	msrv := httptest.NewServer(me)
	t.Cleanup(func() {
		msrv.Close()
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = mock.Close(c)
	})

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

// runScenario runs one scenario and requires that the unsafe side reproduced the failure and the
// guarded side held.
func runScenario(t *testing.T, env *lab.Env, id string) lab.Result {
	t.Helper()
	sc, err := lab.Select([]string{id})
	require.NoError(t, err)
	r := lab.Run(context.Background(), env, sc, nil)[0]
	t.Logf("%s: unsafe %+v; guarded %+v; err %q", r.ID, r.Unsafe, r.Guarded, r.Error)
	require.Empty(t, r.Error)
	require.True(t, r.Unsafe.Reproduced, "unsafe side did not show the failure: %s", r.Unsafe.Detail)
	require.True(t, r.Guarded.OK, "guarded side broke an invariant: %s", r.Guarded.Detail)
	return r
}

func TestS1(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S1")
	require.EqualValues(t, -6, r.Unsafe.Measured["stock_delta"])
	require.EqualValues(t, -2, r.Guarded.Measured["stock_delta"])
	require.EqualValues(t, 3, r.Guarded.Measured["received"])
	require.EqualValues(t, 1, r.Guarded.Measured["applied"])
}

func TestIncidentGuardedHoldsAndUnsafeShowsDamage(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	ctx := context.Background()

	rep, err := lab.Incident(ctx, env, 10, false, nil)
	require.NoError(t, err)
	t.Logf("guarded: %+v", rep)
	require.Empty(t, rep.Violations)
	require.EqualValues(t, 30, rep.Callbacks.Received, "3 copies of each callback arrived")
	require.EqualValues(t, 10, rep.Callbacks.Applied)
	require.Equal(t, rep.WantStock, rep.StockDelta)
	require.EqualValues(t, -19, rep.StockDelta) // quantities 1,2,3,1,2,3,1,2,3,1
	require.Equal(t, rep.WantPoints, rep.PointsDelta)

	bad, err := lab.Incident(ctx, env, 10, true, nil)
	require.NoError(t, err)
	t.Logf("unsafe: %+v", bad)
	require.NotEmpty(t, bad.Violations)
	require.EqualValues(t, -57, bad.StockDelta, "every copy deducted")
	require.Equal(t, 3*bad.WantPoints, bad.PointsDelta, "every copy credited")
	require.EqualValues(t, 30, bad.Callbacks.Applied)
}
