// Command orders is the shop's HTTP API. Usage:
//
//	orders               serve (migrates first unless MIGRATE_ON_START=false)
//	orders migrate       create the database if missing, apply migrations, exit
//	orders sweep --once  resolve stuck pay records and send pending refunds once, exit
//	orders reconcile --once  compare orders and unfinished pay records with the platform once, exit
//	orders teardown [name...]  delete this run's Redis keys and RabbitMQ objects (by prefix), exit
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"idemshop/internal/ordersapp"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/sweeper"
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
	case cmd == "migrate" && len(os.Args) <= 2:
		return withinOnceTimeout(ctx, cfg.OnceTimeout, "migrate", func(ctx context.Context) error {
			return postgres.EnsureAndMigrate(ctx, cfg.Postgres.URL, cfg.MigrateLockTimeout, logger)
		})
	case (cmd == "sweep" || cmd == "reconcile") && len(os.Args) == 3 && os.Args[2] == "--once":
		return withinOnceTimeout(ctx, cfg.OnceTimeout, cmd+" --once", func(ctx context.Context) error {
			return runOnce(ctx, cmd, cfg, logger)
		})
	case cmd == "serve" && len(os.Args) <= 2:
		return serve(ctx, stop, cfg, logger)
	case cmd == "teardown":
		return teardown(ctx, cfg, logger, os.Args[2:])
	default:
		return fmt.Errorf("unknown command %q (want serve, migrate, sweep --once, reconcile --once or teardown)", strings.Join(os.Args[1:], " "))
	}
}

// serve runs the API until ctx ends. It listens at once and answers /healthz while it waits for
// PostgreSQL (docs/reliability.md, "Start-up order"); /readyz says 503 "starting" until the database is
// there, migrated and the application is built. Redis and RabbitMQ are not waited for: Redis is an
// efficiency layer, and the outbox relay reconnects on its own, so both only degrade /readyz.
func serve(ctx context.Context, stop context.CancelFunc, cfg config.Orders, logger *slog.Logger) error {
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	gate, err := httpserver.ServeEarly(ctx, stop, cfg.HTTP.Server(cfg.HTTPAddr), reg, logger, "orders")
	if err != nil {
		return err
	}
	fail := gate.Fail
	logger.Info("orders starting", "addr", cfg.HTTPAddr, "lab", cfg.Lab)

	db, err := postgres.OpenWhenUp(ctx, cfg.Postgres.URL, dbOptions(cfg, logger), postgres.Wait{
		Backoff: cfg.Startup.Backoff(), Logger: logger,
		Failed: func(err error) { gate.Waiting("postgres", err) },
		// orders owns the schema: with MIGRATE_ON_START it creates and migrates the database itself;
		// without it (a separate `orders migrate` job) it waits until that job is done.
		Create: cfg.MigrateOnStart, Migrated: !cfg.MigrateOnStart,
	})
	if err != nil {
		return fail(err)
	}
	defer postgres.Close(db)
	if cfg.MigrateOnStart {
		// Bounded as `orders migrate` is: a database that stopped answering in the middle (a half-open
		// connection: the migration's statements have no timeout, an index may take long) held the
		// start for good, /readyz saying "starting".
		if err := withinOnceTimeout(ctx, cfg.OnceTimeout, "migrate (MIGRATE_ON_START)", func(ctx context.Context) error {
			return postgres.EnsureAndMigrate(ctx, cfg.Postgres.URL, cfg.MigrateLockTimeout, logger)
		}); err != nil {
			return fail(err)
		}
	}
	gate.Up("postgres")
	app, err := ordersapp.New(ordersapp.Deps{Config: cfg, Logger: logger, DB: db, Redis: rdb, Registry: reg})
	if err != nil {
		return fail(err)
	}
	if cfg.Lab {
		logger.Warn(ordersapp.LabWarning)
	}
	gate.Open(app.Echo)
	logger.Info("orders ready", "addr", gate.Addr().String())

	var workers sync.WaitGroup
	workers.Go(func() { app.RunWorkers(ctx) })
	err = gate.Wait()
	stop() // the server is down: stop the workers too, then close connections (deferred, in reverse order)
	// The relay's close waits for a stalled broker up to OUTBOX_CONFIRM_TIMEOUT, after a batch's own
	// confirm wait: SIGTERM took 9-20 s at a 3 s SHUTDOWN_TIMEOUT (a helper's finding, 2026-12-06). Past
	// the bound and a margin orders exits anyway: unpublished rows stay in the outbox for the next relay.
	if !httpserver.WaitWithin(&workers, cfg.HTTP.ShutdownTimeout+2*time.Second) {
		logger.Warn("orders: the workers did not stop within SHUTDOWN_TIMEOUT + 2s (a broker that does not answer?); exiting, and the outbox keeps what was not published")
		return err
	}
	logger.Info("orders stopped")
	return err
}

