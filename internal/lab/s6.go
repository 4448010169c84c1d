package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"idemshop/internal/events"
	"idemshop/internal/invariants"
	"idemshop/internal/platform/fault"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
)

// runS6: points-consumer crashes after its commit, before its ack, and the broker redelivers.
// Unsafe: points.NoDedup, which remembers broker message ids in memory and keys the ledger row by
// the delivery. Guarded: the real consumer, which keys its Redis lease and the ledger's unique biz_id
// on the order id.
func runS6(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	var u Unsafe
	var g Guarded
	m, err := runConsumerCrash(ctx, env, SideName("S6", true), points.NoDedup, points.CrashAfterCommit)
	if err != nil {
		return u, g, fmt.Errorf("S6 unsafe: %w", err)
	}
	per := m["points_per_order"]
	u.Measured = m
	u.Reproduced = m["ledger_rows_after_crash"] == 1 && m["ledger_rows"] == 2 && m["balance"] == 2*per
	u.Detail = fmt.Sprintf("crash after commit (%d ledger row); the redelivery was credited again: %d ledger rows, balance %d for one order worth %d",
		m["ledger_rows_after_crash"], m["ledger_rows"], m["balance"], per)

	m, err = runConsumerCrash(ctx, env, SideName("S6", false), points.Guarded, points.CrashAfterCommit)
	if err != nil {
		return u, g, fmt.Errorf("S6 guarded: %w", err)
	}
	g.Measured = m
	g.OK = m["ledger_rows_after_crash"] == 1 && m["ledger_rows"] == 1 && m["balance"] == per &&
		m["redelivery_duplicate"] == 1 && m["redelivery_applied"] == 0 && m["queue_ready"] == 0
	g.Detail = fmt.Sprintf("crash after commit (%d ledger row); the redelivery was acked as a duplicate after the lease ran out (%d ms): %d ledger row, balance %d",
		m["ledger_rows_after_crash"], m["redelivery_ms"], m["ledger_rows"], m["balance"])
	return u, g, nil
}

// Shared with S11 (s11.go): both crash a consumer at one of its fault points and let a second one
// take the broker's redelivery.

// consumerLeaseTTL is the lease of the in-scenario consumers: short, because the guarded redelivery
// waits it out after a crash (it is how long a crash delays the credit).
const consumerLeaseTTL = time.Second

// runConsumerCrash is one side of S6 or S11, in process; fixture names the side's fixture
// ("S6-unsafe", ...). A consumer with the dedup newDedup returns (points.Guarded, or a broken twin)
// takes one order.paid for a fixture order and crashes at point; a second consumer of the same kind,
// with a dedup of its own (a restarted process remembers nothing), takes the broker's redelivery. It measures, on the database, the fixture
// user's ledger rows and balance after the crash and at the end, and how the second consumer counted
// the redelivery.
//
// It runs on broker objects and Redis keys of its own (a random name under the env's prefixes), so
// the demo points-consumer never sees this message and this crash never touches its state; both are
// deleted at the end, as is the fixture.
func runConsumerCrash(ctx context.Context, env *Env, fixture string, newDedup func() points.Dedup, point fault.Point) (_ map[string]int64, err error) {
	within := env.Quiet
	if within <= 0 {
		within = 15 * time.Second
	}
	logger := env.Log
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f, err := env.NewFixture(ctx, fixture)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
	}()
	const stock, price, qty = 10, 1250, 2
	product, err := f.Product(ctx, stock, price)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 4)
	_, _ = rand.Read(raw)
	name := "lab-" + strings.ToLower(fixture) + "-" + hex.EncodeToString(raw)
	o, r, err := f.CreateOrder(ctx, "/v1/orders", name, product, qty)
	if err != nil || r.Status != http.StatusCreated {
		return nil, notCreated("create order", err, r)
	}

	top := rabbitmq.OrderPaidTopology().WithPrefix(env.AMQPPrefix + name + ":")
	conn, err := rabbitmq.Dial(ctx, env.AMQPURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	// Declared before any consumer starts, so the publish below is routed to the queue.
	if err := rabbitmq.Declare(ch, top); err != nil {
		return nil, err
	}
	defer rabbitmq.Delete(conn, top)
	redisPrefix := env.RedisPrefix + name + ":"
	// The one Redis key the consumers use: the order's lease, or the unsafe twin's early "done".
	leaseKey := redisPrefix + "points:dedup:" + points.BizIDOrderPaid(o.ID)
	defer env.Redis.Del(context.WithoutCancel(ctx), leaseKey)

	cfg := points.ConsumerConfig{
		AMQPURL: env.AMQPURL, Topology: top, Prefetch: 1, BatchSize: 1, KeyPrefix: redisPrefix,
		LeaseTTL: consumerLeaseTTL, DoneTTL: time.Hour, LeasePoll: 50 * time.Millisecond,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second,
	}
	crashed := make(chan struct{})
	firstCfg := cfg
	firstCfg.Dedup = newDedup()
	firstCfg.Fault = func(_ context.Context, p fault.Point) {
		if p != point {
			return
		}
		close(crashed)
		// The crash. The hook runs on the consumer's only goroutine, so ending that goroutine here means
		// nothing after the crash point runs: no lease marked done or released, no ack. Its deferred
		// conn.Close still runs, as the kernel closes a killed process's socket, and the broker puts the
		// unacknowledged message back in the queue.
		runtime.Goexit()
	}
	first, err := startLabConsumer(ctx, env, logger, firstCfg)
	if err != nil {
		return nil, err
	}
	defer first.stop(within)

	ev := events.OrderPaid{EventID: uuid.NewString(), OrderID: o.ID, UserID: f.UserID, AmountCents: o.AmountCents,
		Points: events.PointsFor(o.AmountCents), OccurredAt: time.Now().UTC()}
	if err := publishOrderPaid(ctx, ch, top, ev, within); err != nil {
		return nil, err
	}
	if !closedWithin(ctx, crashed, within) {
		return nil, fmt.Errorf("the first consumer did not reach %s within %s", point, within)
	}
	if !closedWithin(ctx, first.done, within) {
		return nil, fmt.Errorf("the crashed consumer's goroutine did not end within %s", within)
	}
	m := map[string]int64{"points_per_order": ev.Points}
	if m["ledger_rows_after_crash"], m["balance_after_crash"], err = ledgerOf(ctx, env, f.UserID); err != nil {
		return nil, err
	}
	marker, err := env.Redis.Get(ctx, leaseKey).Result()
	if err == nil && marker == "done" {
		m["marker_done_after_crash"] = 1 // the dead consumer left "done" although it may not have committed
	}

	// The redelivery goes to a fresh consumer of the same kind: a restarted process, with empty memory.
	redelivered := time.Now()
	secondCfg := cfg
	secondCfg.Dedup = newDedup()
	second, err := startLabConsumer(ctx, env, logger, secondCfg)
	if err != nil {
		return nil, err
	}
	defer second.stop(within)
	settled, err := Eventually(ctx, within, func() (bool, error) {
		return second.count(points.OutcomeApplied)+second.count(points.OutcomeDuplicate) >= 1, nil
	})
	if err != nil {
		return nil, err
	}
	if !settled {
		return nil, fmt.Errorf("the redelivery was not settled within %s (failed %d times)", within,
			second.count(points.OutcomeFailed))
	}
	m["redelivery_ms"] = time.Since(redelivered).Milliseconds()
	// Stopped before the queue is read: its ack is then on the broker, and nothing is held unacked.
	if err := second.stop(within); err != nil {
		return nil, err
	}
	m["redelivery_applied"] = second.count(points.OutcomeApplied)
	m["redelivery_duplicate"] = second.count(points.OutcomeDuplicate)
	m["redelivery_failed"] = second.count(points.OutcomeFailed)
	if m["queue_ready"], err = rabbitmq.ReadyMessages(conn, top.Queue); err != nil {
		return nil, err
	}
	if m["dlq_ready"], err = rabbitmq.ReadyMessages(conn, top.DeadLetterQueue); err != nil {
		return nil, err
	}
	if m["ledger_rows"], m["balance"], err = ledgerOf(ctx, env, f.UserID); err != nil {
		return nil, err
	}
	return m, nil
}

