package config

import (
	"fmt"
	"time"

	"idemshop/internal/platform/retry"
)

// Startup shapes how orders and points-consumer wait for PostgreSQL at start (docs/reliability.md,
// "Start-up order"): they retry with an exponential backoff from Min to Max, each attempt bounded by
// AttemptTimeout, for as long as it takes. Tests shorten them; an orchestrator needs no start order.
type Startup struct {
	RetryMin       time.Duration `env:"STARTUP_RETRY_MIN" envDefault:"250ms"`
	RetryMax       time.Duration `env:"STARTUP_RETRY_MAX" envDefault:"10s"`
	AttemptTimeout time.Duration `env:"STARTUP_ATTEMPT_TIMEOUT" envDefault:"5s"`
}

// Backoff is s as retry.Until takes it.
func (s Startup) Backoff() retry.Backoff {
	return retry.Backoff{Min: s.RetryMin, Max: s.RetryMax, AttemptTimeout: s.AttemptTimeout}
}

func (s Startup) check(c *checks) {
	c.positive("STARTUP_RETRY_MIN", s.RetryMin)
	if s.RetryMax < s.RetryMin {
		c.add(fmt.Errorf("STARTUP_RETRY_MAX must be >= STARTUP_RETRY_MIN, got %s", s.RetryMax))
	}
	c.positive("STARTUP_ATTEMPT_TIMEOUT", s.AttemptTimeout)
}
