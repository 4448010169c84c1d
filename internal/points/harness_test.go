package points_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/events"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// topology returns per-test broker names, declares them, and deletes the exchanges at the end
// (testenv deletes the queues). Like production, the queue is bound to order.paid and order.refunded;
// extraKeys adds further bindings (to deliver a routing key the consumer does not know).
func topology(t testing.TB, env *testenv.Env, extraKeys ...string) rabbitmq.Topology {
	t.Helper()
	top := rabbitmq.Topology{
		Exchange: env.Prefix + "events", RoutingKey: events.RoutingKeyOrderPaid,
		ExtraRoutingKeys: append([]string{events.RoutingKeyRefunded}, extraKeys...),
		Queue:            env.Queue("points.order-paid"), DeadLetterExchange: env.Prefix + "events.dlx",
		DeadLetterQueue: env.Queue("points.order-paid.dlq"), DeliveryLimit: events.DeliveryLimit,
	}
	ch := channel(t, env.AMQPURL)
	require.NoError(t, rabbitmq.Declare(ch, top))
	t.Cleanup(func() {
		conn, err := amqp.Dial(env.AMQPURL)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(top.Exchange, false, false)
			_ = ch.ExchangeDelete(top.DeadLetterExchange, false, false)
		}
	})
	return top
}

func channel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// publisher publishes bodies to the test exchange with publisher confirms, as the relay does.
type publisher struct {
	t   testing.TB
	ch  *amqp.Channel
	top rabbitmq.Topology
}

func newPublisher(t testing.TB, url string, top rabbitmq.Topology) *publisher {
	ch := channel(t, url)
	require.NoError(t, ch.Confirm(false))
	return &publisher{t: t, ch: ch, top: top}
}

func (p *publisher) raw(messageID string, body []byte) {
	p.t.Helper()
	p.rawTo(p.top.RoutingKey, messageID, body)
}

// rawTo publishes body with routingKey, the key the consumer dispatches on.
func (p *publisher) rawTo(routingKey, messageID string, body []byte) {
	p.t.Helper()
	dc, err := p.ch.PublishWithDeferredConfirm(p.top.Exchange, routingKey, false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: messageID, ContentType: "application/json", Body: body,
	})
	require.NoError(p.t, err)
	ok, err := dc.WaitContext(context.Background())
	require.NoError(p.t, err)
	require.True(p.t, ok, "broker confirmed the publish")
}

func (p *publisher) event(ev events.OrderPaid) {
	p.t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(p.t, err)
	p.raw(ev.EventID, b)
}

// refunded publishes ev with the routing key order.refunded, as the relay does.
func (p *publisher) refunded(ev events.OrderRefunded) {
	p.t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(p.t, err)
	p.rawTo(events.RoutingKeyRefunded, ev.EventID, b)
}

func amqpPublishing(messageID string, body []byte) amqp.Publishing {
	return amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: messageID, ContentType: "application/json", Body: body}
}

func orderPaid(orderID, userID, amountCents int64) events.OrderPaid {
	return events.OrderPaid{EventID: uuid.NewString(), OrderID: orderID, UserID: userID, AmountCents: amountCents,
		Points: events.PointsFor(amountCents), OccurredAt: time.Now().UTC()}
}

func orderRefunded(orderID, userID, amountCents int64) events.OrderRefunded {
	return events.OrderRefunded{EventID: uuid.NewString(), OrderID: orderID, UserID: userID, AmountCents: amountCents,
		Points: events.PointsFor(amountCents), OccurredAt: time.Now().UTC()}
}

