package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/caarlos0/env/v11"
)

// PaymentsMock is the configuration of cmd/payments-mock. Names and defaults are documented in
// docs/payments-mock.md ("Environment").
type PaymentsMock struct {
	HTTPAddr string `env:"HTTP_ADDR" envDefault:":8081"`
	Log
	HTTP
	PaymentWebhookSecret string `env:"PAYMENT_WEBHOOK_SECRET" envDefault:"idemshop-demo-webhook-secret"`
	// AutoApproveDelay approves each new payment after this delay; 0 = approve only by the API.
	AutoApproveDelay time.Duration `env:"AUTO_APPROVE_DELAY" envDefault:"200ms"`
	// AdminToken, when set, is required as a bearer token on /admin; empty = loopback peers only.
	AdminToken string `env:"ADMIN_TOKEN"`

	// CallbackRetrySchedule is the wait before attempts 2, 3, ... (comma-separated durations).
	CallbackRetrySchedule []time.Duration `env:"CALLBACK_RETRY_SCHEDULE" envDefault:"500ms,1s,2s,4s,8s,15s,30s" envSeparator:","`
	CallbackTimeout       time.Duration   `env:"CALLBACK_TIMEOUT" envDefault:"5s"`
	// CreateTimeoutDelay is how long a create_timeout create holds its answer before the 504.
	CreateTimeoutDelay time.Duration `env:"CREATE_TIMEOUT_DELAY" envDefault:"10s"`
	DeliveryLogLimit   int           `env:"DELIVERY_LOG_LIMIT" envDefault:"10000"`

	// The initial chaos settings (GET/PUT /admin/chaos changes them at run time).
	ChaosDuplicates        int     `env:"CHAOS_DUPLICATES" envDefault:"1"`
	ChaosParallel          bool    `env:"CHAOS_PARALLEL" envDefault:"true"`
	ChaosSeed              string  `env:"CHAOS_SEED"` // unsigned 64-bit integer; empty = random, logged
	ChaosJitterMS          int64   `env:"CHAOS_JITTER_MS" envDefault:"0"`
	ChaosReorder           bool    `env:"CHAOS_REORDER" envDefault:"false"`
	ChaosAckLossRate       float64 `env:"CHAOS_ACK_LOSS_RATE" envDefault:"0"`
	ChaosCreateTimeoutRate float64 `env:"CHAOS_CREATE_TIMEOUT_RATE" envDefault:"0"`
	ChaosResetRate         float64 `env:"CHAOS_RESET_RATE" envDefault:"0"`
	ChaosErrorRate         float64 `env:"CHAOS_ERROR_RATE" envDefault:"0"`
	ChaosDelaySuccessMS    int64   `env:"CHAOS_DELAY_SUCCESS_MS" envDefault:"0"`
	// IDTag goes into every id the platform hands out (pay_<tag>_1, evt_<tag>_1, ...); empty = a random
	// one, logged, so that a restarted platform never hands out an id of the one before
	// (paymock.Config.IDTag). Set it, with CHAOS_SEED, to reproduce a run's ids too.
	IDTag string `env:"ID_TAG"`
}

// idTag is the rule of an id tag (ID_TAG, paymock.Config.IDTag): 1 to 16 lowercase letters and digits,
// so that every id stays a few visible ASCII characters.
var idTag = regexp.MustCompile(`^[a-z0-9]{1,16}$`)

// ValidIDTag reports whether tag may be payments-mock's id tag.
func ValidIDTag(tag string) bool { return idTag.MatchString(tag) }

// LoadPaymentsMock reads and validates the payments-mock configuration from the environment.
func LoadPaymentsMock() (PaymentsMock, error) {
	c, err := env.ParseAs[PaymentsMock]()
	if err != nil {
		return c, fmt.Errorf("config: %w", nameVariables[PaymentsMock](err))
	}
	if err := setButEmpty("PAYMENT_WEBHOOK_SECRET", "HTTP_ADDR", "CALLBACK_RETRY_SCHEDULE", "ID_TAG"); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	return c, c.Validate()
}

