package config

import (
	"fmt"
	"time"

	"github.com/caarlos0/env/v11"
)

// Loadtest is the configuration of cmd/loadtest: where the running services are, and the stores it
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
	if c.Quiet <= 0 || c.HTTPTimeout <= 0 {
		return c, fmt.Errorf("config: LAB_QUIET and LAB_HTTP_TIMEOUT must be > 0")
	}
	return c, nil
}
