// Package ordersapp assembles the orders HTTP application from its parts. cmd/orders and the tests both
// call New, so tests exercise the same Echo instance, middleware chain and routes that production serves.
package ordersapp

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"idemshop/internal/auth"
	"idemshop/internal/callback"
	"idemshop/internal/decisions"
	"idemshop/internal/idempotency"
	"idemshop/internal/labview"
	"idemshop/internal/orders"
	"idemshop/internal/outbox"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/fault"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
	"idemshop/internal/sweeper"
)

// Deps are the opened connections and settings the application runs on.
type Deps struct {
	Config   config.Orders
	Logger   *slog.Logger
	DB       *gorm.DB
	Redis    *redis.Client
	Registry *prometheus.Registry
	// Runner overrides the idempotency layer of POST /v1/orders; nil means the real Guard. Benchmarks
	// set it to a baseline without the key layer.
	Runner idempotency.Runner
	// PayFault is a test hook at the pay flow's crash windows (pay.Points; nil: none).
	PayFault fault.Hook

	// decisions is where the guards report what they decide: the live view's bus with ORDERS_LAB=true
	// (New sets it), nil otherwise, so production guards report to nobody.
	decisions *decisions.Bus
	// relay is the outbox relay of this process (New builds it first): the writers of outbox rows wake
	// it after their commit (Relay.Wake).
	relay *outbox.Relay
}

// sink is the guards' decisions.Sink: nil unless the live view runs (a nil *Bus would be a non-nil
// interface, so it is turned into a nil one here).
func (d Deps) sink() decisions.Sink {
	if d.decisions == nil {
		return nil
	}
	return d.decisions
}

// App is the assembled application: the HTTP handler plus its background workers.
type App struct {
	Echo   *echo.Echo
	Reaper *idempotency.Reaper
	// OutboxReaper deletes published outbox rows after OUTBOX_RETENTION.
	OutboxReaper *outbox.Reaper
	// AuditReaper deletes payment_callbacks audit rows after CALLBACK_AUDIT_RETENTION.
	AuditReaper *callback.AuditReaper
	Sweeper     *sweeper.Sweeper
	// Reconciler compares orders with the payment platform and moves them to its state.
	Reconciler *sweeper.Reconciler
	Relay      *outbox.Relay
	live       *labview.Live // GET /lab; nil unless ORDERS_LAB=true
	prober     *postgres.Prober
	cfg        config.Orders
	logger     *slog.Logger
}

