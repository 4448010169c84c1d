// Package config holds one configuration struct per binary, filled from the environment with
// caarlos0/env and validated at start. A bad value stops the process with a message naming the variable.
package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"idemshop/internal/platform/httpserver"
)

// Log is shared by every binary.
type Log struct {
	Format string `env:"LOG_FORMAT" envDefault:"text"` // text | json
	Level  string `env:"LOG_LEVEL" envDefault:"info"`  // debug | info | warn | error
}

// HTTP holds the server limits shared by every binary. The address is per binary (its default differs).
type HTTP struct {
	ReadHeaderTimeout time.Duration `env:"HTTP_READ_HEADER_TIMEOUT" envDefault:"5s"`
	ReadTimeout       time.Duration `env:"HTTP_READ_TIMEOUT" envDefault:"15s"`
	WriteTimeout      time.Duration `env:"HTTP_WRITE_TIMEOUT" envDefault:"30s"`
	IdleTimeout       time.Duration `env:"HTTP_IDLE_TIMEOUT" envDefault:"60s"`
	ShutdownTimeout   time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"15s"`
	BodyLimitBytes    int64         `env:"BODY_LIMIT_BYTES" envDefault:"1048576"` // 1 MiB
}

// Server returns the httpserver config for addr.
func (h HTTP) Server(addr string) httpserver.Config {
	return httpserver.Config{
		Addr: addr, ReadHeaderTimeout: h.ReadHeaderTimeout, ReadTimeout: h.ReadTimeout,
		WriteTimeout: h.WriteTimeout, IdleTimeout: h.IdleTimeout, ShutdownTimeout: h.ShutdownTimeout,
		BodyLimit: h.BodyLimitBytes,
	}
}

// Postgres holds the database connection settings.
type Postgres struct {
	URL string `env:"DATABASE_URL" envDefault:"postgres://postgres@127.0.0.1:5432/idemshop?sslmode=disable"`
	// LockTimeout bounds every lock wait, including the wait of a duplicate Idempotency-Key insert on the
	// first request's uncommitted row: past it the duplicate is answered 409 in flight.
	LockTimeout      time.Duration `env:"DB_LOCK_TIMEOUT" envDefault:"2s"`
	StatementTimeout time.Duration `env:"DB_STATEMENT_TIMEOUT" envDefault:"10s"`
	MaxConns         int           `env:"DB_MAX_CONNS" envDefault:"20"`
}

// Redis holds the Redis connection settings. Redis is an efficiency layer: short timeouts keep a dead
// Redis from stalling requests that can fall back to the database.
type Redis struct {
	URL       string        `env:"REDIS_URL" envDefault:"redis://127.0.0.1:6379/0"`
	Timeout   time.Duration `env:"REDIS_TIMEOUT" envDefault:"250ms"`
	KeyPrefix string        `env:"REDIS_KEY_PREFIX" envDefault:"idemshop:"`
}

// Orders is the configuration of cmd/orders. Names and defaults are in the README's configuration table.
type Orders struct {
	HTTPAddr string `env:"HTTP_ADDR" envDefault:":8080"`
	Log
	HTTP
	Postgres
	Redis
	Startup
	AMQPURL string `env:"AMQP_URL" envDefault:"amqp://guest:guest@127.0.0.1:5672/"`
	OutboxRelay
	PaymentsURL          string `env:"PAYMENTS_URL" envDefault:"http://127.0.0.1:8081"`
	CallbackURL          string `env:"CALLBACK_URL" envDefault:"http://127.0.0.1:8080/v1/payments/callback"`
	PaymentWebhookSecret string `env:"PAYMENT_WEBHOOK_SECRET" envDefault:"idemshop-demo-webhook-secret"`
	MigrateOnStart       bool   `env:"MIGRATE_ON_START" envDefault:"true"`
	// MigrateLockTimeout bounds each lock wait of a migration (postgres.MigrateExisting): past it the
	// migration is rolled back and the command exits 1, instead of queueing the shop's writes to the
	// table behind it.
	MigrateLockTimeout time.Duration `env:"MIGRATE_LOCK_TIMEOUT" envDefault:"5s"`
	Lab                bool          `env:"ORDERS_LAB" envDefault:"false"`

	// IdempotencyRetention is how long a key is kept (at least) before the reaper may delete it.
	IdempotencyRetention time.Duration `env:"IDEMPOTENCY_RETENTION" envDefault:"24h"`
	ReaperInterval       time.Duration `env:"REAPER_INTERVAL" envDefault:"1m"`
	ReaperBatch          int           `env:"REAPER_BATCH" envDefault:"1000"`
	// OutboxRetention is how long an outbox row is kept (at least) after it was published (its
	// published_at); the reaper deletes it after that, on REAPER_INTERVAL, REAPER_BATCH rows a
	// statement. A row not yet published is never deleted.
	OutboxRetention time.Duration `env:"OUTBOX_RETENTION" envDefault:"168h"`
	// CallbackAuditRetention is how long a payment_callbacks audit row is kept (at least) after it was
	// received; the reaper deletes it after that, as it does the outbox's. The audit is a log that
	// decides nothing (callback.AuditReaper).
	CallbackAuditRetention time.Duration `env:"CALLBACK_AUDIT_RETENTION" envDefault:"720h"`

	// OnceTimeout bounds a whole one-shot command (`orders migrate`, `sweep --once`, `reconcile
	// --once`): a database that stops answering after the connection is made would otherwise hold it
	// forever (statement_timeout is the server's to enforce).
	OnceTimeout time.Duration `env:"ONCE_TIMEOUT" envDefault:"10m"`

	SweepInterval time.Duration `env:"SWEEP_INTERVAL" envDefault:"5s"`
	// PayLease is the pay flow's PROCESSING lease and Redis lock TTL: a retry within it gets 409, after
	// it a retry or the sweeper takes the record over.
	PayLease time.Duration `env:"PAY_LEASE" envDefault:"10s"`
	// PaymentsTimeout bounds one call to the payment platform; past it the outcome is unknown.
	PaymentsTimeout  time.Duration `env:"PAYMENTS_TIMEOUT" envDefault:"3s"`
	SweepMaxAttempts int           `env:"SWEEP_MAX_ATTEMPTS" envDefault:"10"`
	SweepBatch       int           `env:"SWEEP_BATCH" envDefault:"100"`
	// A refund the platform refused stays owed and is sent again after REFUND_RETRY_MIN, then twice
	// as long after each further refusal, up to REFUND_RETRY_MAX (refunds.RetryPolicy).
	RefundRetryMin time.Duration `env:"REFUND_RETRY_MIN" envDefault:"30s"`
	RefundRetryMax time.Duration `env:"REFUND_RETRY_MAX" envDefault:"1h"`
	// The reconciler compares orders and unfinished pay records with the platform's query API and moves
	// them to the platform's state (docs/pay.md): every RECONCILE_INTERVAL, what has been untouched for
	// RECONCILE_GRACE, each order again after RECONCILE_RECHECK until it is RECONCILE_LOOKBACK old, at
	// most RECONCILE_BATCH orders and records a run.
	ReconcileInterval time.Duration `env:"RECONCILE_INTERVAL" envDefault:"30s"`
	ReconcileGrace    time.Duration `env:"RECONCILE_GRACE" envDefault:"1m"`
	ReconcileRecheck  time.Duration `env:"RECONCILE_RECHECK" envDefault:"10m"`
	ReconcileLookback time.Duration `env:"RECONCILE_LOOKBACK" envDefault:"24h"`
	ReconcileBatch    int           `env:"RECONCILE_BATCH" envDefault:"100"`
	// ReconcileRefundDriftAfter: an order whose refunded total differs from the platform's, on a
	// payment the platform has not touched for this long, is an ALERT (refund_drift). Longer than the
	// platform's callback retries (payments-mock's take about a minute).
	ReconcileRefundDriftAfter time.Duration `env:"RECONCILE_REFUND_DRIFT_AFTER" envDefault:"10m"`
	// ReconcilePointsAfter: a published order.paid or order.refunded event still without its points
	// ledger row this long after the publish is an alert (alert=points_missing).
	ReconcilePointsAfter time.Duration `env:"RECONCILE_POINTS_AFTER" envDefault:"10m"`
	// PayFault arms a crash point of the pay flow (crash-after-claim, crash-after-rpc,
	// crash-before-write). Honoured only with ORDERS_LAB=true.
	PayFault          string        `env:"PAY_FAULT"`
	ReadyProbeTimeout time.Duration `env:"READY_PROBE_TIMEOUT" envDefault:"2s"`
	// FormTokenTTL is how long a one-time form token (the redeem form) stays usable after it was issued,
	// and how long a consumed one keeps its result for replay.
	FormTokenTTL time.Duration `env:"FORM_TOKEN_TTL" envDefault:"30m"`
	// FormTokenInFlightLease bounds how long a submit holds its token IN_FLIGHT: after it, a crashed
	// submit no longer blocks the form, and the token can be submitted again.
	FormTokenInFlightLease time.Duration `env:"FORM_TOKEN_INFLIGHT_LEASE" envDefault:"10s"`
	// LabStockLockTTL is the lease of the flash-sale lock in the unsafe S5 variant (ORDERS_LAB=true only):
	// ample for a stock step that takes a few milliseconds, short so that a crashed holder does not stall
	// the sale, and therefore shorter than the step once the database is slow.
	LabStockLockTTL time.Duration `env:"LAB_STOCK_LOCK_TTL" envDefault:"50ms"`
	// PointsMetricsURL is points-consumer's /metrics, which the live lab page (GET /lab, ORDERS_LAB=true
	// only) polls for the messages it suppressed as duplicates: those leave no ledger row to read.
	PointsMetricsURL string `env:"POINTS_METRICS_URL" envDefault:"http://127.0.0.1:8082/metrics"`
	// PaymentsAdminToken is sent as the bearer token of payments-mock's admin API (its ADMIN_TOKEN),
	// which the live lab page's platform controls go through. Empty: the mock answers loopback callers.
	PaymentsAdminToken string `env:"PAYMENTS_ADMIN_TOKEN"`
}

