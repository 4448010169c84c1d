package config

import (
	"fmt"
	"time"
)

// OutboxRelay holds the outbox relay knobs of cmd/orders. It is meant to be embedded in Orders
// (next to AMQP_URL) and checked with its Validate; docs/points.md documents the variables.
type OutboxRelay struct {
	// OutboxPollInterval is the pause after a drain that found nothing, when nothing wakes the relay
	// (the callbacks wake it after their commit, outbox.Relay.Wake; it drains again at once after a drain
	// that found rows). It bounds the lag of a row no writer of this process announced, for 20 cheap
	// index-only polls a second per replica when the shop is quiet.
	OutboxPollInterval time.Duration `env:"OUTBOX_POLL_INTERVAL" envDefault:"50ms"`
	// OutboxBatchSize is the most rows locked, published and marked per transaction.
	OutboxBatchSize int `env:"OUTBOX_BATCH_SIZE" envDefault:"100"`
	// OutboxConfirmTimeout bounds the wait for the broker's publisher confirms of one batch.
	OutboxConfirmTimeout time.Duration `env:"OUTBOX_CONFIRM_TIMEOUT" envDefault:"5s"`
	// OutboxBatchWait is how long the relay lets rows gather before a drain that a wake-up (or a
	// drain that found rows, not a full batch) asked for. 0, the default, drains at once: the lowest
	// lag. A few ms trade that much lag for fewer drains, each of which costs two database round trips
	// and a wait for the broker's confirms (docs/performance.md: 2 ms took a fifth off the CPU an event
	// costs at 500 events/s).
	OutboxBatchWait time.Duration `env:"OUTBOX_BATCH_WAIT" envDefault:"0"`
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
	c.notNegative("OUTBOX_BATCH_WAIT", o.OutboxBatchWait)
	o.Reconnect.check(c)
	o.AMQPNames.check(c)
}
