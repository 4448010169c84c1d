package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"idemshop/internal/decisions"
	"idemshop/internal/platform/pgtx"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/retry"
)

// RelayConfig tunes a Relay. Every interval is configurable so that tests can run it fast.
//
// The relay drains the outbox when it is woken (Wake: by a writer of its own process after that writer's
// commit; or by a notification, LISTEN/NOTIFY, listen.go), again after a drain that found rows, and
// otherwise when PollInterval has passed since its last drain, whichever comes first. The first two
// wait BatchWait first (none by default).
type RelayConfig struct {
	AMQPURL string
	// Topology is declared at every (re)connect; rows are published to Topology.Exchange with their
	// own routing_key.
	Topology rabbitmq.Topology
	// BatchSize is the most rows locked, published and marked in one transaction.
	BatchSize int
	// PollInterval is the longest pause after a drain that found nothing, when no wake-up comes. It is
	// the fallback: it bounds the lag of a row that nothing announced (a writer of another process, or
	// of this one that does not call Wake; no writer calls Notify), and costs one empty poll per
	// interval when the shop is quiet. It is also how often, at most, the pending gauge is refreshed.
	PollInterval time.Duration
	// ConfirmTimeout bounds the wait for the broker's confirms of one batch.
	ConfirmTimeout time.Duration
	// BatchWait is how long the rows of further commits may gather before a drain that a wake-up, or a
	// drain that found rows but not a full batch, asked for; 0 drains at once. Each drain costs two
	// database round trips and a wait for the broker's confirms whatever its size, so at a few hundred
	// events a second, when drains carry one or two rows, a wait of a few ms saves CPU for as much
	// lag. A poll's drain and the drain after a full batch never wait.
	BatchWait time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff after a lost broker or database.
	ReconnectMin, ReconnectMax time.Duration
	// Decisions, when set (the lab's live view), is told of every row the broker confirmed.
	Decisions decisions.Sink
}

func (c RelayConfig) validate() error {
	if c.AMQPURL == "" {
		return errors.New("outbox: relay needs an AMQP URL")
	}
	if err := c.Topology.Validate(); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if c.BatchSize < 1 || c.PollInterval <= 0 || c.ConfirmTimeout <= 0 || c.BatchWait < 0 || c.ReconnectMin <= 0 ||
		c.ReconnectMax < c.ReconnectMin {
		return fmt.Errorf("outbox: bad relay config %+v", c)
	}
	return nil
}

// BatchWaitMetric is the gauge that exports RelayConfig.BatchWait, in seconds.
const BatchWaitMetric = "idemshop_outbox_batch_wait_seconds"

// relayMetrics are the relay's Prometheus metrics.
type relayMetrics struct {
	pending   prometheus.Gauge
	published prometheus.Counter
	returned  prometheus.Counter
	lag       prometheus.Histogram
	// polls counts drains (one SELECT of pending rows each) by result: "rows" or "empty".
	polls         *prometheus.CounterVec
	listening     prometheus.Gauge
	notifications prometheus.Counter
	// batchWait exports RelayConfig.BatchWait, so that a measurement (loadtest bench) can say which
	// setting it ran against: it moves both the lag and the CPU an event costs.
	batchWait prometheus.Gauge
	// blocked is 1 while the broker blocks the publishing connection (a resource alarm).
	blocked prometheus.Gauge
}

func newRelayMetrics(reg prometheus.Registerer) (*relayMetrics, error) {
	m := &relayMetrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemshop_outbox_pending",
			Help: "Outbox rows not yet confirmed by the broker, counted every OUTBOX_POLL_INTERVAL by a loop of the relay's own (it grows while the broker is down).",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_outbox_published_total",
			Help: "Outbox rows published and confirmed by the broker (a republish after a crash counts again).",
		}),
		returned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_outbox_returned_total",
			Help: "Outbox rows the broker returned as unroutable (no queue bound for their routing key); left pending.",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idemshop_outbox_publish_lag_seconds",
			Help:    "Time from the outbox insert (created_at) to the broker's publisher confirm.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 17), // 1 ms .. ~65 s
		}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_outbox_polls_total",
			Help: "Times the relay looked for pending outbox rows, by result (rows, empty).",
		}, []string{"result"}),
		listening: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemshop_outbox_listening",
			Help: "1 while the relay's LISTEN connection is up (woken on commit), 0 while it only polls.",
		}),
		notifications: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_outbox_notifications_total",
			Help: "Notifications received on the outbox channel (outbox.Notify); several may wake the relay once.",
		}),
		batchWait: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: BatchWaitMetric,
			Help: "The relay's batch wait (OUTBOX_BATCH_WAIT) in seconds, as configured; 0: drains at once.",
		}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemshop_outbox_broker_blocked",
			Help: "1 while the broker blocks the relay's publishing connection (connection.blocked: a memory or disk alarm); nothing is published meanwhile.",
		}),
	}
	for _, c := range []prometheus.Collector{m.pending, m.published, m.returned, m.lag, m.polls, m.listening,
		m.notifications, m.batchWait, m.blocked} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("outbox: register metrics: %w", err)
		}
	}
	return m, nil
}

