// Command points-consumer credits loyalty points for paid orders and reverses them for refunded ones:
// it reads order.paid and order.refunded from one RabbitMQ queue and de-duplicates on the business key
// (a Redis lease, then the ledger's unique index). It serves only /healthz, /readyz and /metrics.
// Configuration comes from the environment; see docs/points.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"idemshop/internal/platform/config"
	"idemshop/internal/platform/fault"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/points"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "points-consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 {
		// Refused, not ignored: `points-consumer extra` started consuming.
		return fmt.Errorf("takes no arguments, got %q (its settings are environment variables: docs/points.md)",
			strings.Join(os.Args[1:], " "))
	}
	cfg, err := config.LoadPointsConsumer()
	if err != nil {
		return err
	}
	logger, err := logging.New(os.Stderr, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Values that no waiting can fix stop the process before it listens.
	if err := postgres.CheckURL(cfg.Postgres.URL); err != nil {
		return err
	}
	if err := rabbitmq.CheckURL(cfg.AMQPURL); err != nil {
		return err
	}
	redisx.UseLogger(logger)
	rdb, err := redisx.Open(cfg.Redis.URL, cfg.Redis.Timeout) // connects lazily: never waits
	if err != nil {
		return err
	}
	defer rdb.Close()
	var crash fault.Hook
	if cfg.Lab && cfg.Fault != "" { // config refuses POINTS_FAULT without ORDERS_LAB
		if crash, err = fault.Kill("POINTS_FAULT", fault.Point(cfg.Fault), points.Points, logger); err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Listen at once and answer /healthz while waiting for the database; /readyz says 503 "starting"
	// until then (docs/reliability.md, "Start-up order").
	gate, err := httpserver.ServeEarly(ctx, stop, cfg.HTTP.Server(cfg.HTTPAddr), reg, logger, "points-consumer")
	if err != nil {
		return err
	}
	fail := gate.Fail
	logger.Info("points-consumer starting", "addr", cfg.HTTPAddr, "lab", cfg.Lab, "prefetch", cfg.Prefetch,
		"batch_size", cfg.BatchSize, "lease_ttl", cfg.LeaseTTL)

	// The database belongs to orders, which creates and migrates it: the consumer waits until it
	// exists and is migrated, and never creates it (two creators would race on the schema).
	// A ledger transaction waits on nothing but its own statements: one idle longer than a statement
	// may run has lost its client, and PostgreSQL ends it.
	db, err := postgres.OpenWhenUp(ctx, cfg.Postgres.URL, postgres.Options{
		LockTimeout: cfg.LockTimeout, StatementTimeout: cfg.StatementTimeout, MaxConns: cfg.MaxConns, Logger: logger,
		IdleInTransactionTimeout: cfg.StatementTimeout,
	}, postgres.Wait{
		Backoff: cfg.Startup.Backoff(), Logger: logger, Migrated: true,
		Failed: func(err error) { gate.Waiting("postgres", err) },
	})
	if err != nil {
		return fail(err)
	}
	defer postgres.Close(db)
	gate.Up("postgres")

	// The broker is not waited for here: the consumer's session loop reconnects with its own backoff
	// (AMQP_RECONNECT_*), and /readyz reports rabbitmq down, a critical check, until it answers.
	consumer, err := points.NewConsumer(db, rdb, points.ConsumerConfig{
		AMQPURL: cfg.AMQPURL, Topology: rabbitmq.OrderPaidTopology().WithPrefix(cfg.NamePrefix),
		Prefetch: cfg.Prefetch, BatchSize: cfg.BatchSize, BatchWait: cfg.BatchWait, KeyPrefix: cfg.Redis.KeyPrefix,
		LeaseTTL: cfg.LeaseTTL, DoneTTL: cfg.DoneTTL, LeasePoll: cfg.LeasePoll, TopologyCheck: cfg.TopologyCheck,
		ReconnectMin: cfg.Reconnect.Min, ReconnectMax: cfg.Reconnect.Max, Fault: crash, DrainTimeout: cfg.HTTP.ShutdownTimeout,
		HandBackAfter: cfg.HandBackAfter,
		Reachable:     func(ctx context.Context) error { return postgres.Reachable(ctx, cfg.Postgres.URL) },
		// The server's statement_timeout first; this one for a server that never sees the statement.
		AttemptTimeout: cfg.Postgres.StatementTimeout + 2*time.Second,
	}, logger, reg)
	if err != nil {
		return fail(err)
	}

	prober, err := postgres.NewProber(cfg.Postgres.URL) // its own connection: a busy pool is not a database down
	if err != nil {
		return fail(err)
	}
	defer prober.Close()
	e := httpserver.New(logger, reg, cfg.BodyLimitBytes)
	httpserver.MountOps(e, reg, cfg.ReadyProbeTimeout,
		httpserver.Check{Name: "postgres", Critical: true, Probe: prober.Ping},
		// The consumer cannot work without the broker: critical here, unlike in orders. A broker that
		// answers is not enough: the consumer's own session must be subscribed to its queue (a queue
		// another connection holds exclusively answered "ok" while the session failed in a loop).
		httpserver.Check{Name: "rabbitmq", Critical: true, Probe: func(ctx context.Context) error {
			if err := rabbitmq.Ping(ctx, cfg.AMQPURL); err != nil {
				return err
			}
			return consumer.Subscribed()
		}},
		// Redis is layer 1 only: without it every message goes to the ledger, slower but still once.
		httpserver.Check{Name: "redis", Critical: false, Probe: func(ctx context.Context) error {
			return rdb.Ping(ctx).Err()
		}},
	)
	gate.Open(e)
	logger.Info("points-consumer ready", "addr", gate.Addr().String())

	var workers sync.WaitGroup
	workers.Go(func() { _ = consumer.Run(ctx) })
	err = gate.Wait()
	// On SIGTERM the consumer cancels its subscription, finishes the messages it holds (for
	// SHUTDOWN_TIMEOUT at most; the rest go back to the queue) and returns; connections close after it
	// (deferred, in reverse order).
	stop()
	// The drain is bounded (SHUTDOWN_TIMEOUT), but amqp091's calls to a broker that stopped answering
	// are not: a basic.cancel or a close waits for its answer until the heartbeat gives up, and
	// SIGTERM took 11-26 s at a 3 s SHUTDOWN_TIMEOUT (a helper's finding, 2026-12-06). Past the bound
	// and a margin the process exits anyway; the broker requeues what it held, as after a crash.
	if !httpserver.WaitWithin(&workers, cfg.HTTP.ShutdownTimeout+2*time.Second) {
		logger.Warn("points-consumer: the consumer did not stop within SHUTDOWN_TIMEOUT + 2s (a broker that does not answer?); exiting, and the broker requeues what it held")
		return err
	}
	logger.Info("points-consumer stopped")
	return err
}
