package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"idemshop/internal/events"
)

// Reconnect is the backoff between broker connection attempts, shared by the outbox relay and
// points-consumer: exponential from Min, capped at Max, with jitter so that replicas cut off together
// do not all come back in the same instant.
type Reconnect struct {
	Min time.Duration `env:"AMQP_RECONNECT_MIN" envDefault:"250ms"`
	Max time.Duration `env:"AMQP_RECONNECT_MAX" envDefault:"30s"`
}

func (r Reconnect) check(c *checks) {
	c.positive("AMQP_RECONNECT_MIN", r.Min)
	if r.Max < r.Min {
		c.add(fmt.Errorf("AMQP_RECONNECT_MAX must be >= AMQP_RECONNECT_MIN, got %s", r.Max))
	}
}

// AMQPNames namespaces the broker objects: the prefix goes in front of the exchange, queue, DLX and
// DLQ names (default: none, the names of docs/design.md, "Events"). The relay and the consumer must agree on it.
type AMQPNames struct {
	NamePrefix string `env:"AMQP_NAME_PREFIX"`
}

// prefixSeparators are the characters a non-empty AMQP_NAME_PREFIX, and REDIS_KEY_PREFIX, must end with.
const prefixSeparators = ":.-_/"

// check refuses a prefix under which a run's names could not be told from the shop's own, and which
// `orders teardown` would refuse to clean: one that does not end with a separator ("idemshop" names the
// queue idemshoppoints.order-paid), and one that a default name starts with ("points." covers the
// shop's points.order-paid, and teardown under it would delete it with its messages).
func (a AMQPNames) check(c *checks) {
	p := a.NamePrefix
	if p == "" {
		return
	}
	if !strings.ContainsAny(p[len(p)-1:], prefixSeparators) {
		c.add(fmt.Errorf("AMQP_NAME_PREFIX must be empty or end with one of %q (e.g. %q), got %q", prefixSeparators, p+":", p))
		return
	}
	names := []string{events.Exchange, events.DeadLetterExchange, events.QueueOrderPaid, events.QueueOrderPaidDLQ}
	longest := slices.MaxFunc(names, func(a, b string) int { return cmp.Compare(len(a), len(b)) })
	if len(p)+len(longest) > 255 {
		// AMQP names are short strings: the broker refuses a longer one, and the relay and the
		// consumer would retry its declaration for ever.
		c.add(fmt.Errorf("AMQP_NAME_PREFIX must be at most %d bytes (%q under it must fit AMQP's 255), got %d", 255-len(longest), longest, len(p)))
		return
	}
	for _, n := range names {
		if strings.HasPrefix(n, p) {
			c.add(fmt.Errorf("AMQP_NAME_PREFIX %q: the shop's own %q is under it, so a run's names could not be told from the shop's", p, n))
			return
		}
	}
}

// PointsConsumer is the configuration of cmd/points-consumer. Names and defaults are documented in
// docs/points.md ("Environment").
type PointsConsumer struct {
	HTTPAddr string `env:"HTTP_ADDR" envDefault:":8082"`
	Log
	HTTP
	Postgres
	Redis
	Startup
	Reconnect
	AMQPNames
	AMQPURL string `env:"AMQP_URL" envDefault:"amqp://guest:guest@127.0.0.1:5672/"`
	// Lab arms the crash hooks named by Fault; without it Fault must be empty.
	Lab bool `env:"ORDERS_LAB" envDefault:"false"`

	// Prefetch bounds the unacknowledged messages the broker pushes to this consumer.
	Prefetch int `env:"POINTS_PREFETCH" envDefault:"200"`
	// BatchSize is the most messages applied in one database transaction and acknowledged with one
	// multiple-ack; 1 = one message per transaction.
	BatchSize int `env:"POINTS_BATCH_SIZE" envDefault:"100"`
	// BatchWait is the longest a batch waits to fill after its first message.
	BatchWait time.Duration `env:"POINTS_BATCH_WAIT" envDefault:"5ms"`
	// LeaseTTL is how long a Redis claim (layer 1) blocks other consumers of the same order; after a
	// crash between claim and commit it is how long the redelivery waits before crediting.
	LeaseTTL time.Duration `env:"POINTS_LEASE_TTL" envDefault:"30s"`
	// DoneTTL is how long the "done" marker answers duplicates without a database round trip.
	DoneTTL time.Duration `env:"POINTS_DONE_TTL" envDefault:"24h"`
	// LeasePoll is how often a message whose order is claimed by someone else re-checks the lease.
	LeasePoll time.Duration `env:"POINTS_LEASE_POLL" envDefault:"100ms"`
	// HandBackAfter is how long a batch may fail to reach the database before the consumer hands its
	// messages back to the queue, if a new connection does not answer either, and waits for the
	// database before it subscribes again (points.ConsumerConfig.HandBackAfter); 0 never.
	HandBackAfter time.Duration `env:"POINTS_HAND_BACK_AFTER" envDefault:"10s"`
	// TopologyCheck is how often the consumer declares its exchanges and queues again, so that a DLX or
	// DLQ deleted while it runs is back within it (points.ConsumerConfig.TopologyCheck).
	TopologyCheck time.Duration `env:"POINTS_TOPOLOGY_CHECK" envDefault:"1m"`
	// Fault names a lab crash point: crash-after-claim or crash-after-commit. Needs ORDERS_LAB=true.
	Fault             string        `env:"POINTS_FAULT"`
	ReadyProbeTimeout time.Duration `env:"READY_PROBE_TIMEOUT" envDefault:"2s"`
}