// Relay publishes pending outbox rows to RabbitMQ. Several replicas may run at once: each batch is
// claimed with FOR UPDATE SKIP LOCKED, so two relays never hold the same row.
//
// The transaction boundary is the whole batch: lock rows, publish them, wait for the confirms, mark
// the confirmed rows, commit. Holding the row locks across the publish costs nothing to the other
// relays (they skip locked rows) and nothing to the writers (they insert new rows). The crash windows:
//   - before the confirm: the row is still pending and is published again later;
//   - after the confirm, before the commit (crash, lost database, failed commit): the marks roll back,
//     so the row is published again. The broker then holds two copies with the same message_id and the
//     same body; points-consumer de-duplicates on the order id and credits once.
//
// Delivery is therefore at least once, never at most once: a row is marked only after the broker
// confirmed it had taken responsibility for the message (persistent, on a durable quorum queue).
//
// A confirm alone does not say that: the broker also confirms a message that no queue is bound for,
// after dropping it. So every message is published mandatory, and one the broker returns (basic.return,
// which RabbitMQ sends before the basic.ack of the same message on the same channel) is not marked: it
// stays pending like a nacked one, and the session ends, so that the relay reconnects after its backoff
// and declares the topology again before the next attempt.
type Relay struct {
	db      *gorm.DB
	cfg     RelayConfig
	logger  *slog.Logger
	metrics *relayMetrics

	// wake carries the wake-ups (Wake, and the listener's, listen.go) to the publishing loop. It holds
	// one: while a wake-up is pending, more add nothing, so a burst of commits costs one drain.
	wake chan struct{}

	// health is what Health reports: errNotStarted, then nil after each drain that went through, or
	// the error that ended the last publishing session.
	healthMu sync.Mutex
	health   error

	// declared is set once a session has declared the topology (declare); only the publishing loop
	// touches it.
	declared bool

	// beforeMark, when set by a test, runs after the confirms and before the rows are marked; an
	// error from it rolls the batch back, which is what a crash at that point leaves behind.
	beforeMark func() error
	// beforeListen, when set by a test, runs before each listen connection is opened; an error fails
	// that attempt, as an unreachable database would.
	beforeListen func() error
}

// NewRelay returns a relay over db that registers its metrics on reg.
func NewRelay(db *gorm.DB, cfg RelayConfig, logger *slog.Logger, reg prometheus.Registerer) (*Relay, error) {
	if db == nil || logger == nil || reg == nil {
		return nil, errors.New("outbox: NewRelay needs a db, a logger and a registerer")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newRelayMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.polls.WithLabelValues("rows")
	m.polls.WithLabelValues("empty") // both series exported from the start, at zero
	m.batchWait.Set(cfg.BatchWait.Seconds())
	return &Relay{db: db, cfg: cfg, logger: logger.With("component", "outbox-relay"), metrics: m,
		wake: make(chan struct{}, 1), health: errNotStarted}, nil
}

// errNotStarted is Health's answer before the publishing session's first drain.
var errNotStarted = errors.New("relay has not drained the outbox yet")

// Health reports whether events get through: nil after a drain of the publishing session went through
// (its rows confirmed by the broker and marked, or none pending), otherwise why not (not started yet,
// or the error that ended the last session: the broker, its confirms, the database), until the next
// drain goes through. It is /readyz's outbox check. A broker that answers a probe is not enough: with
// OUTBOX_CONFIRM_TIMEOUT shorter than the broker's confirms, every batch failed and the session
// restarted, nothing was published, and /readyz said ok (a helper's finding, 2026-12-06). It costs
// nothing: no connection is opened.
func (r *Relay) Health() error {
	r.healthMu.Lock()
	defer r.healthMu.Unlock()
	return r.health
}

func (r *Relay) setHealth(err error) {
	r.healthMu.Lock()
	r.health = err
	r.healthMu.Unlock()
}

// Run publishes until ctx is done. Two loops run side by side, each reconnecting with the same
// exponential backoff after a failure: the broker session (session, below) publishes, and the listener
// (listen.go) holds the LISTEN connection that wakes it. A lost listener only slows the relay down to
// its poll. Run returns nil once ctx is done.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		retry.Sessions(ctx, r.logger.With("part", "listener"), r.cfg.ReconnectMin, r.cfg.ReconnectMax, r.listen)
	})
	// The pending gauge has a loop of its own: while the broker is down it is the one sign of the
	// events piling up, and the publishing loop is then waiting to reconnect.
	wg.Go(func() { retry.Every(ctx, r.cfg.PollInterval, func() { r.updatePending(ctx) }) })
	retry.Sessions(ctx, r.logger, r.cfg.ReconnectMin, r.cfg.ReconnectMax, func(ctx context.Context, progress func()) error {
		err := r.session(ctx, func() {
			r.setHealth(nil)
			progress()
		})
		if err != nil {
			r.setHealth(fmt.Errorf("publishing session ended: %w", err))
		}
		return err
	})
	wg.Wait()
	r.logger.Info("outbox relay stopped")
	return nil
}

