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
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"idemshop/internal/platform/config"
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

	db, err := postgres.Open(ctx, cfg.Postgres.URL, postgres.Options{
		LockTimeout: cfg.LockTimeout, StatementTimeout: cfg.StatementTimeout, MaxConns: cfg.MaxConns, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer postgres.Close(db)
	redisx.UseLogger(logger)
	rdb, err := redisx.Open(cfg.Redis.URL, cfg.Redis.Timeout)
	if err != nil {
		return err
	}
	defer rdb.Close()

	var fault func(points.FaultPoint)
	if cfg.Lab && cfg.Fault != "" { // config refuses POINTS_FAULT without ORDERS_LAB
		if fault, err = points.LabFault(points.FaultPoint(cfg.Fault), logger); err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	consumer, err := points.NewConsumer(db, rdb, points.ConsumerConfig{
		AMQPURL: cfg.AMQPURL, Topology: rabbitmq.OrderPaidTopology().WithPrefix(cfg.NamePrefix),
		Prefetch: cfg.Prefetch, BatchSize: cfg.BatchSize, BatchWait: cfg.BatchWait, KeyPrefix: cfg.Redis.KeyPrefix,
		LeaseTTL: cfg.LeaseTTL, DoneTTL: cfg.DoneTTL, LeasePoll: cfg.LeasePoll,
		ReconnectMin: cfg.Reconnect.Min, ReconnectMax: cfg.Reconnect.Max, Fault: fault,
	}, logger, reg)
	if err != nil {
		return err
	}

	e := httpserver.New(logger, reg, cfg.BodyLimitBytes)
	httpserver.MountOps(e, reg, cfg.ReadyProbeTimeout,
		httpserver.Check{Name: "postgres", Critical: true, Probe: func(ctx context.Context) error {
			return postgres.Ping(ctx, db)
		}},
		// The consumer cannot work without the broker: critical here, unlike in orders.
		httpserver.Check{Name: "rabbitmq", Critical: true, Probe: func(ctx context.Context) error {
			return rabbitmq.Ping(ctx, cfg.AMQPURL)
		}},
		// Redis is layer 1 only: without it every message goes to the ledger, slower but still once.
		httpserver.Check{Name: "redis", Critical: false, Probe: func(ctx context.Context) error {
			return rdb.Ping(ctx).Err()
		}},
	)

	logger.Info("points-consumer starting", "addr", cfg.HTTPAddr, "lab", cfg.Lab, "prefetch", cfg.Prefetch,
		"batch_size", cfg.BatchSize, "lease_ttl", cfg.LeaseTTL)
	var workers sync.WaitGroup
	workers.Go(func() { _ = consumer.Run(ctx) })
	err = httpserver.Run(ctx, e, cfg.HTTP.Server(cfg.HTTPAddr), nil)
	// On SIGTERM the consumer cancels its subscription, finishes the messages it holds and returns;
	// connections close after it (deferred, in reverse order).
	stop()
	workers.Wait()
	logger.Info("points-consumer stopped")
	return err
}