// LoadPointsConsumer reads and validates the points-consumer configuration from the environment.
func LoadPointsConsumer() (PointsConsumer, error) {
	c, err := env.ParseAs[PointsConsumer]()
	if err != nil {
		return c, fmt.Errorf("config: %w", nameVariables[PointsConsumer](err))
	}
	if err := setButEmpty("HTTP_ADDR", "DATABASE_URL", "REDIS_URL", "REDIS_KEY_PREFIX", "AMQP_URL"); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	return c, c.Validate()
}

// Validate checks values the parser cannot; each error names its variable.
func (c PointsConsumer) Validate() error {
	var ck checks
	ck.listenAddr("HTTP_ADDR", c.HTTPAddr)
	c.HTTP.check(&ck)
	c.Postgres.check(&ck)
	c.Redis.check(&ck)
	c.Startup.check(&ck)
	ck.absoluteURL("AMQP_URL", c.AMQPURL)
	c.Reconnect.check(&ck)
	c.AMQPNames.check(&ck)
	ck.redisMillis("POINTS_LEASE_TTL", c.LeaseTTL)
	ck.notNegative("POINTS_BATCH_WAIT", c.BatchWait)
	ck.redisMillis("POINTS_DONE_TTL", c.DoneTTL)
	ck.positive("POINTS_LEASE_POLL", c.LeasePoll)
	ck.notNegative("POINTS_HAND_BACK_AFTER", c.HandBackAfter)
	// Each check opens channels and looks the four names up: at 1ms a backlog drained 2.8 times slower
	// (a helper's finding, 2026-12-06).
	if c.TopologyCheck < time.Second {
		ck.add(fmt.Errorf("POINTS_TOPOLOGY_CHECK must be >= 1s, got %s", c.TopologyCheck))
	}
	ck.positive("READY_PROBE_TIMEOUT", c.ReadyProbeTimeout)
	if c.Prefetch < 1 || c.Prefetch > 65535 {
		ck.add(fmt.Errorf("POINTS_PREFETCH must be 1..65535, got %d", c.Prefetch))
	}
	if c.BatchSize < 1 || c.BatchSize > c.Prefetch {
		ck.add(fmt.Errorf("POINTS_BATCH_SIZE must be 1..POINTS_PREFETCH (%d), got %d", c.Prefetch, c.BatchSize))
	}
	if c.LeasePoll > 0 && c.LeasePoll > c.LeaseTTL {
		ck.add(fmt.Errorf("POINTS_LEASE_POLL (%s) must be <= POINTS_LEASE_TTL (%s)", c.LeasePoll, c.LeaseTTL))
	}
	// The names are points.Points; checked here too so that a typo stops the process before it waits
	// for its database.
	switch c.Fault {
	case "":
	case "crash-after-claim", "crash-after-commit":
		if !c.Lab {
			ck.add(errors.New("POINTS_FAULT needs ORDERS_LAB=true (crash hooks exist only in lab mode)"))
		}
	default:
		ck.add(fmt.Errorf("POINTS_FAULT must be crash-after-claim or crash-after-commit, got %q", c.Fault))
	}
	return ck.err()
}

// DefaultPointsConsumer returns the configuration with every default and nothing read from the
// environment; tests start from it and override fields.
func DefaultPointsConsumer() PointsConsumer {
	c, err := env.ParseAsWithOptions[PointsConsumer](env.Options{Environment: map[string]string{}})
	if err != nil {
		panic(fmt.Sprintf("config: defaults do not parse: %v", err)) // a bug in the struct tags
	}
	return c
}
