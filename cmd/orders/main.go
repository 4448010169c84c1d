// Command orders is the shop's HTTP API. Usage:
//
//	orders               serve (migrates first unless MIGRATE_ON_START=false)
//	orders migrate       create the database if missing, apply migrations, exit
//	orders sweep --once  resolve stuck pay records and send pending refunds once, exit
//	orders reconcile --once  compare orders and unfinished pay records with the platform once, exit
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"idemshop/internal/ordersapp"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/redisx"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.LoadOrders()
	if err != nil {
		return err
	}
	logger, err := logging.New(os.Stderr, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cmd := "serve"
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	switch {
	case cmd == "migrate":
		return postgres.EnsureAndMigrate(ctx, cfg.Postgres.URL, logger)
	case (cmd == "sweep" || cmd == "reconcile") && len(os.Args) == 3 && os.Args[2] == "--once":
	case cmd == "serve":
	default:
		return fmt.Errorf("unknown command %q (want serve, migrate, sweep --once or reconcile --once)", strings.Join(os.Args[1:], " "))
	}

	if cfg.MigrateOnStart {
		if err := postgres.EnsureAndMigrate(ctx, cfg.Postgres.URL, logger); err != nil {
			return err
		}
	}
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	app, err := ordersapp.New(ordersapp.Deps{Config: cfg, Logger: logger, DB: db, Redis: rdb, Registry: reg})
	if err != nil {
		return err
	}

	switch cmd {
	case "sweep":
		done, err := app.Sweeper.RunOnce(ctx)
		logger.Info("sweep done", "results", done)
		return err
	case "reconcile":
		rep, err := app.Reconciler.RunOnce(ctx)
		logger.Info("reconcile done", "orders", rep.Orders, "records", rep.Records)
		return err
	}

	var workers sync.WaitGroup
	workers.Go(func() { app.RunWorkers(ctx) })
	logger.Info("orders starting", "addr", cfg.HTTPAddr, "lab", cfg.Lab)
	err = httpserver.Run(ctx, app.Echo, cfg.HTTP.Server(cfg.HTTPAddr), nil)
	stop() // the server is down: stop the workers too, then close connections (deferred, in reverse order)
	workers.Wait()
	logger.Info("orders stopped")
	return err
}