// declare declares the topology on the session's channel ch, and raises topology_missing for what a
// session after the process's first finds gone (rabbitmq.Redeclare): points-consumer's own check
// finds nothing missing once the relay's reconnect has declared it again.
func (r *Relay) declare(conn *amqp.Connection, ch *amqp.Channel) error {
	missing, err := rabbitmq.Redeclare(conn, ch, r.cfg.Topology, r.declared)
	if len(missing) > 0 {
		r.logger.Error("ALERT: part of the topology was deleted since the relay's last session; declared again. Dead letters of the gap were dropped by the broker",
			"alert", "topology_missing", "missing", missing)
	}
	if err != nil {
		return err
	}
	r.declared = true
	return nil
}

// session runs one broker connection until it fails or ctx ends. progress is called whenever the
// session proves healthy, which resets the reconnect backoff.
func (r *Relay) session(ctx context.Context, progress func()) error {
	conn, err := rabbitmq.Dial(ctx, r.cfg.AMQPURL)
	if err != nil {
		return err
	}
	defer func() { _ = rabbitmq.CloseWithin(conn, r.cfg.ConfirmTimeout) }() // a stalled broker never answers its close
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := r.declare(conn, ch); err != nil {
		return err
	}
	// Publisher confirms: the broker acks each message once it has taken responsibility for it.
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("enable publisher confirms: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	block := followBlocks(conn, r.blockChanged)
	// Mandatory publishes come back as basic.return when no queue is bound for them. A batch has at most
	// BatchSize returns, and every one arrives before the confirm of its message, so publish drains them
	// all before the next batch: the buffer is never full, and the client never has to drop one (it
	// gives up on a full listener after a few seconds).
	returns := ch.NotifyReturn(make(chan amqp.Return, r.cfg.BatchSize))
	r.logger.Info("outbox relay connected", "exchange", r.cfg.Topology.Exchange)
	for {
		if reason, cleared := block.blocked(); cleared != nil {
			if err := r.waitForClear(ctx, reason, cleared, closed); err != nil || ctx.Err() != nil {
				return err
			}
		}
		// This drain sees every row committed before it starts, so a wake-up already waiting asks for
		// nothing more: take it, or it would cost one more (empty) drain.
		select {
		case <-r.wake:
		default:
		}
		n, err := r.publishBatch(ctx, ch, returns, block)
		if err != nil {
			// A batch left unconfirmed because the broker blocked the connection meanwhile does not
			// say the connection is broken, and a new one would be blocked too: its rows stay pending
			// (their attempt and last_error recorded), and the loop waits for the clear here. Their
			// copies in this connection's socket reach the queue after the clear, beside the rows'
			// next publish: duplicates the consumers drop, at most one batch of them per block.
			if _, cleared := block.blocked(); cleared == nil || ctx.Err() != nil {
				return err
			}
			r.logger.Warn("outbox batch not confirmed while the broker blocks the connection; its rows stay pending", "err", err)
			continue
		}
		progress()
		if n == 0 {
			r.metrics.polls.WithLabelValues("empty").Inc()
		} else {
			r.metrics.polls.WithLabelValues("rows").Inc()
		}
		if n > 0 && ctx.Err() == nil {
			// Rows came in while this batch was published (its rest, if it was full): look again,
			// at once after a full batch. Only a drain that found nothing waits for a wake-up or the
			// poll, so under load no row waits for the poll.
			if n < r.cfg.BatchSize {
				r.gather(ctx)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			return fmt.Errorf("channel closed: %v", e)
		case <-r.wake: // a writer committed new rows (Wake, or a notification): drain now
			r.gather(ctx)
		case <-time.After(r.cfg.PollInterval): // the fallback: finds rows nothing announced
		}
	}
}

// waitForClear holds the publishing loop while the broker blocks its connection, on that connection:
// the alarm is node-wide, so a new connection would be blocked at its first publish. It returns nil
// when the block clears or ctx ends; an error when the channel closes meanwhile (the session ends).
// No batch's transaction is held open across the wait: a batch in flight when the block began waited
// for its confirms at most ConfirmTimeout, as always, and ended.
func (r *Relay) waitForClear(ctx context.Context, reason string, cleared <-chan struct{}, closed <-chan *amqp.Error) error {
	r.setHealth(blockedError(reason)) // again: a batch that went through before the block said ok
	select {
	case <-ctx.Done():
		return nil
	case e := <-closed:
		return fmt.Errorf("channel closed while blocked by the broker: %v", e)
	case <-cleared:
		return nil
	}
}

// blockChanged reports a block of the publishing connection as it begins and ends: log, gauge, health.
// The health's ok comes back with the next drain that goes through.
func (r *Relay) blockChanged(active bool, reason string) {
	if active {
		r.logger.Warn("outbox relay blocked by the broker (a resource alarm): nothing is published until it clears; rows stay pending",
			"reason", reason)
		r.metrics.blocked.Set(1)
		r.setHealth(blockedError(reason))
		return
	}
	// WARN as its start is: a log read at warn level (the soak's, the demo's) must show the block ending.
	// A connection that closed while blocked ends its block without a clear: the next one is blocked
	// at its first publish if the alarm goes on.
	r.logger.Warn("outbox relay's block ended", "why", reason)
	r.metrics.blocked.Set(0)
}

func blockedError(reason string) error {
	return fmt.Errorf("blocked by the broker (%s): nothing is published until its alarm clears", reason)
}

// gather waits BatchWait (or until ctx ends) before a drain, so that the rows of the commits in that
// window share its batch: their wake-ups wait in the wake channel, and the drain takes them as it
// starts.
func (r *Relay) gather(ctx context.Context) {
	if r.cfg.BatchWait <= 0 {
		return
	}
	t := time.NewTimer(r.cfg.BatchWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Wake asks the publishing loop for one more drain, without waiting; call it after a commit that
// inserted outbox rows (never before: the drain would not see them). The wake channel holds one
// wake-up: if one is already pending, this one adds nothing, because that drain will see this
// commit's rows too. A burst of 2,000 commits while the loop publishes therefore costs one drain,
// not 2,000. It costs the database nothing, and reaches only this process's relay: the relays of
// other replicas find the rows on their poll (or a notification).
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

type pendingRow struct {
	ID         int64
	EventID    string
	RoutingKey string
	Payload    []byte
	CreatedAt  time.Time // the event's time, sent as the message's timestamp
	AgeMicros  int64     // its age when it was read, on the database's clock (µs)
	// born is CreatedAt on this process's monotonic clock: the read's instant less AgeMicros. The lag
	// metric counts from it, so that it never mixes the database's clock with this process's: with the
	// database five minutes ahead, time.Since(CreatedAt) observed -300 s for every event, and an alert on
	// the lag could never fire (a clock-skew helper's finding, 2026-12-07).
	born time.Time `db:"-"`
}

// publishBatch locks up to BatchSize pending rows, publishes them, waits for the confirms and marks the
// confirmed ones, all in one transaction. It returns the number of rows it locked. A publish or confirm
// failure still commits the marks of the rows confirmed before it (and the attempt count of the
// others), then returns the error so that the session reconnects.
func (r *Relay) publishBatch(ctx context.Context, ch *amqp.Channel, returns <-chan amqp.Return, block *brokerBlock) (int, error) {
	// A batch that started is finished even when shutdown begins: its publishes are already on the
	// wire, and abandoning it would only turn them into duplicates. Every step below is bounded
	// (ConfirmTimeout; the database statement timeout, which the pool's connections also keep on the
	// client's side, for a half-open connection: postgres.Options.StatementTimeout).
	work := context.WithoutCancel(ctx)
	var n int
	var publishErr error
	// Two round trips to the database per batch, each a pgx batch (pgtx): BEGIN with the SELECT that
	// locks the rows, then the marks with the COMMIT. A mark that fails aborts the transaction, and
	// PostgreSQL skips the COMMIT queued behind it; Run's end rolls it back.
	err := pgtx.Run(work, r.db, func(t *pgtx.Tx) error {
		var rows []pendingRow
		// SKIP LOCKED: rows another relay is publishing right now are not ours to wait for.
		err := t.Batch(work, func(b *pgx.Batch) {
			b.Queue("BEGIN")
			b.Queue(`SELECT id, event_id::text, routing_key, payload::text, created_at,
				       (extract(epoch FROM clock_timestamp() - created_at) * 1e6)::bigint
				FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, r.cfg.BatchSize)
		}, func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return err
			}
			found, err := br.Query()
			if err != nil {
				return err
			}
			rows, err = pgx.CollectRows(found, pgx.RowToStructByPos[pendingRow])
			read := time.Now()
			for i := range rows {
				rows[i].born = read.Add(-time.Duration(rows[i].AgeMicros) * time.Microsecond)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("lock pending outbox rows: %w", err)
		}
		n = len(rows)
		if n == 0 {
			return nil // nothing locked: Run's end rolls the empty transaction back
		}
		confirmed, failed, perr := r.publish(work, ch, returns, block, rows)
		publishErr = perr
		if r.beforeMark != nil {
			if err := r.beforeMark(); err != nil {
				return err
			}
		}
		return t.Batch(work, func(b *pgx.Batch) {
			if len(confirmed) > 0 {
				b.Queue(`UPDATE outbox SET published_at = now(), attempts = attempts + 1, last_error = NULL
					WHERE id = ANY($1)`, confirmed)
			}
			for msg, ids := range failed {
				b.Queue(`UPDATE outbox SET attempts = attempts + 1, last_error = $1 WHERE id = ANY($2)`, msg, ids)
			}
			b.Queue("COMMIT")
		}, func(br pgx.BatchResults) error {
			if len(confirmed) > 0 {
				if _, err := br.Exec(); err != nil {
					return fmt.Errorf("mark outbox rows published: %w", err)
				}
			}
			for range failed {
				if _, err := br.Exec(); err != nil {
					return fmt.Errorf("record outbox publish failure: %w", err)
				}
			}
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("commit outbox marks: %w", err)
			}
			return nil
		})
	})
	if err != nil {
		return n, err
	}
	return n, publishErr
}

// errBrokerBlocked stops a batch's publishes once the broker has blocked the connection.
var errBrokerBlocked = errors.New("not sent: the broker blocked the connection")

// errReturned ends a session after the broker returned a message of its batch as unroutable.
var errReturned = errors.New("returned by the broker as unroutable")

// publish sends rows and waits for their confirms. It returns the ids the broker confirmed, and the ids
// it did not (nacked, unanswered, never sent, or returned) grouped by the last_error to record for
// them, plus the first error.
func (r *Relay) publish(parent context.Context, ch *amqp.Channel, returns <-chan amqp.Return, block *brokerBlock, rows []pendingRow) (
	confirmed []int64, failed map[string][]int64, err error) {
	ctx, cancel := context.WithTimeout(parent, r.cfg.ConfirmTimeout)
	defer cancel()
	failed = make(map[string][]int64)
	// fail records why row id stays pending: reason becomes its last_error (rows with the same reason
	// share one UPDATE), e the batch's error if it is the first.
	fail := func(id int64, reason string, e error) {
		if err == nil {
			err = e
		}
		failed[reason] = append(failed[reason], id)
	}
	// Publish the whole batch first, then wait: the confirms of a batch arrive together, so the batch
	// costs about one round trip instead of one per row.
	dcs := make([]*amqp.DeferredConfirmation, 0, len(rows))
	for _, row := range rows {
		// A block that began during this batch: the broker reads nothing more, and a write into a
		// socket whose buffers are full waits for the clear, past ConfirmTimeout and shutdown alike
		// (amqp091 writes without a deadline), with the batch's transaction open. The rows not sent
		// yet stay pending (a helper's finding, 2026-12-07: a batch of 7.5 MB sat in its write for the
		// whole alarm).
		if reason, cleared := block.blocked(); cleared != nil {
			err = fmt.Errorf("publish outbox row %d: %w (%s)", row.ID, errBrokerBlocked, reason)
			break
		}
		dc, perr := ch.PublishWithDeferredConfirmWithContext(ctx, r.cfg.Topology.Exchange, row.RoutingKey,
			true, // mandatory: a message no queue is bound for comes back instead of being dropped
			false,
			amqp.Publishing{
				DeliveryMode: amqp.Persistent,
				MessageId:    row.EventID, // matches a basic.return to its row; consumers must not dedup on it
				ContentType:  "application/json",
				// The event's name travels with the message, not only in its routing key, which a
				// dead letter, a shovel or a republish to a queue does not keep (an event consumer's
				// finding, 2026-12-07: the two events' bodies have the same shape).
				Type:      row.RoutingKey,
				Timestamp: row.CreatedAt,
				Body:      row.Payload,
			})
		if perr != nil {
			err = fmt.Errorf("publish outbox row %d: %w", row.ID, perr)
			break
		}
		dcs = append(dcs, dc)
	}
	acked := make([]bool, len(rows))
	for i, row := range rows {
		if i >= len(dcs) {
			fail(row.ID, "not published: "+err.Error(), err)
			continue
		}
		ok, werr := dcs[i].WaitContext(ctx)
		switch {
		case werr != nil:
			fail(row.ID, "no confirm: "+werr.Error(),
				fmt.Errorf("wait for confirm of outbox row %d: %w", row.ID, werr))
		case !ok:
			// A nack, or the channel closed before the confirm: the broker may or may not have the
			// message, so the row stays pending and is published again.
			fail(row.ID, "not confirmed by the broker (nack or channel closed)",
				fmt.Errorf("outbox row %d not confirmed (nack or channel closed)", row.ID))
		default:
			acked[i] = true
		}
	}
	// Every return of an acked message is in the buffer by now: the client hands a basic.return to the
	// listener before it processes the basic.ack that follows it. Match them by message_id.
	returned := drainReturns(returns)
	for i, row := range rows {
		if !acked[i] {
			continue
		}
		if ret, ok := returned[row.EventID]; ok {
			r.metrics.returned.Inc()
			r.logger.Warn("outbox row returned by the broker: no queue is bound for its routing key; left pending",
				"event_id", row.EventID, "outbox_id", row.ID, "exchange", ret.Exchange,
				"routing_key", ret.RoutingKey, "reply_code", ret.ReplyCode, "reply_text", ret.ReplyText)
			reason := fmt.Sprintf("%v: %d %s (exchange %q, routing key %q)",
				errReturned, ret.ReplyCode, ret.ReplyText, ret.Exchange, ret.RoutingKey)
			fail(row.ID, reason, fmt.Errorf("outbox row %d: %w", row.ID, errReturned))
			continue
		}
		confirmed = append(confirmed, row.ID)
		r.metrics.published.Inc()
		decisions.Emit(r.cfg.Decisions, decisions.Decision{Type: decisions.TypeOutbox, Outcome: "published", EventID: row.EventID, Detail: row.RoutingKey})
		r.metrics.lag.Observe(time.Since(row.born).Seconds())
		r.logger.Debug("outbox row published", "event_id", row.EventID, "outbox_id", row.ID)
	}
	return confirmed, failed, err
}

// drainReturns takes every return waiting in returns, by message_id, without blocking.
func drainReturns(returns <-chan amqp.Return) map[string]amqp.Return {
	out := make(map[string]amqp.Return)
	for {
		select {
		case ret, ok := <-returns:
			if !ok {
				return out
			}
			out[ret.MessageId] = ret
		default:
			return out
		}
	}
}

// updatePending refreshes the pending gauge: every PollInterval, whether the relay is connected to
// the broker or not (the partial index on pending rows keeps the count cheap).
func (r *Relay) updatePending(ctx context.Context) {
	var n int64
	if err := r.db.WithContext(ctx).Raw(`SELECT count(*) FROM outbox WHERE published_at IS NULL`).Row().Scan(&n); err != nil {
		return // the next tick tries again
	}
	r.metrics.pending.Set(float64(n))
}