// labConsumer is a points consumer running in this process, with its own metrics registry.
type labConsumer struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

func startLabConsumer(ctx context.Context, env *Env, logger *slog.Logger, cfg points.ConsumerConfig) (*labConsumer, error) {
	reg := prometheus.NewRegistry()
	c, err := points.NewConsumer(env.DB, env.Redis, cfg, logger, reg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	lc := &labConsumer{reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(lc.done) // also when the fault hook ends this goroutine with runtime.Goexit
		_ = c.Run(ctx)
	}()
	return lc, nil
}

// stop cancels the consumer and waits for Run to return (it finishes the batch it holds first).
func (lc *labConsumer) stop(within time.Duration) error {
	lc.cancel()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-lc.done:
		return nil
	case <-t.C:
		return fmt.Errorf("points consumer did not stop within %s", within)
	}
}

// count reads idemshop_points_messages_total{outcome} from the consumer's own registry.
func (lc *labConsumer) count(outcome string) int64 {
	mfs, err := lc.reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "idemshop_points_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// publishOrderPaid publishes ev as the outbox relay does (persistent, message_id = event id) and
// waits for the broker's confirm, so the message is in the queue before anyone looks for it.
func publishOrderPaid(ctx context.Context, ch *amqp.Channel, top rabbitmq.Topology, ev events.OrderPaid, within time.Duration) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode order.paid: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("publisher confirms: %w", err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, top.Exchange, top.RoutingKey, false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: ev.EventID, ContentType: "application/json", Body: body,
	})
	if err != nil {
		return fmt.Errorf("publish order.paid: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	ok, err := dc.WaitContext(wctx)
	if err != nil {
		return fmt.Errorf("confirm order.paid: %w", err)
	}
	if !ok {
		return errors.New("the broker refused order.paid (nack)")
	}
	return nil
}

// closedWithin reports whether c is closed within d.
func closedWithin(ctx context.Context, c <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// ledgerOf returns userID's ledger rows and balance, read from the database.
func ledgerOf(ctx context.Context, env *Env, userID int64) (rows, balance int64, err error) {
	if err := env.DB.WithContext(ctx).Raw(`SELECT count(*) FROM points_ledger WHERE user_id = ?`, userID).
		Scan(&rows).Error; err != nil {
		return 0, 0, fmt.Errorf("count ledger rows: %w", err)
	}
	balance, err = invariants.Balance(ctx, env.DB, userID)
	return rows, balance, err
}
