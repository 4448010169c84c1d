package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/config"
)

func TestPointsConsumerDefaults(t *testing.T) {
	c := config.DefaultPointsConsumer()
	assert.Equal(t, ":8082", c.HTTPAddr)
	assert.Equal(t, "amqp://guest:guest@127.0.0.1:5672/", c.AMQPURL)
	assert.Equal(t, "redis://127.0.0.1:6379/0", c.Redis.URL)
	assert.False(t, c.Lab)
	assert.Empty(t, c.Fault)
	assert.Empty(t, c.NamePrefix)
	assert.Equal(t, 30*time.Second, c.LeaseTTL)
	assert.Equal(t, 24*time.Hour, c.DoneTTL)
	require.NoError(t, c.Validate())
}

func TestLoadPointsConsumerNamesTheBadVariable(t *testing.T) {
	cases := map[string]struct {
		env  map[string]string
		want string
	}{
		"unparsable lease":       {map[string]string{"POINTS_LEASE_TTL": "soon"}, "POINTS_LEASE_TTL"},
		"lease under its poll":   {map[string]string{"POINTS_LEASE_TTL": "50ms"}, "POINTS_LEASE_POLL (100ms) must be <= POINTS_LEASE_TTL (50ms)"},
		"batch above prefetch":   {map[string]string{"POINTS_PREFETCH": "10", "POINTS_BATCH_SIZE": "20"}, "POINTS_BATCH_SIZE"},
		"fault without lab mode": {map[string]string{"POINTS_FAULT": "crash-after-commit"}, "ORDERS_LAB=true"},
		"unknown fault":          {map[string]string{"ORDERS_LAB": "true", "POINTS_FAULT": "exit-after-commit"}, "POINTS_FAULT"},
		"reconnect max below min": {map[string]string{"AMQP_RECONNECT_MIN": "2s", "AMQP_RECONNECT_MAX": "1s"},
			"AMQP_RECONNECT_MAX"},
		// Redis keeps TTLs in milliseconds: go-redis sent 100us as 1ms.
		"done TTL under 1 ms":      {map[string]string{"POINTS_DONE_TTL": "100us"}, "POINTS_DONE_TTL must be >= 1ms (the Redis TTL resolution), got 100µs"},
		"lease TTL under 1 ms":     {map[string]string{"POINTS_LEASE_TTL": "500us", "POINTS_LEASE_POLL": "100us"}, "POINTS_LEASE_TTL must be >= 1ms"},
		"topology check under 1 s": {map[string]string{"POINTS_TOPOLOGY_CHECK": "1ms"}, "POINTS_TOPOLOGY_CHECK must be >= 1s, got 1ms"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := config.LoadPointsConsumer()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The relay's knobs are checked as part of orders' configuration, which embeds them.
func TestOutboxRelayKnobsAreValidated(t *testing.T) {
	c := config.DefaultOrders()
	require.NoError(t, c.Validate())
	c.OutboxBatchSize = 0
	assert.ErrorContains(t, c.Validate(), "OUTBOX_BATCH_SIZE")
	c = config.DefaultOrders()
	c.Reconnect.Max = c.Reconnect.Min / 2
	assert.ErrorContains(t, c.Validate(), "AMQP_RECONNECT_MAX")
	c = config.DefaultOrders()
	assert.Zero(t, c.OutboxBatchWait, "the relay drains at once by default")
	c.OutboxBatchWait = -time.Millisecond
	assert.ErrorContains(t, c.Validate(), "OUTBOX_BATCH_WAIT")
}
