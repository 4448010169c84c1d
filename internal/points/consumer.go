package points

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"idemshop/internal/events"
	"idemshop/internal/platform/fault"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/retry"
)

// ConsumerConfig tunes a Consumer. Every interval is configurable so that tests can run it fast.
type ConsumerConfig struct {
	AMQPURL string
	// Topology is declared at every (re)connect; the consumer reads Topology.Queue and uses
	// Topology.DeliveryLimit to tell a final failure (dead-lettered by the broker) from a retry.
	Topology rabbitmq.Topology
	// Prefetch bounds the unacknowledged messages the broker pushes to this consumer.
	Prefetch int
	// BatchSize is the most messages applied in one transaction and acknowledged with one
	// multiple-ack; BatchWait is the longest a batch waits to fill after its first message (the
	// latency a lone message pays for batching).
	BatchSize int
	BatchWait time.Duration
	// KeyPrefix namespaces the Redis lease keys (<KeyPrefix>points:dedup:<biz_id>).
	KeyPrefix string
	// LeaseTTL is the life of a claim; DoneTTL the life of the "done" marker; LeasePoll the pause
	// between two looks at a lease someone else holds.
	LeaseTTL, DoneTTL, LeasePoll time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff after a lost broker, and between
	// in-place retries of a transient database failure.
	ReconnectMin, ReconnectMax time.Duration
	// AttemptTimeout bounds one attempt at the database (a batch's credits, a reversal): a connection
	// that stops answering without closing (half-open) would otherwise hold the batch, and SIGTERM,
	// until the kernel gives up on it, for the server's statement_timeout never starts. Past it the
	// attempt fails as a transient error, on a connection the pool then drops. 0 is
	// DefaultAttemptTimeout; cmd/points-consumer passes DB_STATEMENT_TIMEOUT + 2 s.
	AttemptTimeout time.Duration
	// TopologyCheck is how often a session declares the topology again, on a channel of its own: a DLX
	// or DLQ deleted while the consumer runs was missing until it reconnected, and the broker dropped
	// every dead letter meanwhile (a quorum queue dead-letters at most once; a helper's finding,
	// 2026-12-06). 0 is DefaultTopologyCheck.
	TopologyCheck time.Duration
	// MaxRepublish bounds how many times one message is republished at its last delivery
	// (RepublishedHeader); 0 is DefaultMaxRepublish.
	MaxRepublish int
	// DrainTimeout bounds a shutdown's drain: once ctx ends, the messages already received are worked
	// on for this long at most; then the database attempt under way is cancelled (its batch is
	// nacked), and what the session still holds goes back to the queue with the channel, one delivery
	// each, as after a crash. Without it a drain during a database outage gave every batch in the
	// buffer one attempt: prefetch 30 at batch 1 with a 1 s lock timeout held SIGTERM for 31 s, and
	// prefetch 500 would have held it for minutes (a helper's finding, 2026-12-06). 0 is
	// DefaultDrainTimeout; cmd/points-consumer passes SHUTDOWN_TIMEOUT.
	DrainTimeout time.Duration
	// HandBackAfter is how long a batch may fail to reach the database, retried in place, before the
	// consumer hands its messages back to the queue, for consumers that can reach it, and waits until its
	// database answers before it subscribes again (handBack). 0 never hands back. A consumer cut off
	// from its database alone held its share of the messages (up to the prefetch, and every new one the
	// broker gave it) for the whole cut, while another consumer could have credited them (a partition
	// tester's finding, 2026-12-07: half the credits 14-54 s late during a 50 s cut).
	HandBackAfter time.Duration
	// Reachable reports whether a new connection to the database answers (postgres.Reachable); required
	// with HandBackAfter. It tells a database this consumer cannot reach from a batch that is slow on its
	// own (an account locked past DB_LOCK_TIMEOUT), which handing back would only move elsewhere.
	Reachable func(ctx context.Context) error
	// Fault is called at each crash window (Points; internal/platform/fault). Nil in production.
	Fault fault.Hook
	// Dedup is the consumer's dedup; nil is Guarded(). Only the lab passes one of its broken twins
	// (consumer_unsafe.go), and a fresh one per consumer: a Dedup may keep state.
	Dedup Dedup
}

func (c ConsumerConfig) validate() error {
	if c.AMQPURL == "" {
		return errors.New("points: consumer needs an AMQP URL")
	}
	if err := c.Topology.Validate(); err != nil {
		return fmt.Errorf("points: %w", err)
	}
	if c.Prefetch < 1 || c.BatchSize < 1 || c.BatchSize > c.Prefetch || c.BatchWait < 0 || c.LeaseTTL <= 0 || c.DoneTTL <= 0 ||
		c.LeasePoll <= 0 || c.ReconnectMin <= 0 || c.ReconnectMax < c.ReconnectMin {
		return fmt.Errorf("points: bad consumer config (prefetch %d, batch %d, lease %s, done %s, poll %s, reconnect %s..%s)",
			c.Prefetch, c.BatchSize, c.LeaseTTL, c.DoneTTL, c.LeasePoll, c.ReconnectMin, c.ReconnectMax)
	}
	if c.HandBackAfter < 0 || (c.HandBackAfter > 0 && c.Reachable == nil) {
		return fmt.Errorf("points: HandBackAfter (%s) must be 0, or positive with Reachable", c.HandBackAfter)
	}
	return nil
}

// DefaultAttemptTimeout is ConsumerConfig.AttemptTimeout when it is 0.
const DefaultAttemptTimeout = 30 * time.Second

// DefaultDrainTimeout is ConsumerConfig.DrainTimeout when it is 0 (SHUTDOWN_TIMEOUT's default).
const DefaultDrainTimeout = 15 * time.Second

// DefaultTopologyCheck is ConsumerConfig.TopologyCheck when it is 0.
const DefaultTopologyCheck = time.Minute

// DefaultMaxRepublish is ConsumerConfig.MaxRepublish when it is 0: a message is delivered at most
// (1 + 3) × 6 = 24 times before the DLQ takes it.
const DefaultMaxRepublish = 3

// Outcomes of a message, the label values of idemshop_points_messages_total.
const (
	OutcomeApplied      = "applied"       // credited (or reversed) now
	OutcomeDuplicate    = "duplicate"     // already credited (or reversed): acked without a second effect
	OutcomeFailed       = "failed"        // nacked with requeue: the broker redelivers it
	OutcomeDeadLettered = "dead_lettered" // nacked on its last allowed delivery: the broker dead-letters it
)