// dbOptions are the pool's settings. A transaction idle longer than a statement may run, plus the
// outbox relay's wait for its confirms (the one wait inside a transaction of the shop), has lost its
// client: PostgreSQL ends it and releases its locks.
func dbOptions(cfg config.Orders, logger *slog.Logger) postgres.Options {
	return postgres.Options{
		LockTimeout: cfg.LockTimeout, StatementTimeout: cfg.StatementTimeout, MaxConns: cfg.MaxConns, Logger: logger,
		IdleInTransactionTimeout: cfg.StatementTimeout + cfg.OutboxConfirmTimeout,
	}
}

// withinOnceTimeout runs a one-shot command under limit (ONCE_TIMEOUT), and says so when the limit is
// what ended it: a database that accepted the connection and then stopped answering (paused, or a
// black hole in between) would hold the command forever, since statement_timeout is the server's to
// enforce and a scheduled job's context has no deadline of its own.
func withinOnceTimeout(parent context.Context, limit time.Duration, name string, run func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	err := run(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("orders %s did not finish within ONCE_TIMEOUT (%s): %w", name, limit, err)
	}
	return err
}

// runOnce runs one sweep or reconciliation and exits. It does not wait for PostgreSQL: a scheduled
// one-shot job should fail and say so, and the next run will find the database.
func runOnce(ctx context.Context, cmd string, cfg config.Orders, logger *slog.Logger) error {
	if cfg.MigrateOnStart {
		if err := postgres.MigrateExisting(ctx, cfg.Postgres.URL, cfg.MigrateLockTimeout, logger); err != nil {
			return err
		}
	}
	db, err := postgres.Open(ctx, cfg.Postgres.URL, dbOptions(cfg, logger))
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
	app, err := ordersapp.New(ordersapp.Deps{Config: cfg, Logger: logger, DB: db, Redis: rdb, Registry: reg})
	if err != nil {
		return err
	}
	// A run the platform did not answer, or whose repair or refund step failed, changed nothing it
	// asked about; the exit status says so, so that a scheduler sees the records and orders left for
	// the next run.
	// A run that failed part-way says "stopped", not "done" (an operator read "sweep done" above the
	// error that ended it; a helper's finding, 2026-12-06), with what it did before.
	if cmd == "sweep" {
		done, err := app.Sweeper.RunOnce(ctx)
		if err != nil {
			logger.Warn("sweep stopped", "results", done, "err", err)
			return err
		}
		logger.Info("sweep done", "results", done) // refunds log their own lines
		return workLeft(done)
	}
	rep, err := app.Reconciler.RunOnce(ctx)
	if err != nil {
		logger.Warn("reconcile stopped", "orders", rep.Orders, "records", rep.Records, "points", rep.Points, "err", err)
		return err
	}
	logger.Info("reconcile done", "orders", rep.Orders, "records", rep.Records, "points", rep.Points)
	if err == nil && rep.Orders[sweeper.ReconcileUnreachable]+rep.Records[sweeper.ReconcileUnreachable] > 0 {
		err = errors.New("reconcile: the payment platform did not answer; the run stopped there, and the next one asks again")
	}
	if recs, ords := rep.Records[sweeper.ReconcileFailed], rep.Orders[sweeper.ReconcileFailed]; err == nil && recs+ords > 0 {
		// "or went unconfirmed": a COMMIT whose answer was lost counts here too, and may have applied.
		err = fmt.Errorf("reconcile: bringing %d unfinished pay record(s) and %d order(s) to the platform's state failed "+
			"or went unconfirmed (logged above); the next run compares them again", recs, ords)
	}
	if err == nil && rep.Points[sweeper.ReconcileFailed] > 0 {
		err = errors.New("reconcile: the points check failed (logged above); the next run tries again")
	}
	return err
}