// running is an in-process consumer with its own registry.
type running struct {
	*points.Consumer
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

func testConfig(amqpURL, prefix string, top rabbitmq.Topology) points.ConsumerConfig {
	return points.ConsumerConfig{
		AMQPURL: amqpURL, Topology: top, Prefetch: 50, BatchSize: 20, BatchWait: 2 * time.Millisecond, KeyPrefix: prefix,
		LeaseTTL: 2 * time.Second, DoneTTL: time.Hour, LeasePoll: 20 * time.Millisecond,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
	}
}

func startConsumer(t testing.TB, env *testenv.Env, cfg points.ConsumerConfig) *running {
	t.Helper()
	return startConsumerOn(t, env.DB, env.Redis, testLogger(), cfg)
}

// databaseViaProxy opens env's database through a TCP proxy of the test's own, so that a test can cut
// it (Cut) or make its connections half-open (Stall) without touching the shared server.
func databaseViaProxy(t testing.TB, env *testenv.Env) (*tcpproxy.Proxy, *gorm.DB) {
	t.Helper()
	proxy, viaProxy := tcpproxy.ForURL(t, env.DatabaseURL)
	db, err := postgres.Open(context.Background(), viaProxy, postgres.Options{LockTimeout: 2 * time.Second,
		StatementTimeout: 10 * time.Second, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(db) })
	return proxy, db
}

// lockLedger locks points_ledger in a transaction of the test's own, so that every credit waits on it
// until its attempt's timeout; the lock ends when the returned transaction is rolled back (or the test
// ends).
func lockLedger(t testing.TB, env *testenv.Env) *gorm.DB {
	t.Helper()
	lock := env.DB.Begin()
	require.NoError(t, lock.Error)
	t.Cleanup(func() { lock.Rollback() })
	require.NoError(t, lock.Exec(`LOCK TABLE points_ledger IN ACCESS EXCLUSIVE MODE`).Error)
	return lock
}

// consumerDuringAnOutage starts a consumer whose database is unreachable (its proxy cut; Restore brings
// it back), with a short retry backoff. failedAttempts counts the credit attempts it has logged as
// failed so far.
func consumerDuringAnOutage(t testing.TB) (env *testenv.Env, top rabbitmq.Topology, proxy *tcpproxy.Proxy, c *running, failedAttempts func() int) {
	t.Helper()
	env = testenv.New(t)
	top = topology(t, env)
	proxy, db := databaseViaProxy(t, env)
	logs := &testenv.Output{}
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.ReconnectMin, cfg.ReconnectMax = 5*time.Millisecond, 10*time.Millisecond
	proxy.Cut()
	c = startConsumerOn(t, db, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)
	return env, top, proxy, c, func() int { return strings.Count(logs.String(), "applying credits failed; retrying") }
}

// startConsumerOn is startConsumer on a database connection and a logger of the test's choosing.
func startConsumerOn(t testing.TB, db *gorm.DB, rdb *redis.Client, logger *slog.Logger, cfg points.ConsumerConfig) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := points.NewConsumer(db, rdb, cfg, logger, reg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Consumer: c, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the consumer and waits for Run to return (it finishes its in-flight batch first).
func (r *running) stop(t testing.TB) { r.stopWithin(t, 15*time.Second) }

// stopWithin is stop with a limit of the test's choosing.
func (r *running) stopWithin(t testing.TB, limit time.Duration) {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(limit):
		t.Errorf("consumer did not stop within %s", limit)
	}
}

func (r *running) count(outcome string) int {
	return counterValue(r.reg, "idemshop_points_messages_total", "outcome", outcome)
}

func (r *running) handled() int {
	return r.count(points.OutcomeApplied) + r.count(points.OutcomeDuplicate)
}

func counterValue(g prometheus.Gatherer, name, label, value string) int {
	mfs, err := g.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

func testLogger() *slog.Logger {
	lvl := slog.LevelError
	if os.Getenv("TEST_LOG") != "" {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

type ledgerState struct {
	Rows     int64
	Distinct int64
	Sum      int64
	Balances int64
}

// state reads the invariant inputs from the database: ledger rows, distinct biz_ids, the sum of the
// deltas, and the sum of the balances (which must equal it).
func state(t testing.TB, env *testenv.Env) ledgerState {
	t.Helper()
	var s ledgerState
	require.NoError(t, env.DB.Raw(`SELECT count(*) AS rows, count(DISTINCT biz_id) AS distinct,
		COALESCE(sum(delta), 0) AS sum, (SELECT COALESCE(sum(balance), 0) FROM points_accounts) AS balances
		FROM points_ledger`).Scan(&s).Error)
	return s
}

// queueDepth is the number of ready messages in q.
func queueDepth(t testing.TB, ch *amqp.Channel, q string) int {
	t.Helper()
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	require.NoError(t, err)
	return info.Messages
}

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, timeout, 20*time.Millisecond, append([]any{msg}, args...)...)
}

// waitDeadLettered waits until n messages are in top's dead-letter queue (read on ch) and c has counted
// n dead-lettered.
func waitDeadLettered(t testing.TB, c *running, ch *amqp.Channel, top rabbitmq.Topology, n int, what string) {
	t.Helper()
	waitCount(t, 20*time.Second, n, func() int { return queueDepth(t, ch, top.DeadLetterQueue) }, what+" in the DLQ")
	waitCount(t, 10*time.Second, n, func() int { return c.count(points.OutcomeDeadLettered) }, what+" counted dead-lettered")
}

// waitCount polls get every 20 ms until it reaches want (or timeout passes: a failure), then asserts
// that it is exactly want. A count that jumps past want (a message handled twice, a second ledger row)
// fails on that assertion, with both numbers, instead of leaving a wait for an exact value it has
// already passed to time out.
func waitCount[N ~int | ~int64](t testing.TB, timeout time.Duration, want N, get func() N, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := get()
	for got < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		got = get()
	}
	require.GreaterOrEqual(t, got, want, "%s: still %d of %d after %s", msg, got, want, timeout)
	assert.Equal(t, want, got, "%s: %d, more than the %d expected (a duplicate)", msg, got, want)
}