// Consumer credits points for order.paid messages and reverses them for order.refunded messages, each
// exactly once in effect per order. Both arrive on one queue; the delivery's routing key says which.
type Consumer struct {
	ledger   *Ledger
	leases   *leases
	cfg      ConsumerConfig
	logger   *slog.Logger
	messages *prometheus.CounterVec
	dedup    Dedup
	// republisher is the session's, nil between sessions; republishedTotal counts its copies
	// (republish.go). Only the session's goroutine touches republisher.
	republisher      *republisher
	republishedTotal prometheus.Counter
	// marking is closed once the done marks of the last batch are written; nil when none are in
	// flight. Only the session's goroutine touches it (markDoneBeside, waitMarks).
	marking chan struct{}
	// unsubscribed is why no session is subscribed to the queue now (nil while one is): Subscribed.
	unsubscribed atomic.Pointer[error]
	// unsubscribe cancels the session's subscription (nil between sessions); handedBack is set once a
	// batch was handed back, until the database answers again (handBack). Only the session's goroutine
	// touches them.
	unsubscribe func() error
	handedBack  bool
	// channelLost says whether the session's channel has closed (nil between sessions); only the
	// session's goroutine touches it. gen numbers the sessions, under subMu with the subscribed state:
	// a session's close watcher marks the consumer unsubscribed only while its session is the current one.
	channelLost func() bool
	// declared is set once a session has declared the topology (declare); only the session's
	// goroutine touches it.
	declared bool
	subMu    sync.Mutex
	gen      uint64
}

// errNotYetSubscribed is Subscribed's answer before the first session subscribed.
var errNotYetSubscribed = errors.New("not subscribed to the queue yet")

// Subscribed returns nil while a session is subscribed to the queue, else why not: the last session's
// error, or that none has subscribed yet. points-consumer's /readyz adds it to its broker check: a
// broker that answers a ping while the consumer cannot declare or consume its queue (a queue another
// connection holds exclusively, a name the broker refuses) is no ready consumer.
func (c *Consumer) Subscribed() error {
	if err := c.unsubscribed.Load(); err != nil {
		return *err
	}
	return nil
}

func (c *Consumer) setUnsubscribed(err error) { c.unsubscribed.Store(&err) }

// newSession numbers a new session (see watchChannel).
func (c *Consumer) newSession() uint64 {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.gen++
	return c.gen
}

// watchChannel marks the consumer unsubscribed as soon as session gen's channel ch closes abnormally
// (the broker closed it, the connection died), not when the session next reads its deliveries: a batch
// retried in place on a locked row reads none for as long as the lock lasts, and /readyz said "ok"
// with no consumer on the queue (a helper's finding, 2026-12-07). Call it before subscribed: a channel
// already closed leaves the consumer unsubscribed.
func (c *Consumer) watchChannel(gen uint64, ch *amqp.Channel) {
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		// A graceful close (the session's end) closes closed without a value; the session's return
		// says why then.
		if e, ok := <-closed; ok {
			c.subMu.Lock()
			defer c.subMu.Unlock()
			if c.gen == gen {
				c.setUnsubscribed(fmt.Errorf("the broker closed the consumer's channel: %w", e))
			}
		}
	}()
}

// subscribed marks session gen subscribed, unless its channel has closed already.
func (c *Consumer) subscribed(gen uint64, ch *amqp.Channel) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.gen == gen && !ch.IsClosed() {
		c.unsubscribed.Store(nil)
	}
}

// NewConsumer returns a consumer writing through db, leasing in rdb, with metrics registered on reg.
func NewConsumer(db *gorm.DB, rdb *redis.Client, cfg ConsumerConfig, logger *slog.Logger, reg prometheus.Registerer) (*Consumer, error) {
	if db == nil || rdb == nil || logger == nil || reg == nil {
		return nil, errors.New("points: NewConsumer needs a db, a redis client, a logger and a registerer")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ledger, err := NewLedger(db)
	if err != nil {
		return nil, err
	}
	messages := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemshop_points_messages_total",
		Help: "order.paid and order.refunded messages handled by points-consumer, by outcome (a redelivery counts again).",
	}, []string{"outcome"})
	republished := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idemshop_points_republished_total",
		Help: "Messages republished at their last delivery, before being held (a locked ledger, a lease held elsewhere), so that a crash or restart does not dead-letter them.",
	})
	if err := errors.Join(reg.Register(messages), reg.Register(republished)); err != nil {
		return nil, fmt.Errorf("points: register metrics: %w", err)
	}
	for _, o := range []string{OutcomeApplied, OutcomeDuplicate, OutcomeFailed, OutcomeDeadLettered} {
		messages.WithLabelValues(o) // export every outcome at 0 from the start
	}
	dedup := cfg.Dedup
	if dedup == nil {
		dedup = Guarded()
	}
	if _, guarded := dedup.(twoLayer); !guarded {
		logger.Warn("LAB UNSAFE: points-consumer runs a deliberately broken dedup; points WILL be credited twice or lost",
			"dedup", dedup.Name())
	}
	c := &Consumer{
		ledger: ledger, cfg: cfg, logger: logger.With("component", "points-consumer"), messages: messages,
		leases: &leases{rdb: rdb, prefix: cfg.KeyPrefix, ttl: cfg.LeaseTTL, doneTTL: cfg.DoneTTL},
		dedup:  dedup, republishedTotal: republished,
	}
	if c.cfg.AttemptTimeout <= 0 {
		c.cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if c.cfg.TopologyCheck <= 0 {
		c.cfg.TopologyCheck = DefaultTopologyCheck
	}
	if c.cfg.MaxRepublish <= 0 {
		c.cfg.MaxRepublish = DefaultMaxRepublish
	}
	if c.cfg.DrainTimeout <= 0 {
		c.cfg.DrainTimeout = DefaultDrainTimeout
	}
	c.setUnsubscribed(errNotYetSubscribed)
	return c, nil
}

// Run consumes until ctx is done. A lost connection or channel ends the session; Run waits an
// exponential backoff and reconnects (never spinning on a closed delivery channel). When ctx is done
// it stops the flow of new messages, finishes the ones it already received, and returns nil.
func (c *Consumer) Run(ctx context.Context) error {
	retry.Sessions(ctx, c.logger, c.cfg.ReconnectMin, c.cfg.ReconnectMax, func(ctx context.Context, progress func()) error {
		err := c.session(ctx, progress)
		if err != nil {
			c.setUnsubscribed(err)
		} else {
			c.setUnsubscribed(errors.New("session ended")) // shutdown
		}
		return err
	})
	c.waitMarks()
	c.logger.Info("points consumer stopped")
	return nil
}

