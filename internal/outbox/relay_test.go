package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/events"
	"idemshop/internal/outbox"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// While the broker is unreachable the orders keep being paid (outbox rows keep coming); when it
// returns, the relay reconnects by itself and every row is published and credited exactly once.
func TestRelayPublishesEverythingOnceTheBrokerReturns(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	proxy, viaProxy := tcpproxy.ForURL(t, env.AMQPURL)
	proxy.Cut() // the broker is "down" before the relay even starts
	relay := startRelay(t, env, viaProxy, top, nil)
	consumer := startConsumer(t, env, top)

	insertPaid(t, env.DB, 1, 10) // orders 1..10 paid while the broker is down
	assert.EqualValues(t, 10, pending(t, env.DB))
	// The gauge is the operator's sign of the outage: it counts while the relay cannot connect.
	waitFor(t, 5*time.Second, func() bool { return gathered(relay, "idemshop_outbox_pending") == 10 },
		"the pending gauge counts the rows while the broker is down")
	proxy.Restore()
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published once the broker is back")

	proxy.Cut() // and down again, with more orders paid meanwhile
	insertPaid(t, env.DB, 11, 20)
	proxy.Restore()
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published after the second outage")

	waitCount(t, 10*time.Second, 20, func() int64 { return ledgerRows(t, env.DB) }, "all credited")
	assert.Equal(t, 20, gathered(relay, "idemshop_outbox_published_total"))
	waitFor(t, 5*time.Second, func() bool { return gathered(relay, "idemshop_outbox_pending") == 0 }, "gauge")
	assert.Equal(t, 20, histogramCount(relay, "idemshop_outbox_publish_lag_seconds"), "lag observed per row")
	// The consumer counts a credit after its commit: the ledger rows can be seen a moment before.
	waitCount(t, 5*time.Second, 20, func() int { return counter(consumer, points.OutcomeApplied) }, "credits counted applied")
	assertCreditedOnce(t, env.DB, 20)
}

// The lag is the row's age on the database's clock when the relay read it, plus the time to its confirm
// on the relay's own: a row written ten minutes ago is observed at ten minutes and a little, never
// negative and never in the wrong unit. (That the two clocks are never subtracted from each other, the
// point of the rule, needs a database clock apart from the test's, which the suite's shared PostgreSQL
// cannot give: a clock-skew helper checked it against a shifted private one, reliability.md#clocks.)
// Guards the relay-lag-age mutant.
func TestTheLagCountsFromTheRowsAgeOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	insertPaid(t, env.DB, 1, 1)
	require.NoError(t, env.DB.Exec(`UPDATE outbox SET created_at = now() - interval '10 minutes'`).Error)
	relay := startRelay(t, env, env.AMQPURL, top, nil)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published")
	require.Equal(t, 1, histogramCount(relay, "idemshop_outbox_publish_lag_seconds"))
	lag := histogramSum(relay, "idemshop_outbox_publish_lag_seconds")
	assert.GreaterOrEqual(t, lag, 600.0)
	assert.Less(t, lag, 660.0)
}

// The relay dies after the broker confirmed a batch and before the rows were marked: the rows stay
// pending and are published again. The consumer dedups on the order id: one credit per order.
func TestRelayCrashAfterPublishBeforeMarkDoesNotDoubleCredit(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	consumer := startConsumer(t, env, top)
	var crashes atomic.Int64
	insertPaid(t, env.DB, 1, 15)
	relay := startRelay(t, env, env.AMQPURL, top, func() error {
		if crashes.Add(1) <= 2 {
			return errors.New("simulated crash: published, not marked")
		}
		return nil
	})
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "marked on the third try")
	waitCount(t, 10*time.Second, 45, func() int {
		return counter(consumer, points.OutcomeApplied) + counter(consumer, points.OutcomeDuplicate)
	}, "three copies of each order consumed")
	assert.Equal(t, 15, counter(consumer, points.OutcomeApplied))
	assert.Equal(t, 30, counter(consumer, points.OutcomeDuplicate))
	assert.Equal(t, 45, gathered(relay, "idemshop_outbox_published_total"), "a republish counts again")
	assertCreditedOnce(t, env.DB, 15)
}

