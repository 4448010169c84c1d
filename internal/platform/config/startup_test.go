package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/platform/config"
)

// The start-up wait is configured, not hard-coded, and a nonsensical one is refused at start, naming
// the variable.
func TestStartupBackoff(t *testing.T) {
	c := config.DefaultPointsConsumer()
	assert.Equal(t, config.Startup{RetryMin: 250 * time.Millisecond, RetryMax: 10 * time.Second,
		AttemptTimeout: 5 * time.Second}, c.Startup)
	assert.NoError(t, c.Validate())
	c.RetryMax = time.Millisecond
	assert.ErrorContains(t, c.Validate(), "STARTUP_RETRY_MAX")

	o := config.DefaultOrders()
	o.Startup.AttemptTimeout = 0
	assert.ErrorContains(t, o.Validate(), "STARTUP_ATTEMPT_TIMEOUT")
}
