package points_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/events"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// On RabbitMQ 3.x every return counts toward x-delivery-limit, a crash's too. A good message that a
// consumer holds while the ledger cannot take it (retried in place), then a crash, six times over: the
// sixth return dead-lettered it, and its credit waited in the DLQ for a person (a helper's finding,
// 2026-12-06). At its last delivery it is now republished before it is held: a copy with a new count
// is in the queue, and the next consumer credits it once.
func TestAGoodMessageHeldThroughCrashesIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	dbProxy, db := databaseViaProxy(t, env)
	dbProxy.Cut()
	newPublisher(t, env.AMQPURL, top).event(orderPaid(1, 1, 100))

	crashes := crashHoldingTheMessage(t, env, db, top, "applying credits failed; retrying", 2)
	assertInTheQueueNotTheDLQ(t, env, top, crashes)

	dbProxy.Restore()
	c := startConsumerOn(t, db, env.Redis, testLogger(), testConfig(env.AMQPURL, env.Prefix, top))
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "credited after the crashes")
	assert.Equal(t, ledgerState{Rows: 1, Distinct: 1, Sum: 1, Balances: 1}, state(t, env))
	assert.Zero(t, queueDepth(t, channel(t, env.AMQPURL), top.DeadLetterQueue), "nothing dead-lettered")
}

// The same for a message set aside because another consumer holds its lease: held unacknowledged in
// the consumer (setAside), it came back with each crash, and the sixth dead-lettered it.
func TestAMessageSetAsideThroughCrashesIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	lease := env.Prefix + "points:dedup:" + points.BizIDOrderPaid(1)
	require.NoError(t, env.Redis.Set(t.Context(), lease, "another-consumer", time.Minute).Err())
	newPublisher(t, env.AMQPURL, top).event(orderPaid(1, 1, 100))

	crashes := crashHoldingTheMessage(t, env, env.DB, top, "points message set aside", 1)
	assertInTheQueueNotTheDLQ(t, env, top, crashes)

	require.NoError(t, env.Redis.Del(t.Context(), lease).Err()) // the other consumer let go
	c := startConsumer(t, env, testConfig(env.AMQPURL, env.Prefix, top))
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "credited after the crashes")
	assert.Equal(t, ledgerState{Rows: 1, Distinct: 1, Sum: 1, Balances: 1}, state(t, env))
	assert.Zero(t, queueDepth(t, channel(t, env.AMQPURL), top.DeadLetterQueue), "nothing dead-lettered")
}

// crashHoldingTheMessage starts a consumer on db, waits until its log shows the message held (the
// line held, times times: a republish comes before it), and crashes it: its broker connection is cut,
// so the broker takes back what it held, as after kill -9. It does so once more than the delivery
// limit allows, and returns how many of the consumers republished the message.
func crashHoldingTheMessage(t *testing.T, env *testenv.Env, db *gorm.DB, top rabbitmq.Topology, held string, times int) (republished int) {
	t.Helper()
	for i := range events.DeliveryLimit + 1 {
		amqpProxy, amqpURL := tcpproxy.ForURL(t, env.AMQPURL)
		logs := &testenv.Output{}
		cfg := testConfig(amqpURL, env.Prefix, top)
		cfg.ReconnectMin, cfg.ReconnectMax = 5*time.Millisecond, 10*time.Millisecond
		c := startConsumerOn(t, db, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)
		waitFor(t, 10*time.Second, func() bool { return strings.Count(logs.String(), held) >= times }, "delivery %d held", i+1)
		amqpProxy.Cut()
		c.stop(t)
		republished += strings.Count(logs.String(), "republished at its last delivery")
	}
	return republished
}

// assertInTheQueueNotTheDLQ waits until the crashes' returns have settled (one message in the queue
// or its DLQ), and asserts it is in the queue, republished by the last consumer alone.
func assertInTheQueueNotTheDLQ(t *testing.T, env *testenv.Env, top rabbitmq.Topology, republished int) {
	t.Helper()
	ch := channel(t, env.AMQPURL)
	waitFor(t, 10*time.Second, func() bool {
		return queueDepth(t, ch, top.Queue)+queueDepth(t, ch, top.DeadLetterQueue) == 1
	}, "the message back in the queue or in its DLQ")
	assert.Equal(t, 1, queueDepth(t, ch, top.Queue), "in the queue")
	assert.Zero(t, queueDepth(t, ch, top.DeadLetterQueue), "not dead-lettered")
	assert.Equal(t, 1, republished, "republished once, at its last delivery")
}

// A DLX and DLQ an operator deleted while the consumer ran stayed missing until it reconnected, and the
// broker dropped every dead letter meanwhile (a quorum queue dead-letters at most once; a helper's
// finding, 2026-12-06). The consumer declares its topology again every TopologyCheck, with an alert for
// what was missing, so the next poison message reaches the DLQ.
func TestADeadLetterQueueDeletedWhileTheConsumerRunsIsDeclaredAgain(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	logs := &testenv.Output{}
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.TopologyCheck = 50 * time.Millisecond
	c := startConsumerOn(t, env.DB, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)
	pub := newPublisher(t, env.AMQPURL, top)
	pub.event(orderPaid(1, 1, 100))
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "the consumer runs")

	ch := channel(t, env.AMQPURL)
	_, err := ch.QueueDelete(top.DeadLetterQueue, false, false, false)
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDelete(top.DeadLetterExchange, false, false))
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "alert=topology_missing") },
		"the missing DLX and DLQ reported")
	assert.Contains(t, logs.String(), top.DeadLetterQueue)

	pub.raw("poison", []byte(`{"event_id":`))
	waitDeadLettered(t, c, channel(t, env.AMQPURL), top, 1, "the poison")
}