// Two relays and two consumers at once, started behind a barrier: SKIP LOCKED gives each outbox row
// to one relay, and each order is credited exactly once, including orders that have two outbox rows
// (two events for one order: the dedup key is the order, not the event).
func TestTwoRelaysAndTwoConsumersCreditEachOrderOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	const orders = 300
	insertPaid(t, env.DB, 1, orders)
	insertPaid(t, env.DB, 1, 50) // a second event for orders 1..50

	start := make(chan struct{})
	regs := make([]*prometheus.Registry, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 4)
	for i := range regs {
		regs[i] = prometheus.NewRegistry()
		var run func(context.Context) error
		if i < 2 {
			r, err := outbox.NewRelay(env.DB, relayConfig(env.AMQPURL, top), logger(), regs[i])
			require.NoError(t, err)
			run = r.Run
		} else {
			c, err := points.NewConsumer(env.DB, env.Redis, consumerConfig(env, env.AMQPURL, top), logger(), regs[i])
			require.NoError(t, err)
			run = c.Run
		}
		go func() {
			<-start
			_ = run(ctx)
			done <- struct{}{}
		}()
	}
	t.Cleanup(func() {
		cancel()
		for range regs {
			<-done
		}
	})
	close(start)

	waitFor(t, 20*time.Second, func() bool { return pending(t, env.DB) == 0 }, "all rows published")
	waitCount(t, 20*time.Second, orders+50, func() int {
		n := 0
		for _, r := range regs[2:] {
			n += counter(r, points.OutcomeApplied) + counter(r, points.OutcomeDuplicate)
		}
		return n
	}, "every message consumed, once")
	assert.Equal(t, orders+50, gathered(regs[0], "idemshop_outbox_published_total")+
		gathered(regs[1], "idemshop_outbox_published_total"), "no row published by both relays")
	assert.Equal(t, orders, counter(regs[2], points.OutcomeApplied)+counter(regs[3], points.OutcomeApplied))
	assertCreditedOnce(t, env.DB, orders)
}

// A row whose routing key no queue is bound for is returned by the broker (mandatory publish), which
// also confirms it. It must stay pending, with attempts and last_error recorded, and be published
// once a binding exists; the routable rows of the same batch are published meanwhile.
func TestRelayLeavesAReturnedRowPendingUntilAQueueIsBound(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	const unbound = "order.unbound" // the topology binds order.paid only
	insertPaid(t, env.DB, 1, 3)
	unroutable := insertRow(t, env.DB, unbound)
	insertPaid(t, env.DB, 4, 6) // one batch of 7: the unroutable row sits in the middle
	relay := startRelay(t, env, env.AMQPURL, top, nil)

	waitFor(t, 10*time.Second, func() bool { return row(t, env.DB, unroutable).Attempts >= 1 }, "first attempt")
	r := row(t, env.DB, unroutable)
	require.Nil(t, r.PublishedAt, "a returned message was marked published: it is lost")
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) <= 1 }, "the routable rows published")
	require.EqualValues(t, 1, pending(t, env.DB), "the returned row was marked published: it is lost")
	waitFor(t, 10*time.Second, func() bool { return row(t, env.DB, unroutable).Attempts >= 3 }, "retried")
	r = row(t, env.DB, unroutable)
	assert.Nil(t, r.PublishedAt)
	assert.Contains(t, r.LastError, "NO_ROUTE")
	assert.Equal(t, 6, gathered(relay, "idemshop_outbox_published_total"), "a returned row is not counted as published")
	assert.GreaterOrEqual(t, gathered(relay, "idemshop_outbox_returned_total"), 3)
	assert.EqualValues(t, 6, queueDepth(t, env, top.Queue), "only the six routable rows reached the queue")

	bind(t, env, top.Queue, unbound, top.Exchange) // the operator adds the missing binding
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published once bound")
	r = row(t, env.DB, unroutable)
	assert.Empty(t, r.LastError)
	assert.Equal(t, 7, gathered(relay, "idemshop_outbox_published_total"))
	waitCount(t, 5*time.Second, 7, func() int { return queueDepth(t, env, top.Queue) }, "one copy of each row")
}