// Seed returns CHAOS_SEED, and ok=false when it is unset (the caller then picks a random one).
func (c PaymentsMock) Seed() (seed uint64, ok bool, err error) {
	if c.ChaosSeed == "" {
		return 0, false, nil
	}
	s, err := strconv.ParseUint(c.ChaosSeed, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("CHAOS_SEED must be an unsigned 64-bit integer, got %q", c.ChaosSeed)
	}
	return s, true, nil
}

// Validate checks values the parser cannot; each error names its variable. The chaos bounds match
// paymock.Chaos.Validate.
func (c PaymentsMock) Validate() error {
	var ck checks
	ck.listenAddr("HTTP_ADDR", c.HTTPAddr)
	ck.bearerToken("ADMIN_TOKEN", c.AdminToken)
	c.HTTP.check(&ck)
	ck.positive("CALLBACK_TIMEOUT", c.CallbackTimeout)
	ck.positive("CREATE_TIMEOUT_DELAY", c.CreateTimeoutDelay)
	ck.notNegative("AUTO_APPROVE_DELAY", c.AutoApproveDelay)
	if len(c.CallbackRetrySchedule) > 31 {
		ck.add(fmt.Errorf("CALLBACK_RETRY_SCHEDULE has %d steps, at most 31", len(c.CallbackRetrySchedule)))
	}
	for _, d := range c.CallbackRetrySchedule {
		if d < 0 {
			ck.add(fmt.Errorf("CALLBACK_RETRY_SCHEDULE steps must be >= 0, got %s", d))
			break
		}
	}
	if c.DeliveryLogLimit <= 0 {
		ck.add(fmt.Errorf("DELIVERY_LOG_LIMIT must be > 0, got %d", c.DeliveryLogLimit))
	}
	if c.PaymentWebhookSecret == "" {
		ck.add(errors.New("PAYMENT_WEBHOOK_SECRET must not be empty"))
	}
	if c.ChaosDuplicates < 1 || c.ChaosDuplicates > 20 {
		ck.add(fmt.Errorf("CHAOS_DUPLICATES must be 1..20, got %d", c.ChaosDuplicates))
	}
	if c.ChaosJitterMS < 0 || c.ChaosJitterMS > 60000 {
		ck.add(fmt.Errorf("CHAOS_JITTER_MS must be 0..60000, got %d", c.ChaosJitterMS))
	}
	if c.ChaosDelaySuccessMS < 0 || c.ChaosDelaySuccessMS > 60000 {
		ck.add(fmt.Errorf("CHAOS_DELAY_SUCCESS_MS must be 0..60000, got %d", c.ChaosDelaySuccessMS))
	}
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"CHAOS_ACK_LOSS_RATE", c.ChaosAckLossRate},
		{"CHAOS_CREATE_TIMEOUT_RATE", c.ChaosCreateTimeoutRate},
		{"CHAOS_RESET_RATE", c.ChaosResetRate},
		{"CHAOS_ERROR_RATE", c.ChaosErrorRate},
	} {
		if !(r.v >= 0 && r.v <= 1) {
			ck.add(fmt.Errorf("%s must be 0..1, got %v", r.name, r.v))
		}
	}
	if _, _, err := c.Seed(); err != nil {
		ck.add(err)
	}
	if c.IDTag != "" && !ValidIDTag(c.IDTag) {
		ck.add(fmt.Errorf("ID_TAG must be 1 to 16 lowercase letters and digits, got %q", c.IDTag))
	}
	return ck.err()
}

// DefaultPaymentsMock returns the payments-mock configuration with every default and nothing read from
// the environment; tests start from it and override fields.
func DefaultPaymentsMock() PaymentsMock {
	c, err := env.ParseAsWithOptions[PaymentsMock](env.Options{Environment: map[string]string{}})
	if err != nil {
		panic(fmt.Sprintf("config: defaults do not parse: %v", err)) // a bug in the struct tags
	}
	return c
}