func (c *Consumer) newBackoff() *retry.Exponential {
	return retry.NewExponential(c.cfg.ReconnectMin, c.cfg.ReconnectMax)
}

// session runs one connection until it is lost or ctx ends.
func (c *Consumer) session(ctx context.Context, progress func()) error {
	if c.handedBack {
		if err := c.waitForDatabase(ctx); err != nil {
			return err
		}
		c.handedBack = false
	}
	gen := c.newSession()
	conn, err := rabbitmq.Dial(ctx, c.cfg.AMQPURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	c.watchChannel(gen, ch)
	c.channelLost = ch.IsClosed
	defer func() { c.channelLost = nil }()
	if err := c.declare(conn, ch); err != nil {
		return err
	}
	// The prefetch bounds what a crash puts back in the queue and what one consumer hoards.
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	tag := "points-consumer-" + uuid.NewString()
	deliveries, err := ch.Consume(c.cfg.Topology.Queue, tag, false /* manual ack */, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Topology.Queue, err)
	}
	// Every delivery goes into the inbox as it arrives, so that the ones behind a batch stuck on the
	// database are within reach of a republish at their last delivery (republish.go).
	in := newInbox()
	go in.fill(deliveries)
	r, err := newRepublisher(conn, ch, in)
	if err != nil {
		return err
	}
	c.republisher = r
	defer func() { c.republisher = nil }()
	// On shutdown the subscription is cancelled at once, even while a batch is being handled. A batch
	// the shutdown interrupts is nacked, and an open subscription handed its messages straight back to
	// this consumer to fail again, a delivery spent each time: one SIGTERM during a database outage
	// spent two or three of a message's five (a newcomer's, 2026-12-06).
	var cancelOnce sync.Once
	var cancelErr error
	unsubscribe := func() error {
		cancelOnce.Do(func() { cancelErr = ch.Cancel(tag, false) })
		return cancelErr
	}
	defer context.AfterFunc(ctx, func() { _ = unsubscribe() })()
	c.unsubscribe = unsubscribe
	defer func() { c.unsubscribe = nil }()
	progress()
	c.subscribed(gen, ch)
	c.logger.Info("points consumer connected", "queue", c.cfg.Topology.Queue, "prefetch", c.cfg.Prefetch,
		"batch_size", c.cfg.BatchSize)
	// Work already received is finished after shutdown begins, for DrainTimeout at most; every step
	// of it is bounded too. Only that timer ends work, not the session's end: the done marks of its
	// last batch go on beside a reconnect (cancelled with a lost connection, the redelivered batch
	// waited out the leases instead of reading "done").
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer context.AfterFunc(ctx, func() { time.AfterFunc(c.cfg.DrainTimeout, cancelWork) })()
	// Messages whose lease another holder has wait here, unacknowledged, while the session goes on;
	// wake fires when the earliest of them is due for another claim, even if no delivery arrives.
	held := &deferredSet{}
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()
	topologyCheck := time.NewTicker(c.cfg.TopologyCheck)
	defer topologyCheck.Stop()
	for {
		var due <-chan time.Time
		if at, ok := held.next(); ok {
			wake.Reset(time.Until(at))
			due = wake.C
		}
		select {
		case <-ctx.Done():
			return c.drain(ctx, work, ch, unsubscribe, in, held)
		case <-in.ready:
			if in.isClosed() && ctx.Err() != nil {
				return c.drain(ctx, work, ch, unsubscribe, in, held) // closed by the shutdown's cancel
			}
			if in.isClosed() {
				// amqp091 closes the delivery channel when the channel or the connection is lost (or the
				// broker cancelled the subscription). Returning (instead of reading again) is what keeps
				// this from spinning; what the inbox still holds, the deferred messages with it, goes
				// back to the queue with the channel.
				return errors.New("delivery channel closed (connection or channel lost)")
			}
			if first, _ := in.take(c.cfg.BatchSize); len(first) > 0 {
				c.handle(ctx, work, ch, held, c.collect(first, in))
			}
			if in.len() > 0 || in.isClosed() {
				in.signal() // the rest, or the close: after a look at the other cases
			}
		case <-due:
			c.retryHeld(ctx, work, ch, held)
		case <-topologyCheck.C:
			c.checkTopology(conn)
		}
		if c.handedBack {
			// A batch (new, or deferred ones claimed again) was nacked and the subscription cancelled:
			// the deferred messages go back too, and what the inbox still holds goes with the channel,
			// to the consumers that can reach the database.
			c.giveBack(ch, held, errHandedBack.Error())
			return errHandedBack
		}
	}
}

// drain stops new deliveries and handles the ones already in the client's buffer. amqp091 closes the
// delivery channel after the cancel once that buffer is empty. Deferred messages are given back
// first (nack, requeue), never acked: their leases are someone else's and the ledger may not have
// their credit. A held lease met while draining fails the same way at once (claim sees ctx done).
// Once work ends (DrainTimeout after the shutdown began) the rest is left unsettled: the session
// closes the channel, and the broker requeues it.
func (c *Consumer) drain(ctx, work context.Context, ch *amqp.Channel, unsubscribe func() error, in *inbox, held *deferredSet) error {
	if err := unsubscribe(); err != nil {
		return nil // channel already gone: the broker requeues whatever was unacknowledged
	}
	c.giveBack(ch, held, "shutting down while another consumer holds the lease")
	for {
		if work.Err() != nil {
			c.logger.Warn("shutdown: the drain timeout passed; the messages not yet handled go back to the queue",
				"drain_timeout", c.cfg.DrainTimeout, "left", in.len())
			return nil
		}
		first, closed := in.take(c.cfg.BatchSize)
		if len(first) > 0 {
			c.handle(ctx, work, ch, held, c.collect(first, in))
			continue
		}
		if closed {
			return nil
		}
		select {
		case <-in.ready: // the client closes deliveries once its buffer is handed over, and fill signals it
		case <-work.Done():
		}
	}
}

