package config

import (
	"fmt"
	"time"
)

// OutboxRelay holds the outbox relay knobs of cmd/orders. It is meant to be embedded in Orders
// (next to AMQP_URL) and checked with its Validate; docs/points.md documents the variables.
type OutboxRelay struct {
	// OutboxPollInterval is the longest pause between polls when the last batch was not full and no
	// notification woke the relay (internal/outbox/listen.go; no writer notifies yet, so in practice the
	// pause). It bounds the outbox lag of a quiet shop: 50 ms keeps p99 under 100 ms at 500 events/s
	// (docs/performance.md) for 20 cheap index-only polls a second per replica.
	OutboxPollInterval time.Duration `env:"OUTBOX_POLL_INTERVAL" envDefault:"50ms"`
	// OutboxBatchSize is the most rows locked, published and marked per transaction.
	OutboxBatchSize int `env:"OUTBOX_BATCH_SIZE" envDefault:"100"`
	// OutboxConfirmTimeout bounds the wait for the broker's publisher confirms of one batch.
	OutboxConfirmTimeout time.Duration `env:"OUTBOX_CONFIRM_TIMEOUT" envDefault:"5s"`
	Reconnect
	AMQPNames
}

// check adds the relay knobs' problems to c; each names its variable.
func (o OutboxRelay) check(c *checks) {
	c.positive("OUTBOX_POLL_INTERVAL", o.OutboxPollInterval)
	if o.OutboxBatchSize < 1 || o.OutboxBatchSize > 10000 {
		c.add(fmt.Errorf("OUTBOX_BATCH_SIZE must be 1..10000, got %d", o.OutboxBatchSize))
	}
	c.positive("OUTBOX_CONFIRM_TIMEOUT", o.OutboxConfirmTimeout)
	o.Reconnect.check(c)
}