// Someone deletes the queue's binding while the relay runs. The next row is returned, not lost: it
// stays pending, the relay reconnects after its backoff, declares the topology again (which restores
// the binding) and publishes the row on its second attempt.
func TestRelayRepublishesARowReturnedWhileTheBindingWasGone(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	relay := startRelay(t, env, env.AMQPURL, top, nil)
	insertPaid(t, env.DB, 1, 1)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "relay connected and published")

	unbind(t, env, top.Queue, top.RoutingKey, top.Exchange)
	insertPaid(t, env.DB, 2, 2)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published after the return")
	var second outboxRow
	require.NoError(t, env.DB.Raw(`SELECT id, attempts, published_at, COALESCE(last_error, '') AS last_error
		FROM outbox ORDER BY id DESC LIMIT 1`).Scan(&second).Error)
	assert.Equal(t, 2, second.Attempts, "returned once, then published after the binding was declared again")
	assert.Equal(t, 1, gathered(relay, "idemshop_outbox_returned_total"))
	assert.Equal(t, 2, gathered(relay, "idemshop_outbox_published_total"))
	waitCount(t, 5*time.Second, 2, func() int { return queueDepth(t, env, top.Queue) }, "both rows in the queue once")
}

func TestRelayExportsTheReturnedCounterAtZero(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	reg := prometheus.NewRegistry()
	_, err := outbox.NewRelay(env.DB, relayConfig(env.AMQPURL, topology(t, env)), logger(), reg)
	require.NoError(t, err)
	assert.Equal(t, 0, gathered(reg, "idemshop_outbox_returned_total"))
}

// --- helpers ---

func topology(t *testing.T, env *testenv.Env) rabbitmq.Topology {
	t.Helper()
	top := rabbitmq.Topology{
		Exchange: env.Prefix + "events", RoutingKey: events.RoutingKeyOrderPaid,
		Queue: env.Queue("points.order-paid"), DeadLetterExchange: env.Prefix + "events.dlx",
		DeadLetterQueue: env.Queue("points.order-paid.dlq"), DeliveryLimit: events.DeliveryLimit,
	}
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

func relayConfig(url string, top rabbitmq.Topology) outbox.RelayConfig {
	return outbox.RelayConfig{AMQPURL: url, Topology: top, BatchSize: 7, PollInterval: 20 * time.Millisecond,
		ConfirmTimeout: 2 * time.Second, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
}

func consumerConfig(env *testenv.Env, url string, top rabbitmq.Topology) points.ConsumerConfig {
	return points.ConsumerConfig{AMQPURL: url, Topology: top, Prefetch: 50, BatchSize: 10, BatchWait: 2 * time.Millisecond, KeyPrefix: env.Prefix,
		LeaseTTL: 2 * time.Second, DoneTTL: time.Hour, LeasePoll: 20 * time.Millisecond,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
}

// runInBackground runs fn until the test ends, then cancels it and waits for it to return.
func runInBackground(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fn(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func startRelay(t *testing.T, env *testenv.Env, url string, top rabbitmq.Topology, beforeMark func() error) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := relayConfig(url, top)
	if beforeMark != nil {
		cfg.BatchSize = 100 // one batch for the whole test, so every row crashes the same number of times
	}
	r, err := outbox.NewRelay(env.DB, cfg, logger(), reg)
	require.NoError(t, err)
	if beforeMark != nil {
		outbox.SetBeforeMark(r, beforeMark)
	}
	runInBackground(t, r.Run)
	return reg
}

func startConsumer(t *testing.T, env *testenv.Env, top rabbitmq.Topology) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := points.NewConsumer(env.DB, env.Redis, consumerConfig(env, env.AMQPURL, top), logger(), reg)
	require.NoError(t, err)
	runInBackground(t, c.Run)
	return reg
}

// insertPaid writes one order.paid outbox row per order id in [from, to], each in its own transaction,
// as the payment callback does. Every order is user (id%3)+1 and earns 12 points.
func insertPaid(t *testing.T, db *gorm.DB, from, to int64) {
	t.Helper()
	for id := from; id <= to; id++ {
		ev := events.OrderPaid{EventID: uuid.NewString(), OrderID: id, UserID: id%3 + 1, AmountCents: 1250,
			Points: events.PointsFor(1250), OccurredAt: time.Now().UTC()}
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Insert(context.Background(), tx, ev.EventID, events.RoutingKeyOrderPaid, ev)
		}))
	}
}