// collect adds to first the deliveries that arrive within BatchWait, up to BatchSize. Under a
// backlog the batch fills in microseconds; a lone message waits BatchWait at most.
//
// A shutdown ends the wait too: it cancels the subscription (session), the client then closes
// deliveries, and the inbox signals it, so a long BatchWait does not hold SIGTERM.
func (c *Consumer) collect(first []amqp.Delivery, in *inbox) []amqp.Delivery {
	batch := first
	if len(batch) >= c.cfg.BatchSize {
		return batch
	}
	c.logger.Debug("points batch waiting to fill", "messages", len(batch), "batch_wait", c.cfg.BatchWait)
	linger := time.NewTimer(c.cfg.BatchWait)
	defer linger.Stop()
	for len(batch) < c.cfg.BatchSize {
		more, closed := in.take(c.cfg.BatchSize - len(batch))
		batch = append(batch, more...)
		if closed || len(batch) == c.cfg.BatchSize {
			return batch
		}
		select {
		case <-in.ready:
		case <-linger.C:
			return batch
		}
	}
	return batch
}

// message is one delivery on its way through a batch. decode fills exactly one of credit (order.paid)
// and reversal (order.refunded).
type message struct {
	d        amqp.Delivery
	kind     string // the event's routing key (order.paid or order.refunded), set by decode
	eventID  string // for log lines only, so clipped (logging.Clip): the body may be as long as the broker allows
	credit   Credit
	reversal *Reversal
	leased   bool // we hold its Redis lease: mark it done or release it
	// republished: a copy is in the queue and this delivery is acked already (republish.go); settle
	// counts its outcome and leaves it alone.
	republished bool
	// maybeDone: its lease said "done". The ledger still decides; an applied one is worth a warning,
	// because it means Redis remembered a credit the database did not have.
	maybeDone bool
	first     *message   // an earlier message with the same biz_id, whose outcome this one follows
	dups      []*message // the later messages with this one's biz_id (their first is this one)
	// waiting: someone else holds its lease, and it waits in the session's deferred set, unsettled,
	// to be claimed again at retryAt; it fails if the lease is still held at giveUpAt.
	waiting           bool
	retryAt, giveUpAt time.Time
	leaseLeft         time.Duration // at the last claim, how long the holder's lease had left
	outcome           string
	err               error
}

// sameReversal reports whether m and d carry the same reversal, or none.
func (m *message) sameReversal(d *message) bool {
	if m.reversal == nil || d.reversal == nil {
		return m.reversal == d.reversal
	}
	return *m.reversal == *d.reversal
}

// follow makes d a copy of m: it is settled with m's outcome and never applied on its own.
func (m *message) follow(d *message) {
	d.first = m
	m.dups = append(m.dups, d)
}

// Dedup is the consumer's swap point, as idempotency.Runner is the order route's: it takes one batch
// of deliveries through decode, claim, apply and settle. Guarded() is the two-layer dedup below; the
// lab's broken twins, NoDedup() (S6) and ClaimFirst() (S11) in consumer_unsafe.go, make the same calls
// and differ from it by the guard alone.
type Dedup interface {
	// Name is what the consumer logs: "two-layer", "s6-no-dedup" or "s11-claim-first".
	Name() string
	handle(c *Consumer, ctx, work context.Context, ch *amqp.Channel, held *deferredSet, ds []amqp.Delivery)
}

// Guarded returns the dedup of production: a Redis lease per order in front, the ledger's unique
// biz_id behind.
func Guarded() Dedup { return twoLayer{} }

type twoLayer struct{}

func (twoLayer) Name() string { return "two-layer" }

// handle takes one batch through the consumer's dedup.
func (c *Consumer) handle(ctx, work context.Context, ch *amqp.Channel, held *deferredSet, ds []amqp.Delivery) {
	c.dedup.handle(c, ctx, work, ch, held, ds)
}

// handle runs one batch through the two dedup layers and settles every delivery of it, except the
// ones whose lease someone else holds: those are set aside in held (see setAside).
//
//  1. decode by routing key (order.paid: a credit, order.refunded: a reversal); a message that does
//     not decode or validate fails (poison: after the delivery limit the broker dead-letters it, and
//     it is never applied);
//  2. layer 1: claim a Redis lease per order (SET NX PX); "done" = maybe a duplicate, the ledger
//     decides (a cache never outvotes the ledger); held by someone else = set aside, unacknowledged,
//     and claimed again later, never ack-and-drop;
//  3. layer 2: ONE transaction inserts the credits' ledger rows (unique biz_id) and updates the
//     balances; each reversal runs in a transaction of its own (Ledger.Reverse); an existing biz_id
//     inserts nothing and is a duplicate;
//  4. release the leases of failed messages, and mark the others done (EX DoneTTL) beside step 5
//     (markDoneBeside: the next claim waits for the marks);
//  5. nack the failures one by one (requeue), then ack every success (one multiple-ack when no
//     deferred message has a lower delivery tag).
func (twoLayer) handle(c *Consumer, ctx, work context.Context, ch *amqp.Channel, held *deferredSet, ds []amqp.Delivery) {
	msgs := make([]*message, len(ds))
	byBiz := make(map[string]*message, len(ds))
	var firsts []*message
	for i, d := range ds {
		m := &message{d: d}
		msgs[i] = m
		if err := m.decode(); err != nil {
			m.outcome, m.err = OutcomeFailed, err
			continue
		}
		// The same event of one order twice in one batch (a republish next to the original): one is
		// enough. An order's order.paid and order.refunded have different biz_ids and both go on. Two
		// messages with one biz_id that say different things (a broken or forged one beside the real
		// one) are not copies: each goes on, the second waits on the first's lease (claim: held), and
		// the ledger judges each. A copy takes its first's outcome, so a poison first would have
		// dead-lettered the real event with it.
		f := byBiz[m.bizID()]
		if f != nil && f.credit == m.credit && f.sameReversal(m) {
			f.follow(m)
			continue
		}
		if f == nil {
			byBiz[m.bizID()] = m
		}
		firsts = append(firsts, m)
	}
	c.process(ctx, work, ch, held, msgs, firsts)
}

// retryHeld claims again the deferred messages that are due, at most BatchSize at a time, and takes
// each group through the same steps as a new batch: the ones still held go back to waiting.
func (c *Consumer) retryHeld(ctx, work context.Context, ch *amqp.Channel, held *deferredSet) {
	now := time.Now()
	// One batch at a time, the rest left in held until its turn: settle's multiple-ack acknowledges
	// every delivery below the batch's highest tag that held does not show. Taken out all at once, a
	// due message waiting for the next batch was acked unread by this one's (a copy of an earlier
	// order has a later tag), then acked again in its own, and the broker closed the channel on the
	// unknown delivery tag: every message handled on it since came back and was counted twice (CI,
	// 2026-12-07). One set aside again here is due a LeasePoll after now, not in this loop.
	for {
		firsts := held.takeDue(now, c.cfg.BatchSize)
		if len(firsts) == 0 {
			return
		}
		var msgs []*message
		for _, m := range firsts {
			msgs = append(append(msgs, m), m.dups...)
		}
		c.process(ctx, work, ch, held, msgs, firsts)
	}
}