// New builds the application. It opens nothing: every connection comes in through d.
func New(d Deps) (*App, error) {
	if d.Logger == nil || d.DB == nil || d.Redis == nil || d.Registry == nil {
		return nil, errors.New("ordersapp: New needs Logger, DB, Redis and Registry")
	}
	cfg := d.Config
	var live *labview.Live
	if cfg.Lab {
		var err error
		if d.decisions, live, err = newLabLive(d); err != nil {
			return nil, err
		}
	}
	// The relay first: every writer of outbox rows below (the callback routes, and the lab's) wakes it
	// after its commit.
	relay, err := outbox.NewRelay(d.DB, outbox.RelayConfig{
		AMQPURL:        cfg.AMQPURL,
		Topology:       rabbitmq.OrderPaidTopology().WithPrefix(cfg.NamePrefix),
		BatchSize:      cfg.OutboxBatchSize,
		PollInterval:   cfg.OutboxPollInterval,
		ConfirmTimeout: cfg.OutboxConfirmTimeout,
		BatchWait:      cfg.OutboxBatchWait,
		ReconnectMin:   cfg.Reconnect.Min, ReconnectMax: cfg.Reconnect.Max,
		Decisions: d.sink(),
	}, d.Logger, d.Registry)
	if err != nil {
		return nil, err
	}
	d.relay = relay
	idemMetrics := idempotency.NewMetricsWithSink(d.Registry, d.sink())
	runner := d.Runner
	if runner == nil {
		g, err := idempotency.NewGuard(d.DB, idemMetrics, idempotency.GuardOptions{})
		if err != nil {
			return nil, err
		}
		runner = g
	}
	reaper, err := idempotency.NewReaper(d.DB, idemMetrics, d.Logger, cfg.IdempotencyRetention, cfg.ReaperBatch)
	if err != nil {
		return nil, err
	}
	outboxReaper, err := outbox.NewReaper(d.DB, d.Logger, d.Registry, cfg.OutboxRetention, cfg.ReaperBatch)
	if err != nil {
		return nil, err
	}
	auditReaper, err := callback.NewAuditReaper(d.DB, d.Logger, d.Registry, cfg.CallbackAuditRetention, cfg.ReaperBatch)
	if err != nil {
		return nil, err
	}
	authn, err := auth.New(d.DB)
	if err != nil {
		return nil, err
	}
	repo, err := orders.NewRepository(d.DB)
	if err != nil {
		return nil, err
	}
	callbackRoute, err := newCallbackRoute(d, repo, callback.Guarded, nil, d.Registry)
	if err != nil {
		return nil, err
	}
	orderRoutes, err := orders.NewHandler(repo, runner, callbackRoute.Service())
	if err != nil {
		return nil, err
	}

	e := httpserver.New(d.Logger, d.Registry, cfg.BodyLimitBytes, postgres.TranslateError)
	// A request's work ends before HTTP_WRITE_TIMEOUT, after which its answer could no longer be written
	// (httpserver.WorkTime); the live view's stream keeps its own write deadlines. (The pay flow detaches
	// after its claim.)
	e.Use(httpserver.Deadline(cfg.HTTP.WriteTimeout, "/lab/events"))
	// PostgreSQL is probed on a connection of its own (dialed at the first probe), not through the pool:
	// a busy pool is not a database that is down.
	prober, err := postgres.NewProber(cfg.Postgres.URL)
	if err != nil {
		return nil, err
	}
	httpserver.MountOps(e, d.Registry, cfg.ReadyProbeTimeout,
		httpserver.Check{Name: "postgres", Critical: true, Probe: prober.Ping},
		// Redis is an efficiency layer: without it requests are slower, never wrong, so it only degrades.
		httpserver.Check{Name: "redis", Critical: false, Probe: func(ctx context.Context) error {
			return d.Redis.Ping(ctx).Err()
		}},
		// RabbitMQ only carries events the outbox already holds durably, so its loss degrades too: taking
		// the shop out of service because the broker is down would defeat the outbox.
		httpserver.Check{Name: "rabbitmq", Critical: false, Probe: func(ctx context.Context) error {
			return rabbitmq.Ping(ctx, cfg.AMQPURL)
		}},
		// A broker that answers is not events that flow: the relay says whether its last drain went
		// through (it degrades too, for the same reason: the rows wait in the outbox).
		httpserver.Check{Name: "outbox", Critical: false, Probe: func(context.Context) error {
			return relay.Health()
		}},
	)
	callbackRoute.Mount(e) // signed, not bearer-authenticated: outside the /v1 group
	v1 := e.Group("/v1", authn.Middleware())
	orderRoutes.Mount(v1)
	idemMetrics.ExpectRoute("/v1/orders") // POST, behind the Idempotency-Key runner
	pages, err := mountRedeem(e, v1, d)
	if err != nil {
		return nil, err
	}
	sweeper, reconciler, err := mountPay(v1, d, repo, idemMetrics, callbackRoute.Service())
	if err != nil {
		return nil, err
	}
	if cfg.Lab {
		err := mountLab(labParts{d: d, e: e, v1: e.Group("/lab/unsafe/v1", authn.Middleware()), authn: authn,
			repo: repo, idemMetrics: idemMetrics, settler: callbackRoute.Service(), redeemView: pages,
			live: live})
		if err != nil {
			return nil, err
		}
	}
	pointsRoutes, err := points.NewHandler(d.DB)
	if err != nil {
		return nil, err
	}
	pointsRoutes.Mount(v1)
	return &App{Echo: e, Reaper: reaper, OutboxReaper: outboxReaper, AuditReaper: auditReaper, Sweeper: sweeper, Reconciler: reconciler, Relay: relay, live: live, prober: prober, cfg: cfg, logger: d.Logger}, nil
}

// newCallbackRoute returns a callback route that applies with applier (callback.Guarded, or a lab twin)
// behind orderLock (nil but for S5's twin), and counts in reg.
func newCallbackRoute(d Deps, repo *orders.Repository, applier callback.Applier, orderLock callback.OrderLock,
	reg prometheus.Registerer) (*callback.Handler, error) {
	svc, err := callback.NewService(d.DB, repo, paysig.Verifier{Secret: []byte(d.Config.PaymentWebhookSecret)},
		orderLock, callback.NewMetrics(reg), applier, d.sink(), d.relay.Wake)
	if err != nil {
		return nil, err
	}
	return callback.NewHandler(svc)
}

// RunWorkers runs the background workers until ctx is done, and returns when all have stopped.
func (a *App) RunWorkers(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { a.Reaper.Run(ctx, a.cfg.ReaperInterval) })
	wg.Go(func() { a.OutboxReaper.Run(ctx, a.cfg.ReaperInterval) })
	wg.Go(func() { a.AuditReaper.Run(ctx, a.cfg.ReaperInterval) })
	wg.Go(func() { a.Sweeper.Run(ctx, a.cfg.SweepInterval) })
	wg.Go(func() { a.Reconciler.Run(ctx, a.cfg.ReconcileInterval) })
	wg.Go(func() {
		if err := a.Relay.Run(ctx); err != nil {
			a.logger.Error("outbox relay stopped", "err", err)
		}
	})
	if a.live != nil {
		wg.Go(func() { a.live.Run(ctx) }) // ends the open event streams at shutdown
	}
	wg.Wait()
	a.prober.Close()
}