// workLeft is the error of a sweep that left work: because the payment platform did not answer
// (stuck pay records PROCESSING for the next sweep, or left to the reconciler after
// SWEEP_MAX_ATTEMPTS; refund requests PENDING for the next sweep) or refused a refund (an alert: a
// person must look), or because a repair or the refund step failed on its own (the database;
// logged). nil when there is none.
func workLeft(done map[string]int) error {
	var left []string
	if n := done[sweeper.RepairUnreachable]; n > 0 {
		left = append(left, fmt.Sprintf("%d stay PROCESSING for the next sweep", n))
	}
	if n := done[sweeper.RepairGaveUp]; n > 0 {
		left = append(left, fmt.Sprintf("%d were asked SWEEP_MAX_ATTEMPTS times and are left to the reconciler (alert=sweeper_gave_up)", n))
	}
	var msgs []string
	if records := done[sweeper.RepairUnreachable] + done[sweeper.RepairGaveUp]; records > 0 {
		msgs = append(msgs, fmt.Sprintf("the payment platform did not answer for %d stuck pay record(s): %s",
			records, strings.Join(left, ", ")))
	}
	if n := done[sweeper.RefundUnanswered]; n > 0 {
		msgs = append(msgs, fmt.Sprintf("the payment platform did not answer %d refund request(s); they stay PENDING for the next sweep", n))
	}
	if n := done[sweeper.RefundRefused]; n > 0 {
		msgs = append(msgs, fmt.Sprintf("the payment platform refused %d refund request(s) (alert=refund_refused above); "+
			"they stay PENDING, sent again after REFUND_RETRY_MIN or longer, until someone settles them by hand", n))
	}
	if n := done[sweeper.RepairFailed]; n > 0 {
		msgs = append(msgs, fmt.Sprintf("the repair of %d stuck pay record(s) failed (logged above); they stay PROCESSING for a later sweep", n))
	}
	if done[sweeper.RefundsFailed] > 0 {
		msgs = append(msgs, "the refund step failed (logged above); the requests it did not send stay PENDING for the next sweep")
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New("sweep: " + strings.Join(msgs, "; "))
}

// redisPrefixOwnsNoDefaultKey refuses a Redis prefix under which teardown would find the shop's own
// keys: the default prefix, a part of it ("idemshop" deletes every idemshop: key) or one inside it.
// (An AMQP prefix that a default exchange or queue name starts with, such as "points.", which covers
// points.order-paid and its messages, is refused by the configuration itself, for every binary: no
// run can use it in the first place.)
func redisPrefixOwnsNoDefaultKey(redisPrefix string) error {
	def := config.DefaultOrders().Redis.KeyPrefix
	switch {
	case redisPrefix == def:
		return fmt.Errorf("teardown refuses REDIS_KEY_PREFIX %q: it is the shop's default prefix, never a run's", def)
	// A prefix that covers the default one ("idemshop", "i") does not load: every binary refuses a
	// Redis prefix that does not end with a separator (config), and "idemshop:" is the only one of its
	// prefixes that does.
	case strings.HasPrefix(redisPrefix, def):
		// Not every such prefix holds shop keys today (idemshop:points: does), but teardown cannot tell
		// a run's keys there from the shop's.
		return fmt.Errorf("teardown refuses REDIS_KEY_PREFIX %q: it lies inside the shop's own prefix %q, where a run's keys cannot be told from the shop's; give a run a prefix outside it (nothing was deleted)", redisPrefix, def)
	}
	return nil
}

// teardown removes what a run under its own prefixes left on the shared Redis and RabbitMQ (scripts/
// demo.sh, bench.sh and soak.sh call it at exit): every key under REDIS_KEY_PREFIX, the shop's topology
// under AMQP_NAME_PREFIX, and each further queue or exchange named in names (the scripts list them
// with rabbitmqctl: the lab declares topologies of its own under the prefix). It refuses to run
// without both prefixes set explicitly, with a Redis prefix that covers the default one
// (redisPrefixOwnsNoDefaultKey; an AMQP prefix that covers a default name does not load), or with a
// name outside AMQP_NAME_PREFIX or one that looks like a flag:
// the defaults are a shop's real names, never a run's. It also refuses while one of the queues has a
// consumer: the stack is still running.
func teardown(parent context.Context, cfg config.Orders, logger *slog.Logger, names []string) error {
	// The environment, not cfg: an empty REDIS_KEY_PREFIX parses as the shop's default prefix.
	if os.Getenv("REDIS_KEY_PREFIX") == "" || os.Getenv("AMQP_NAME_PREFIX") == "" {
		return errors.New("teardown needs REDIS_KEY_PREFIX and AMQP_NAME_PREFIX set to the run's prefixes")
	}
	if err := redisPrefixOwnsNoDefaultKey(cfg.Redis.KeyPrefix); err != nil {
		return err
	}
	// Every argument is checked before anything is deleted: `teardown --help` once deleted a live
	// stack's queue, and the order.paid messages in it with it.
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "-"):
			return fmt.Errorf("teardown takes queue and exchange names, not flags: %q (nothing was deleted)", n)
		case !strings.HasPrefix(n, cfg.NamePrefix):
			return fmt.Errorf("teardown: %q is not under AMQP_NAME_PREFIX %q (nothing was deleted)", n, cfg.NamePrefix)
		}
	}
	top := rabbitmq.OrderPaidTopology().WithPrefix(cfg.NamePrefix)
	var errs []error
	// The broker first, for the check below, under a budget of its own: one that accepts and never
	// answers took the whole 30 s, and the Redis keys were left (a helper's finding, 2026-12-06).
	const brokerBudget = 5 * time.Second
	dctx, dcancel := context.WithTimeout(parent, brokerBudget)
	conn, dialErr := rabbitmq.Dial(dctx, cfg.AMQPURL)
	dcancel()
	if dialErr == nil {
		defer func() { _ = rabbitmq.CloseWithin(conn, brokerBudget) }()
		// The check below gets the same budget: a channel of a broker silent since the handshake waits
		// three heartbeats (30 s), and the Redis keys were left behind it (a helper's finding,
		// 2026-12-06). Past it the connection is closed, and the deletes below report it.
		giveUp := time.AfterFunc(brokerBudget, func() { _ = rabbitmq.CloseWithin(conn, 0) })
		// A queue someone consumes belongs to a stack still running: its points-consumer declares the
		// topology again at once, and teardown said "done" over names that were back 300 ms later (a
		// newcomer's, 2026-12-06). Only a consumer attached now shows: a consumer between two
		// connections, or orders alone, does not, hence "stop the stack first" in the docs. A name it
		// cannot look up (an exclusive queue) is left to the delete, which reports it.
		for _, q := range append([]string{top.Queue, top.DeadLetterQueue}, names...) {
			if n, err := rabbitmq.Consumers(conn, q); err == nil && n > 0 {
				giveUp.Stop()
				return fmt.Errorf("teardown: queue %s has %d consumer(s): stop the stack that uses these prefixes first (nothing was deleted)", q, n)
			}
		}
		giveUp.Stop()
	}
	ctx, cancel := context.WithTimeout(parent, 30*time.Second)
	defer cancel()
	rdb, err := redisx.Open(cfg.Redis.URL, cfg.Redis.Timeout)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := redisx.DeletePrefix(ctx, rdb, cfg.Redis.KeyPrefix); err != nil {
		errs = append(errs, err)
	}
	if dialErr != nil {
		errs = append(errs, fmt.Errorf("delete AMQP objects %s*: %w", cfg.NamePrefix, dialErr))
		return errors.Join(errs...)
	}
	errs = append(errs, rabbitmq.Delete(conn, top), rabbitmq.DeleteNames(conn, names...))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("teardown: not everything was deleted: %w", err)
	}
	logger.Info("teardown done", "redis_prefix", cfg.Redis.KeyPrefix, "amqp_prefix", cfg.NamePrefix, "extra_names", len(names))
	return nil
}