// process is steps 2 to 5 of handle for firsts (decoded, one per biz_id); msgs are all the
// deliveries to settle (firsts, their copies, and poison messages).
func (c *Consumer) process(ctx, work context.Context, ch *amqp.Channel, held *deferredSet, msgs, firsts []*message) {
	token := uuid.NewString()
	if r := c.republisher; r != nil {
		r.batch = msgs
		defer func() { r.batch = nil }()
	}
	c.waitMarks() // the last batch's done marks, so that this claim sees them
	toApply, waiting := c.claim(work, firsts, token)
	c.setAside(ctx, held, waiting)
	if slices.ContainsFunc(toApply, func(m *message) bool { return m.leased }) {
		c.cfg.Fault.At(work, CrashAfterClaim)
	}
	c.apply(ctx, work, toApply)
	for _, m := range toApply {
		if m.maybeDone && m.outcome == OutcomeApplied {
			c.logger.Warn("dedup lease said done but the ledger had no row: applied now (was the database restored under an older Redis?)",
				"event_id", m.eventID, "biz_id", m.bizID())
		}
	}

	var doneIDs, releaseIDs []string
	for _, m := range firsts {
		switch {
		case m.outcome == OutcomeApplied || m.outcome == OutcomeDuplicate:
			doneIDs = append(doneIDs, m.bizID())
		case m.leased:
			releaseIDs = append(releaseIDs, m.bizID())
		}
	}
	if len(doneIDs) > 0 {
		c.cfg.Fault.At(work, CrashAfterCommit)
	}
	// Both are best effort: a lease that is not marked done expires and the ledger answers the
	// duplicate; a lease that is not released makes the redelivery wait until it expires.
	c.markDoneBeside(work, doneIDs)
	// Not under work alone: a drain past DrainTimeout cancelled the attempt, and its leases, left
	// held, kept the next consumer from those messages for a lease TTL (a helper's finding,
	// 2026-12-06). The Redis client's own timeouts bound it.
	if err := c.leases.release(context.WithoutCancel(work), releaseIDs, token); err != nil {
		c.logger.Warn("dedup leases not released; redeliveries wait for them to expire", "err", err)
	}
	c.settle(ch, held, msgs)
}

// markDoneBeside marks bizIDs done in Redis while the batch is acked and the next one collected: the
// credits are committed, so nothing on the batch's path waits for the marks (a lost mark costs a
// duplicate one lease TTL at most, never a credit). The next claim waits for them (waitMarks), so it
// sees every mark of the batch before it, as it did when they were written in line; this takes one
// Redis round trip off every batch (docs/performance.md).
func (c *Consumer) markDoneBeside(work context.Context, bizIDs []string) {
	c.waitMarks()
	if len(bizIDs) == 0 {
		return
	}
	marked := make(chan struct{})
	c.marking = marked
	go func() {
		defer close(marked)
		if err := c.leases.markDone(work, bizIDs); err != nil {
			c.logger.Warn("dedup leases not marked done; the ledger still refuses duplicates", "err", err)
		}
	}()
}

// waitMarks returns once the done marks of the last batch are written (or failed).
func (c *Consumer) waitMarks() {
	if c.marking != nil {
		<-c.marking
		c.marking = nil
	}
}

// logAttrs names the message in a log line.
func (m *message) logAttrs() []any {
	return []any{"event_id", m.eventID, "biz_id", m.bizID(), "routing_key", m.d.RoutingKey, "message_id", m.d.MessageId}
}

// decode parses and checks the body. One queue carries both event types, so the delivery's routing key
// chooses the type; an unknown one is poison (nacked until the broker dead-letters it), never guessed.
// The business key is the order id, never the message id: a republished event carries a new delivery,
// and possibly a new message id, for the same order.
func (m *message) decode() error {
	kind := m.d.RoutingKey
	if kind != events.RoutingKeyOrderPaid && kind != events.RoutingKeyRefunded {
		// A copy republished at its last delivery (republish.go) and a dead letter an operator moved
		// back to the queue (docs/points.md, "Replaying dead letters") come under the queue's name; the
		// event's routing key is in the copy's RoutingKeyHeader, or in the dead letter's x-death header.
		if k, ok := m.d.Headers[RoutingKeyHeader].(string); ok {
			kind = k
		} else if orig, ok := rabbitmq.DeadLetteredFrom(m.d); ok {
			kind = orig
		}
	}
	switch kind {
	case events.RoutingKeyOrderPaid:
		var ev events.OrderPaid
		if err := json.Unmarshal(m.d.Body, &ev); err != nil {
			m.eventID = logging.Clip(eventIDOf(m.d.Body))
			return fmt.Errorf("%w: decode order.paid: %w", errPoison, err)
		}
		m.eventID = logging.Clip(ev.EventID)
		if err := checkEvent(ev.EventID, ev.OrderID, ev.UserID, ev.AmountCents, ev.Points); err != nil {
			return fmt.Errorf("%w: order.paid: %w", errPoison, err)
		}
		m.credit = Credit{BizID: BizIDOrderPaid(ev.OrderID), UserID: ev.UserID, Delta: ev.Points, Reason: ReasonOrderPaid}
	case events.RoutingKeyRefunded:
		var ev events.OrderRefunded
		if err := json.Unmarshal(m.d.Body, &ev); err != nil {
			m.eventID = logging.Clip(eventIDOf(m.d.Body))
			return fmt.Errorf("%w: decode order.refunded: %w", errPoison, err)
		}
		m.eventID = logging.Clip(ev.EventID)
		// Points must be the order's whole credit: a reversal of a made-up amount is refused like a
		// credit of one, not applied "up to the balance".
		if err := checkEvent(ev.EventID, ev.OrderID, ev.UserID, ev.AmountCents, ev.Points); err != nil {
			return fmt.Errorf("%w: order.refunded: %w", errPoison, err)
		}
		m.reversal = &Reversal{OrderID: ev.OrderID, UserID: ev.UserID, Points: ev.Points}
	default:
		return fmt.Errorf("%w: unknown routing key %q", errPoison, kind)
	}
	m.kind = kind
	return nil
}