// MaxNotifyURLBytes is the longest notify_url the payment platform takes (payments-mock's limit): a
// longer CALLBACK_URL would make it refuse every payment.
const MaxNotifyURLBytes = 2048

// LoadOrders reads and validates the orders configuration from the environment.
func LoadOrders() (Orders, error) {
	c, err := env.ParseAs[Orders]()
	if err != nil {
		return c, fmt.Errorf("config: %w", nameVariables[Orders](err))
	}
	if err := setButEmpty("PAYMENT_WEBHOOK_SECRET", "HTTP_ADDR", "DATABASE_URL", "REDIS_URL", "REDIS_KEY_PREFIX", "AMQP_URL",
		"PAYMENTS_URL", "CALLBACK_URL", "POINTS_METRICS_URL"); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	return c, c.Validate()
}

// Validate checks values the parser cannot; each error names its variable.
func (c Orders) Validate() error {
	var ck checks
	ck.listenAddr("HTTP_ADDR", c.HTTPAddr)
	c.HTTP.check(&ck)
	c.Postgres.check(&ck)
	c.Redis.check(&ck)
	c.Startup.check(&ck)
	ck.absoluteURL("AMQP_URL", c.AMQPURL)
	ck.httpURL("CALLBACK_URL", c.CallbackURL)
	if len(c.CallbackURL) > MaxNotifyURLBytes {
		// Sent as notify_url with every payment: the platform refuses it, and every pay with it.
		ck.add(fmt.Errorf("CALLBACK_URL must be at most %d bytes (the platform's notify_url limit), got %d", MaxNotifyURLBytes, len(c.CallbackURL)))
	}
	ck.baseURL("PAYMENTS_URL", c.PaymentsURL) // httpURL's checks too: called twice, each error came twice
	// orders ends a transaction idle this long (postgres.Options.IdleInTransactionTimeout), and
	// PostgreSQL refuses the setting past its range only at each connection: orders waited for good.
	if idle := c.Postgres.StatementTimeout + c.OutboxConfirmTimeout; c.OutboxConfirmTimeout > pgMost || idle > pgMost {
		ck.add(fmt.Errorf("DB_STATEMENT_TIMEOUT (%s) + OUTBOX_CONFIRM_TIMEOUT (%s) must be at most %s (a transaction left idle that long is ended: PostgreSQL's range)",
			c.Postgres.StatementTimeout, c.OutboxConfirmTimeout, pgMost))
	}
	ck.httpURL("POINTS_METRICS_URL", c.PointsMetricsURL)
	ck.bearerToken("PAYMENTS_ADMIN_TOKEN", c.PaymentsAdminToken)
	if c.PaymentWebhookSecret == "" {
		ck.add(errors.New("PAYMENT_WEBHOOK_SECRET must not be empty"))
	}
	ck.positive("IDEMPOTENCY_RETENTION", c.IdempotencyRetention)
	ck.positive("REAPER_INTERVAL", c.ReaperInterval)
	ck.atLeastOne("REAPER_BATCH", int64(c.ReaperBatch))
	if c.IdempotencyRetention > math.MaxInt64-time.Hour-c.ReaperInterval {
		// The pay lock's fencing counters live that long (ordersapp/pay.go, docs/lock.md): past it the
		// sum wraps to a negative TTL.
		ck.add(fmt.Errorf("IDEMPOTENCY_RETENTION (%s) + REAPER_INTERVAL (%s) + 1h must be at most %s",
			c.IdempotencyRetention, c.ReaperInterval, time.Duration(math.MaxInt64)))
	}
	ck.positive("OUTBOX_RETENTION", c.OutboxRetention)
	ck.positive("CALLBACK_AUDIT_RETENTION", c.CallbackAuditRetention)
	ck.positive("ONCE_TIMEOUT", c.OnceTimeout)
	ck.positive("MIGRATE_LOCK_TIMEOUT", c.MigrateLockTimeout)
	ck.positive("SWEEP_INTERVAL", c.SweepInterval)
	ck.atLeastOne("SWEEP_MAX_ATTEMPTS", int64(c.SweepMaxAttempts))
	ck.atLeastOne("SWEEP_BATCH", int64(c.SweepBatch))
	ck.positive("REFUND_RETRY_MIN", c.RefundRetryMin)
	if c.RefundRetryMax < c.RefundRetryMin {
		ck.add(fmt.Errorf("REFUND_RETRY_MAX (%s) must not be shorter than REFUND_RETRY_MIN (%s)", c.RefundRetryMax, c.RefundRetryMin))
	}
	ck.redisMillis("RECONCILE_INTERVAL", c.ReconcileInterval) // also the TTL of a run's turn (sweeper.Reconciler.Run)
	ck.notNegative("RECONCILE_GRACE", c.ReconcileGrace)
	ck.positive("RECONCILE_RECHECK", c.ReconcileRecheck)
	ck.positive("RECONCILE_LOOKBACK", c.ReconcileLookback)
	if c.ReconcileLookback <= c.ReconcileGrace {
		// An order untouched for the grace is at least that old: none would ever be compared.
		ck.add(fmt.Errorf("RECONCILE_LOOKBACK (%s) must be longer than RECONCILE_GRACE (%s)", c.ReconcileLookback, c.ReconcileGrace))
	}
	ck.atLeastOne("RECONCILE_BATCH", int64(c.ReconcileBatch))
	ck.notNegative("RECONCILE_REFUND_DRIFT_AFTER", c.ReconcileRefundDriftAfter)
	// Not checked against RECONCILE_LOOKBACK: the check looks at events published inside it only, and a
	// lookback that short (tests use 1ms to leave orders alone) just finds none.
	ck.positive("RECONCILE_POINTS_AFTER", c.ReconcilePointsAfter)
	ck.redisMillis("PAY_LEASE", c.PayLease)
	ck.positive("PAYMENTS_TIMEOUT", c.PaymentsTimeout)
	if c.PaymentsTimeout >= c.PayLease {
		// The lease must outlast the platform call, or the record looks abandoned while the call runs.
		ck.add(fmt.Errorf("PAYMENTS_TIMEOUT (%s) must be shorter than PAY_LEASE (%s)", c.PaymentsTimeout, c.PayLease))
	}
	if renewal := c.PayLease - c.PayLease/3; c.Redis.Timeout >= renewal {
		// The pay watchdog renews the lease every PAY_LEASE/3, and a renewal that hangs must end before
		// the lease can pass to another holder. Its own deadline does not end a read go-redis is in:
		// REDIS_TIMEOUT does (a helper's finding, 2026-12-07).
		ck.add(fmt.Errorf("REDIS_TIMEOUT (%s) must be shorter than PAY_LEASE less a third (%s): a pay lease renewal that hangs must end before the lease can pass to another holder",
			c.Redis.Timeout, renewal))
	}
	if work := httpserver.WorkTime(c.HTTP.WriteTimeout); c.HTTP.WriteTimeout > 0 && c.PaymentsTimeout >= work {
		// A pay's answer waits for the platform call; past the work time it could not be written.
		ck.add(fmt.Errorf("PAYMENTS_TIMEOUT (%s) must be shorter than a request's work time, %s: HTTP_WRITE_TIMEOUT (%s) less the part kept to write the answer",
			c.PaymentsTimeout, work, c.HTTP.WriteTimeout))
	}
	// The names are pay's crash points; checked here too so that a typo stops the process before it
	// waits for its database (as POINTS_FAULT's are).
	switch c.PayFault {
	case "":
	case "crash-after-claim", "crash-after-rpc", "crash-before-write":
		if !c.Lab {
			ck.add(errors.New("PAY_FAULT is only allowed with ORDERS_LAB=true"))
		}
	default:
		ck.add(fmt.Errorf("PAY_FAULT must be crash-after-claim, crash-after-rpc or crash-before-write, got %q", c.PayFault))
	}
	if c.LabStockLockTTL < time.Millisecond {
		ck.add(fmt.Errorf("LAB_STOCK_LOCK_TTL must be >= 1ms (the Redis lease resolution), got %s", c.LabStockLockTTL))
	}
	ck.positive("READY_PROBE_TIMEOUT", c.ReadyProbeTimeout)
	ck.redisMillis("FORM_TOKEN_TTL", c.FormTokenTTL)
	ck.redisMillis("FORM_TOKEN_INFLIGHT_LEASE", c.FormTokenInFlightLease)
	c.OutboxRelay.check(&ck)
	return ck.err()
}

// DefaultOrders returns the orders configuration with every default and nothing read from the
// environment; tests start from it and override fields.
func DefaultOrders() Orders {
	c, err := env.ParseAsWithOptions[Orders](env.Options{Environment: map[string]string{}})
	if err != nil {
		panic(fmt.Sprintf("config: defaults do not parse: %v", err)) // a bug in the struct tags
	}
	return c
}

// nameVariables rewrites caarlos0/env parse errors, which name the Go field ("IdempotencyRetention"),
// so that they name the environment variable ("IDEMPOTENCY_RETENTION") the operator has to fix.
func nameVariables[T any](err error) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	vars := map[string][]string{}
	collectVars(reflect.TypeFor[T](), vars)
	out := make([]error, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) && len(vars[pe.Name]) > 0 {
			out = append(out, fmt.Errorf("%s: invalid value: %w", strings.Join(vars[pe.Name], " or "), pe.Err))
			continue
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

func collectVars(t reflect.Type, vars map[string][]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if name == "" && f.Type.Kind() == reflect.Struct {
			collectVars(f.Type, vars)
			continue
		}
		if name != "" {
			vars[f.Name] = append(vars[f.Name], name)
		}
	}
}