type outboxRow struct {
	ID          int64
	Attempts    int
	PublishedAt *time.Time
	LastError   string
}

// insertRow writes one outbox row with routingKey and returns its id.
func insertRow(t *testing.T, db *gorm.DB, routingKey string) int64 {
	t.Helper()
	ev := events.OrderPaid{EventID: uuid.NewString(), OrderID: 999, UserID: 1, AmountCents: 1250,
		Points: events.PointsFor(1250), OccurredAt: time.Now().UTC()}
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		return outbox.Insert(context.Background(), tx, ev.EventID, routingKey, ev)
	}))
	var id int64
	require.NoError(t, db.Raw(`SELECT id FROM outbox WHERE event_id = ?`, ev.EventID).Scan(&id).Error)
	return id
}

func row(t *testing.T, db *gorm.DB, id int64) outboxRow {
	t.Helper()
	var r outboxRow
	require.NoError(t, db.Raw(`SELECT id, attempts, published_at, COALESCE(last_error, '') AS last_error
		FROM outbox WHERE id = ?`, id).Scan(&r).Error)
	return r
}

// broker runs fn on a fresh channel of its own.
func broker(t *testing.T, env *testenv.Env, fn func(ch *amqp.Channel) error) {
	t.Helper()
	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, fn(ch))
}

func bind(t *testing.T, env *testenv.Env, queue, key, exchange string) {
	broker(t, env, func(ch *amqp.Channel) error { return ch.QueueBind(queue, key, exchange, false, nil) })
}

func unbind(t *testing.T, env *testenv.Env, queue, key, exchange string) {
	broker(t, env, func(ch *amqp.Channel) error { return ch.QueueUnbind(queue, key, exchange, nil) })
}

// queueDepth returns the number of ready messages in queue.
func queueDepth(t *testing.T, env *testenv.Env, queue string) int {
	var n int
	broker(t, env, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	return n
}

func pending(t *testing.T, db *gorm.DB) int64 {
	var n int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n).Error)
	return n
}

func ledgerRows(t *testing.T, db *gorm.DB) int64 {
	var n int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM points_ledger`).Scan(&n).Error)
	return n
}

// assertCreditedOnce checks the invariant on the database: one ledger row per order, 12 points each,
// and the balances add up to the ledger.
func assertCreditedOnce(t *testing.T, db *gorm.DB, orders int64) {
	t.Helper()
	var s struct{ Rows, Distinct, Sum, Balances int64 }
	require.NoError(t, db.Raw(`SELECT count(*) AS rows, count(DISTINCT biz_id) AS distinct,
		COALESCE(sum(delta), 0) AS sum, (SELECT COALESCE(sum(balance), 0) FROM points_accounts) AS balances
		FROM points_ledger`).Scan(&s).Error)
	assert.Equal(t, orders, s.Rows)
	assert.Equal(t, orders, s.Distinct)
	assert.Equal(t, 12*orders, s.Sum)
	assert.Equal(t, 12*orders, s.Balances)
}

func counter(g prometheus.Gatherer, outcome string) int {
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "idemshop_points_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// gathered returns the value of an unlabelled counter or gauge.
func gathered(g prometheus.Gatherer, name string) int {
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return int(m.GetCounter().GetValue())
			}
			return int(m.GetGauge().GetValue())
		}
	}
	return -1
}

func histogramCount(g prometheus.Gatherer, name string) int {
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return int(mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	return -1
}

func histogramSum(g prometheus.Gatherer, name string) float64 {
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	return -1
}

func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, timeout, 20*time.Millisecond, msg)
}

// waitCount polls get every 20 ms until it reaches want (or timeout passes: a failure), then asserts
// that it is exactly want. A count that jumps past want (a row published twice, a message consumed
// twice) fails on that assertion, with both numbers, instead of leaving a wait for an exact value it
// has already passed to time out.
func waitCount[N ~int | ~int64](t *testing.T, timeout time.Duration, want N, get func() N, msg string) {
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

func logger() *slog.Logger {
	lvl := slog.LevelError
	if os.Getenv("TEST_LOG") != "" {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}