// eventIDOf reads the event_id of a body that did not decode as its event, for the log lines: the
// poison's WARN lines named no event_id when another member had the wrong type (an order_id as a
// string, an occurred_at that is no time), though the body had one (a helper's finding, 2026-12-07).
// "" when it has none, or the body is no JSON object.
func eventIDOf(body []byte) string {
	var v struct {
		EventID string `json:"event_id"`
	}
	_ = json.Unmarshal(body, &v) // the other members are skipped, whatever their types
	return v.EventID
}

// checkEvent refuses a missing event_id, ids <= 0, an amount <= 0 and a points figure that is not the
// one the amount earns. Every order has an amount > 0 (price_cents > 0, quantity >= 1): an event without
// one is broken, and applied it would write a 0-point credit under the order's biz_id, which the real
// event would then meet as a conflicting credit and be dead-lettered (the order's points lost).
func checkEvent(eventID string, orderID, userID, amountCents, points int64) error {
	if eventID == "" {
		return errors.New("no event_id")
	}
	if orderID <= 0 || userID <= 0 {
		return fmt.Errorf("order_id %d, user_id %d", orderID, userID)
	}
	if amountCents <= 0 {
		return fmt.Errorf("amount_cents %d, want > 0", amountCents)
	}
	if want := events.PointsFor(amountCents); points != want {
		return fmt.Errorf("points %d, want %d for amount_cents %d", points, want, amountCents)
	}
	return nil
}

// bizID is the message's dedup key in both layers: the ledger biz_id it writes (order-paid:<id> or
// order-refunded:<id>), which also names its Redis lease.
func (m *message) bizID() string {
	if m.reversal != nil {
		return BizIDOrderRefunded(m.reversal.OrderID)
	}
	return m.credit.BizID
}

// claim runs layer 1 once for ms (one pipelined round trip) and sorts them. toApply: the messages
// whose lease we claimed, and the ones whose lease says "done" (taken without a lease: only the
// ledger can say they are duplicates). waiting: the ones whose lease someone else holds (setAside).
func (c *Consumer) claim(work context.Context, ms []*message, token string) (toApply, waiting []*message) {
	if len(ms) == 0 {
		return nil, nil
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.bizID()
	}
	states, left, err := c.leases.claim(work, ids, token)
	if err != nil {
		// Redis is an efficiency layer: without it the ledger's unique index still decides.
		c.logger.Warn("dedup leases unavailable; relying on the ledger alone", "err", err)
		return ms, nil
	}
	for i, m := range ms {
		switch states[i] {
		case claimed:
			m.leased = true
			toApply = append(toApply, m)
		case done:
			// "done" only means "maybe done": Redis may remember an order the database does not (a
			// database restored or recreated under a Redis that kept its keys). The ledger's unique
			// index decides, in the batch's one transaction, without a lease: a row that exists
			// inserts nothing and the message is a duplicate; a missing one is credited.
			m.maybeDone = true
			toApply = append(toApply, m)
		default:
			m.leaseLeft = left[i]
			waiting = append(waiting, m)
		}
	}
	return toApply, waiting
}

// setAside deals with the messages whose lease someone else holds. Acking one would be S11's unsafe
// twin: if that holder crashed before its commit, nobody would ever credit the order. Waiting for the
// lease in place would stall the rest of the batch, and every batch behind it, for up to a lease TTL.
// So each one waits in held, unacknowledged (the prefetch bounds how many), and is claimed again
// every LeasePoll (retryHeld) until its lease is ours, done (the ledger decides) or gone; the rest of
// its batch goes on now. One LeasePoll after the lease it first found held was due to run out (its
// PTTL, or LeaseTTL if that is longer), it fails like any failure (nack,
// requeue): a lease that outlives that was taken again, not left by a crash. While shutting down it
// fails at once.
func (c *Consumer) setAside(ctx context.Context, held *deferredSet, ms []*message) {
	now := time.Now()
	for _, m := range ms {
		newlyHeld := m.giveUpAt.IsZero()
		if newlyHeld {
			// The holder's lease may be longer than ours (another POINTS_LEASE_TTL): waiting only our
			// own TTL gave up five times before it ran out, and the message went to the DLQ.
			m.giveUpAt = now.Add(max(c.cfg.LeaseTTL, m.leaseLeft) + c.cfg.LeasePoll)
		}
		switch {
		case ctx.Err() != nil:
			m.outcome, m.err = OutcomeFailed, errors.New("shutting down while another consumer holds the lease")
		case now.After(m.giveUpAt):
			m.outcome, m.err = OutcomeFailed, errors.New("lease still held after one lease TTL")
		default:
			m.retryAt = now.Add(c.cfg.LeasePoll)
			if newlyHeld {
				// Held at its last delivery, it would be dead-lettered by a crash or restart meanwhile.
				// Before add, which hands its copies (dups) to a message of its order already waiting.
				c.republishLast([]*message{m})
			}
			held.add(m)
			if newlyHeld {
				c.logger.Info("points message set aside: another consumer holds its lease; the rest of the batch goes on",
					"event_id", m.eventID, "biz_id", m.bizID(), "give_up_at", m.giveUpAt)
			}
		}
	}
}

// giveBack fails every deferred message with reason and settles it: nacked with requeue, never acked.
func (c *Consumer) giveBack(ch *amqp.Channel, held *deferredSet, reason string) {
	var msgs []*message
	for _, m := range held.takeAll() {
		m.outcome, m.err = OutcomeFailed, errors.New(reason)
		msgs = append(append(msgs, m), m.dups...)
	}
	if len(msgs) > 0 {
		c.settle(ch, held, msgs)
	}
}

// apply runs layer 2 for ms and records each outcome: the batch's credits in one transaction, then
// each reversal in a transaction of its own. Reversals are rare (a full refund), and each must lock
// its user's account row to compute how much it can take back, which a batched insert does not do.
// The order between the two does not matter: a reversal applies its order's credit first if it is
// missing (Ledger.Reverse), so whichever comes second is a no-op for that credit.
func (c *Consumer) apply(ctx, work context.Context, ms []*message) {
	// One INSERT per round, and a biz_id at most once in a round: two credits with one biz_id in one
	// statement (two messages that say different things, with no lease between them when Redis is
	// down) would both read as inserted, since the second meets the first inside the statement, whose
	// snapshot cannot show it as a conflict. In the next round the ledger judges the second against
	// the first's row (Ledger.Apply's Conflicting).
	var rounds [][]*message
	var in []map[string]bool // the biz_ids of each round
	for _, m := range ms {
		if m.reversal != nil {
			continue
		}
		i := 0
		for i < len(rounds) && in[i][m.bizID()] {
			i++
		}
		if i == len(rounds) {
			rounds, in = append(rounds, nil), append(in, map[string]bool{})
		}
		rounds[i], in[i][m.bizID()] = append(rounds[i], m), true
	}
	for _, credits := range rounds {
		c.applyCredits(ctx, work, credits)
	}
	for _, m := range ms {
		if m.reversal != nil {
			c.applyReversal(ctx, work, m)
		}
	}
}

