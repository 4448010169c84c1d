package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Loadtest is the configuration of loadtest (the top-level command): where the running services are, and the stores it
// reads to check invariants. Defaults match the other binaries' defaults.
type Loadtest struct {
	OrdersURL   string `env:"ORDERS_URL" envDefault:"http://127.0.0.1:8080"`
	PaymentsURL string `env:"PAYMENTS_URL" envDefault:"http://127.0.0.1:8081"`
	AdminToken  string `env:"ADMIN_TOKEN"`
	Postgres
	Redis
	AMQPURL string `env:"AMQP_URL" envDefault:"amqp://guest:guest@127.0.0.1:5672/"`
	AMQPNames
	PaymentWebhookSecret string `env:"PAYMENT_WEBHOOK_SECRET" envDefault:"idemshop-demo-webhook-secret"`
	// Seed drives payments-mock's chaos during a run (logged, so a run can be replayed).
	Seed uint64 `env:"LAB_SEED" envDefault:"20261129"`
	// Quiet bounds every wait for asynchronous effects (callbacks, outbox, consumer) to settle.
	Quiet       time.Duration `env:"LAB_QUIET" envDefault:"60s"`
	HTTPTimeout time.Duration `env:"LAB_HTTP_TIMEOUT" envDefault:"15s"`
	Log
}

// LoadLoadtest reads and validates the loadtest configuration from the environment.
func LoadLoadtest() (Loadtest, error) {
	c, err := env.ParseAs[Loadtest]()
	if err != nil {
		return c, fmt.Errorf("config: %w", nameVariables[Loadtest](err))
	}
	if err := setButEmpty("PAYMENT_WEBHOOK_SECRET", "ORDERS_URL", "PAYMENTS_URL", "DATABASE_URL", "REDIS_URL", "REDIS_KEY_PREFIX",
		"AMQP_URL"); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	// The same checks as the services' for the variables they share, so that a value a service would
	// refuse is not used here (DB_LOCK_TIMEOUT=500us was sent to PostgreSQL as no timeout at all).
	// Base URLs that loadtest appends paths to: "http://host:8080/" would make "//v1/orders", which
	// orders answers 404 (and the lab's preflight took for an orders not in lab mode).
	c.OrdersURL = strings.TrimRight(c.OrdersURL, "/")
	c.PaymentsURL = strings.TrimRight(c.PaymentsURL, "/")
	var ck checks
	// A query or a fragment would end up before the paths appended to them (as the services refuse for
	// their PAYMENTS_URL); the run would fail later, on a 404 or a 405 that names no variable.
	ck.baseURL("ORDERS_URL", c.OrdersURL)
	ck.baseURL("PAYMENTS_URL", c.PaymentsURL)
	ck.bearerToken("ADMIN_TOKEN", c.AdminToken)
	c.Postgres.check(&ck)
	c.Redis.check(&ck)
	ck.absoluteURL("AMQP_URL", c.AMQPURL)
	c.AMQPNames.check(&ck)
	ck.positive("LAB_QUIET", c.Quiet)
	ck.positive("LAB_HTTP_TIMEOUT", c.HTTPTimeout)
	return c, ck.err()
}

// Soak is the configuration of `loadtest soak` beyond Loadtest's (docs/reliability.md). The soak starts
// and supervises its own payments-mock, orders and points-consumer from the binaries in Bin, on a
// database and Redis/AMQP prefixes of its own (named after RunID), and removes all of it on exit.
// DATABASE_URL names only the server: the soak replaces the database name with idemshop_<run id>.
type Soak struct {
	// Seed drives every random choice of the run; empty = random (always printed). Parsed by the soak.
	Seed string `env:"SOAK_SEED"`
	// Duration is how long the clients create orders and the faults are injected.
	Duration time.Duration `env:"SOAK_DURATION" envDefault:"60s"`
	// Faults names the fault families: none | process | infra | all (parsed by the soak). infra and
	// all start a private PostgreSQL, Redis and RabbitMQ and break those, never the shared ones.
	Faults string `env:"SOAK_FAULTS" envDefault:"process"`
	// Chaos switches payments-mock's chaos on (false: calm all run long, for a quiet baseline).
	Chaos bool `env:"SOAK_CHAOS" envDefault:"true"`
	// Converge bounds the wait for quiescence after the faults stop.
	Converge time.Duration `env:"SOAK_CONVERGE_TIMEOUT" envDefault:"3m"`
	// Grace is how long after Duration a client may keep retrying the request it is in.
	Grace time.Duration `env:"SOAK_GRACE" envDefault:"30s"`
	// Bin is the directory holding the orders, payments-mock and points-consumer binaries.
	Bin string `env:"SOAK_BIN" envDefault:"bin"`
	// RunID names the run's database and prefixes; empty = soak_<unix seconds>_<pid>.
	RunID string `env:"SOAK_RUN_ID"`
	// Logs is the directory for the services' logs; empty = a fresh temporary directory.
	Logs string `env:"SOAK_LOGS"`
	// ChildLogLevel is LOG_LEVEL for the services the soak starts.
	ChildLogLevel string `env:"SOAK_CHILD_LOG_LEVEL" envDefault:"warn"`
	// InfraRequired makes an infra fault that cannot be injected (no private PostgreSQL, Redis or
	// RabbitMQ could be started, e.g. a missing binary) a set-up error (exit 2) instead of a report line.
	InfraRequired bool `env:"SOAK_INFRA_REQUIRED" envDefault:"false"`
}

// LoadSoak reads and validates the soak settings from the environment.
func LoadSoak() (Soak, error) {
	c, err := env.ParseAs[Soak]()
	if err != nil {
		return c, fmt.Errorf("config: %w", nameVariables[Soak](err))
	}
	// Set but empty, the parser gives it its default ("bin"): the binaries of another directory than
	// the one meant.
	if err := setButEmpty("SOAK_BIN"); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	var ck checks
	ck.positive("SOAK_DURATION", c.Duration)
	ck.positive("SOAK_CONVERGE_TIMEOUT", c.Converge)
	ck.notNegative("SOAK_GRACE", c.Grace)
	if c.Bin == "" {
		ck.add(fmt.Errorf("SOAK_BIN must not be empty"))
	}
	for i := 0; i < len(c.RunID); i++ {
		if b := c.RunID[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_') || len(c.RunID) > 40 {
			ck.add(fmt.Errorf("SOAK_RUN_ID must be 1..40 of [a-z0-9_], got %q", c.RunID))
			break
		}
	}
	return c, ck.err()
}