// applyCredits writes the credits of ms in one transaction. A batch the database rejects is split and
// retried one message at a time, so one poison message fails alone.
func (c *Consumer) applyCredits(ctx, work context.Context, ms []*message) {
	if len(ms) == 0 {
		return
	}
	credits := make([]Credit, len(ms))
	for i, m := range ms {
		credits[i] = m.credit
	}
	var applied Applied
	err := c.retry(ctx, work, "applying credits", len(ms), func(attempt context.Context) (err error) {
		applied, err = c.ledger.Apply(attempt, credits)
		return err
	})
	switch {
	case err == nil:
		for _, m := range ms {
			switch id := m.credit.BizID; {
			case applied.Inserted[id]:
				m.outcome = OutcomeApplied
			case applied.Conflicting[id]:
				// Not a copy of the credit in the ledger: poison, dead-lettered for a person to judge.
				m.outcome, m.err = OutcomeFailed, fmt.Errorf("%w: order.paid: %s is in the ledger with another user or amount", errPoison, id)
			default:
				m.outcome = OutcomeDuplicate
			}
		}
	case errors.Is(err, ErrRejected) && len(ms) > 1:
		for _, m := range ms {
			c.applyCredits(ctx, work, []*message{m})
		}
	default:
		for _, m := range ms {
			m.outcome, m.err = OutcomeFailed, err
		}
	}
}

// applyReversal writes one reversal (Ledger.Reverse: the credit first if it is missing, then at most
// the current balance taken back, exactly once per order).
func (c *Consumer) applyReversal(ctx, work context.Context, m *message) {
	var applied bool
	var delta int64
	err := c.retry(ctx, work, "applying a reversal", 1, func(attempt context.Context) (err error) {
		applied, delta, err = c.ledger.Reverse(attempt, *m.reversal)
		return err
	})
	switch {
	case err != nil:
		m.outcome, m.err = OutcomeFailed, err
	case !applied:
		m.outcome = OutcomeDuplicate
	default:
		m.outcome = OutcomeApplied
		if -delta < m.reversal.Points {
			c.logger.Info("points reversed in part: the user had already spent the rest",
				"event_id", m.eventID, "order_id", m.reversal.OrderID, "user_id", m.reversal.UserID,
				"points", m.reversal.Points, "reversed", -delta)
		}
	}
}

// retry runs fn until it succeeds, the database rejects the data (ErrRejected: retrying cannot help),
// the session's channel closes (errChannelLost: the broker has the messages back) or ctx ends
// (shutdown); it returns fn's last error. A transient failure (database unreachable,
// deadlock, timeout) is not the message's fault, so it is retried in place, with the reconnect backoff
// between attempts, for as long as it lasts: a nack would spend one of the message's five returns, and
// an outage of a few minutes would push good messages into the DLQ, for a person to replay (until the
// nineteenth session of 2026-12-06 the retries stopped after 8 attempts, about 30 s, and a 3-minute
// outage did exactly that). The messages stay unacknowledged meanwhile, within the prefetch, and come
// back to another consumer if this one dies. Each attempt runs under work (which outlives shutdown)
// bounded by AttemptTimeout. After each failed attempt what the session holds at its last delivery is
// republished (republishHeld): held in place, a crash or restart would dead-letter it.
func (c *Consumer) retry(ctx, work context.Context, what string, messages int, fn func(attempt context.Context) error) error {
	if c.handedBack {
		return errHandedBack // the rest of a batch handed back goes back with it, untried
	}
	bo := c.newBackoff()
	since := time.Now()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(work, c.cfg.AttemptTimeout)
		err := fn(actx)
		cancel()
		if err == nil || errors.Is(err, ErrRejected) {
			return err
		}
		if c.channelLost != nil && c.channelLost() {
			// The broker took the messages back with the channel: retrying them here would only keep
			// this consumer off the queue for as long as the lock or the outage lasts.
			c.logger.Warn(what+" failed and the channel closed meanwhile; the broker gave the messages back, so they are not retried here",
				"err", err, "attempt", attempt, "messages", messages)
			return fmt.Errorf("%w: %w", errChannelLost, err)
		}
		c.logger.Warn(what+" failed; retrying", "err", err, "attempt", attempt, "messages", messages)
		if c.handBack(work, since, err) { // it republishes once the subscription is cancelled
			return fmt.Errorf("%w: %w", errHandedBack, err)
		}
		c.republishHeld()
		if !retry.Sleep(ctx, bo.NextBackOff()) {
			return err
		}
	}
}

// errChannelLost fails the messages of a batch whose channel closed while it was retried in place: the
// broker requeued them with the channel, and another consumer (or this one, subscribed again) has them.
var errChannelLost = errors.New("the channel closed while the batch was retried: the broker requeued it")

// errHandedBack fails the messages of a batch the consumer handed back to the queue (handBack).
var errHandedBack = errors.New("handed back to the queue: this consumer's database does not answer")

// handBack says, after a failed attempt, whether the consumer gives the batch up to the queue: when its
// attempts have failed for HandBackAfter and a new connection to the database does not answer either
// (Reachable), the database is down or this consumer is cut off from it, and another consumer may reach
// it. It cancels the subscription first, so that the messages it then nacks go to the others and not
// straight back to it; the session gives back the rest and ends, and the next one subscribes once the
// database answers (waitForDatabase). Each hand-back costs every message it holds one delivery; a
// message at its last is republished first (republishHeld), never dead-lettered by it. A database that
// answers a new connection means the batch is slow on its own (a lock): it stays, retried in place.
func (c *Consumer) handBack(work context.Context, since time.Time, err error) bool {
	if c.cfg.HandBackAfter <= 0 || time.Since(since) < c.cfg.HandBackAfter || c.unsubscribe == nil {
		return false
	}
	pctx, cancel := context.WithTimeout(work, c.cfg.AttemptTimeout)
	defer cancel()
	if c.cfg.Reachable(pctx) == nil {
		return false
	}
	c.logger.Warn("the database has not answered for POINTS_HAND_BACK_AFTER: handing this consumer's messages back to the queue; it subscribes again once the database answers",
		"hand_back_after", c.cfg.HandBackAfter, "err", err)
	_ = c.unsubscribe() // a channel already gone gives everything back anyway
	c.handedBack = true
	c.republishArrivals(work)
	return true
}

// republishArrivals republishes, once the subscription is cancelled, what the session holds at its
// last delivery: the batch, and every delivery the client hands over. Republished before the cancel,
// as after every other failed attempt, each ack freed a prefetch slot that the broker filled again at
// once: the session's end gave the refills back with its channel, and the ones at their last delivery
// were dead-lettered, uncounted (a helper's finding, 2026-12-08: 10 of 60 good messages, a prefetch's
// worth). After the cancel the broker fills no slot; the client closes the deliveries once it has
// handed over its buffer, and the inbox closes with them. It waits for that at most AttemptTimeout.
func (c *Consumer) republishArrivals(work context.Context) {
	r := c.republisher
	if r == nil {
		return
	}
	wait, cancel := context.WithTimeout(work, c.cfg.AttemptTimeout)
	defer cancel()
	for !r.inbox.isClosed() && wait.Err() == nil {
		select {
		case <-r.inbox.ready:
		case <-wait.Done():
		}
	}
	if !r.inbox.isClosed() {
		c.logger.Warn("hand-back: the client did not hand over its deliveries in time; republishing what the inbox holds",
			"attempt_timeout", c.cfg.AttemptTimeout)
	}
	c.republishHeld()
}

// waitForDatabase returns once a new connection to the database answers (Reachable), or ctx's error.
// It asks at least every HandBackAfter: with the reconnect backoff alone (up to 30 s) a consumer
// subscribed again 30 s after its database came back (a verifier's finding, 2026-12-07).
func (c *Consumer) waitForDatabase(ctx context.Context) error {
	bo := c.newBackoff()
	bo.MaxInterval = min(bo.MaxInterval, c.cfg.HandBackAfter)
	for {
		pctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		err := c.cfg.Reachable(pctx)
		cancel()
		if err == nil {
			c.logger.Info("the database answers again: subscribing")
			return nil
		}
		if !retry.Sleep(ctx, bo.NextBackOff()) {
			return ctx.Err()
		}
	}
}

// errPoison marks a message that fails by itself, every time: undecodable, invalid, or in conflict with
// the ledger. ErrRejected (the ledger refused it) is one too.
var errPoison = errors.New("poison message")

// rejects says how a failed message goes back: rejected when it is poison, nacked when it failed for
// another reason (a shutdown, a lease held past its TTL, a database that did not answer). Both requeue.
// RabbitMQ 3.x counts either toward x-delivery-limit; 4.3 and later count only basic.reject (a delivery
// that failed) and not basic.nack (a consumer that cannot take it now), so a nack there would requeue
// poison for ever and never dead-letter it, and a reject of a message that did not fail would spend
// its deliveries.
func rejects(m *message) bool { return errors.Is(m.err, errPoison) || errors.Is(m.err, ErrRejected) }

// giveBackFailed returns the failed delivery m to its queue, as rejects says.
func giveBackFailed(ch *amqp.Channel, m *message) error {
	if rejects(m) {
		return ch.Reject(m.d.DeliveryTag, true)
	}
	return ch.Nack(m.d.DeliveryTag, false, true)
}

// settle acks or nacks every delivery of msgs but the ones waiting in held (and their copies).
// Failures are given back first, one by one, with requeue (rejected if poison: giveBackFailed); then
// the successes are acked. One multiple-ack
// of the highest success acknowledges every outstanding delivery up to its tag: exactly the
// successes, because this goroutine is the only one settling on ch and every earlier delivery is
// settled already, unless it waits in held (the inbox holds only later ones: inbox.putBack keeps it in
// delivery order). So the multiple-ack is used only when no waiting message has a lower tag; otherwise
// each success is acked on its own.
func (c *Consumer) settle(ch *amqp.Channel, held *deferredSet, msgs []*message) {
	var oks []uint64
	var lastOK uint64
	nackFailed := false
	for _, m := range msgs {
		if m.waiting || (m.first != nil && m.first.waiting) {
			continue // set aside: settled when its lease is decided
		}
		if m.first != nil { // a copy follows its first
			switch m.first.outcome {
			case OutcomeFailed:
				m.outcome, m.err = OutcomeFailed, m.first.err
			default:
				m.outcome = OutcomeDuplicate
			}
		}
		if m.republished { // acked already, its copy in the queue: only counted
			c.messages.WithLabelValues(m.outcome).Inc()
			continue
		}
		if m.outcome != OutcomeFailed {
			oks = append(oks, m.d.DeliveryTag)
			lastOK = max(lastOK, m.d.DeliveryTag)
			c.messages.WithLabelValues(m.outcome).Inc()
			// Checked first: building the attributes of 100 messages per batch for a line that is not
			// written was a tenth of the batch's acks.
			if c.logger.Enabled(context.Background(), slog.LevelDebug) {
				c.logger.Debug("points message handled", append(m.logAttrs(), "outcome", m.outcome)...)
			}
			continue
		}
		log := c.logger.With(m.logAttrs()...)
		outcome := OutcomeFailed
		// RabbitMQ 3.x quorum queues count every return in x-delivery-count; a return of a message
		// that already reached the limit dead-letters it instead of requeueing it.
		if rabbitmq.DeliveryCount(m.d) >= int64(c.cfg.Topology.DeliveryLimit) {
			outcome = OutcomeDeadLettered
		}
		if err := giveBackFailed(ch, m); err != nil {
			log.Warn("nack failed; the broker requeues the message when the channel closes", "err", err)
			// A multiple-ack below would also ack this delivery (its tag may be lower) and drop it.
			// Leave everything unsettled: the closing channel returns it all, and dedup absorbs it.
			nackFailed = true
		}
		c.messages.WithLabelValues(outcome).Inc()
		log.Warn("points message failed", "outcome", outcome, "err", m.err,
			"delivery_count", rabbitmq.DeliveryCount(m.d))
	}
	if len(oks) == 0 || nackFailed {
		return
	}
	// An ack lost here (channel gone) means a redelivery, which the ledger answers as a duplicate.
	if len(oks) == 1 || !held.hasTagBelow(lastOK) {
		if err := ch.Ack(lastOK, len(oks) > 1); err != nil {
			c.logger.Warn("ack failed; the redelivery will be a duplicate", "err", err)
		}
		return
	}
	for _, tag := range oks {
		if err := ch.Ack(tag, false); err != nil {
			c.logger.Warn("ack failed; the redeliveries will be duplicates", "err", err)
			return
		}
	}
}
