package points_test

import (
	"context"
	amqp "github.com/rabbitmq/amqp091-go"
	"log/slog"
	"strings"
	"testing"
	"time"

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

// On RabbitMQ 3.x every return counts toward x-delivery-limit, a crash's too. Good messages that a
// consumer holds while the ledger cannot take them, then a crash, six times over: the sixth return
// dead-lettered them, and their credits waited in the DLQ for a person (a helper's finding, 2026-12-06).
// Held means the batch retried in place (its credits, and the reversal that waits for them) and the
// deliveries waiting behind it: at their last delivery they are now republished, and the next consumer
// credits each once.
func TestGoodMessagesHeldThroughCrashesAreNotDeadLettered(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	dbProxy, db := databaseViaProxy(t, env)
	dbProxy.Cut()
	pub := newPublisher(t, env.AMQPURL, top)
	pub.event(orderPaid(1, 1, 100))
	pub.refunded(orderRefunded(1, 1, 100)) // in the first batch, behind its credits
	for i := int64(2); i <= 5; i++ {
		pub.event(orderPaid(i, i%3+1, 100)) // order 2 in the first batch, the rest behind it
	}
	const n = 6

	crashes := crashHolding(t, env, db, top, n, func(logs string) bool {
		return strings.Count(logs, "applying credits failed; retrying") >= 2
	})
	assertInTheQueueNotTheDLQ(t, env, top, n, crashes)

	dbProxy.Restore()
	c := startConsumerOn(t, db, env.Redis, testLogger(), testConfig(env.AMQPURL, env.Prefix, top))
	waitCount(t, 10*time.Second, n, func() int { return c.count(points.OutcomeApplied) }, "credited and reversed after the crashes")
	assert.Equal(t, ledgerState{Rows: 6, Distinct: 6, Sum: 4, Balances: 4}, state(t, env))
	assert.Zero(t, queueDepth(t, channel(t, env.AMQPURL), top.DeadLetterQueue), "nothing dead-lettered")
}

// The same for a message set aside because another consumer holds its lease: held unacknowledged in
// the consumer (setAside), it came back with each crash, and the sixth dead-lettered it. The copy goes
// to the consumer's queue alone: sent through the events exchange, it reached every queue bound there
// (a tap here), and with the queue's own binding gone, only those (a helper's finding, 2026-12-06).
func TestAMessageSetAsideThroughCrashesIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	tap := env.Queue("tap")
	tapCh := channel(t, env.AMQPURL)
	_, err := tapCh.QueueDeclare(tap, false, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, tapCh.QueueBind(tap, "#", top.Exchange, false, nil))
	lease := env.Prefix + "points:dedup:" + points.BizIDOrderPaid(1)
	require.NoError(t, env.Redis.Set(t.Context(), lease, "another-consumer", time.Minute).Err())
	newPublisher(t, env.AMQPURL, top).event(orderPaid(1, 1, 100))

	crashes := crashHolding(t, env, env.DB, top, 1, func(logs string) bool {
		return strings.Contains(logs, "points message set aside")
	})
	assertInTheQueueNotTheDLQ(t, env, top, 1, crashes)
	assert.Equal(t, 1, queueDepth(t, tapCh, tap), "the tap has the event once: the copy went to the queue alone")

	require.NoError(t, env.Redis.Del(t.Context(), lease).Err()) // the other consumer let go
	c := startConsumer(t, env, testConfig(env.AMQPURL, env.Prefix, top))
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "credited after the crashes")
	assert.Equal(t, ledgerState{Rows: 1, Distinct: 1, Sum: 1, Balances: 1}, state(t, env))
	assert.Zero(t, queueDepth(t, channel(t, env.AMQPURL), top.DeadLetterQueue), "nothing dead-lettered")
}

// crashHolding starts a consumer on db (batches of 3, prefetch 10), waits until it has every one of the
// n messages (none ready in the queue) and its log says it holds them (held), and crashes it: its
// broker connection is cut, so the broker takes back what it held, as after kill -9. It does so once
// more than the delivery limit allows; the last consumer is waited for until it has republished n
// messages, and stopped. It returns how many republishes the consumers logged.
func crashHolding(t *testing.T, env *testenv.Env, db *gorm.DB, top rabbitmq.Topology, n int, held func(logs string) bool) (republished int) {
	t.Helper()
	ch := channel(t, env.AMQPURL)
	for i := range events.DeliveryLimit + 1 {
		amqpProxy, amqpURL := tcpproxy.ForURL(t, env.AMQPURL)
		logs := &testenv.Output{}
		cfg := testConfig(amqpURL, env.Prefix, top)
		cfg.Prefetch, cfg.BatchSize = 10, 3
		cfg.ReconnectMin, cfg.ReconnectMax = 5*time.Millisecond, 10*time.Millisecond
		c := startConsumerOn(t, db, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)
		last := i == events.DeliveryLimit
		waitFor(t, 10*time.Second, func() bool {
			if last {
				return strings.Count(logs.String(), "republished at its last delivery") >= n
			}
			return held(logs.String()) && queueDepth(t, ch, top.Queue) == 0
		}, "delivery %d held", i+1)
		if last {
			// Each republish acked its original just before its line: a cut now could lose that ack
			// inside the proxy, and the original's return would dead-letter it beside its copy (what
			// republish says of a lost ack; a run at -parallel 4 saw it). Stopped first, the consumer's
			// acks reach the broker before its close.
			c.stop(t)
			amqpProxy.Cut()
		} else {
			amqpProxy.Cut()
			c.stop(t)
		}
		republished += strings.Count(logs.String(), "republished at its last delivery")
	}
	return republished
}

// assertInTheQueueNotTheDLQ waits until the crashes' returns have settled (n messages in the queue or
// its DLQ), and asserts they are in the queue, each republished once, at its last delivery.
func assertInTheQueueNotTheDLQ(t *testing.T, env *testenv.Env, top rabbitmq.Topology, n, republished int) {
	t.Helper()
	ch := channel(t, env.AMQPURL)
	waitFor(t, 10*time.Second, func() bool {
		return queueDepth(t, ch, top.Queue)+queueDepth(t, ch, top.DeadLetterQueue) == n
	}, "the messages back in the queue or in its DLQ")
	assert.Equal(t, n, queueDepth(t, ch, top.Queue), "in the queue")
	assert.Zero(t, queueDepth(t, ch, top.DeadLetterQueue), "not dead-lettered")
	assert.Equal(t, n, republished, "each republished once, at its last delivery")
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
	t.Cleanup(func() {
		if t.Failed() { // a CI run under load once saw no alert in 10 s: what did the checks say?
			t.Logf("the consumer's log:\n%s", logs.String())
		}
	})
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.TopologyCheck = 50 * time.Millisecond
	c := startConsumerOn(t, env.DB, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)
	pub := newPublisher(t, env.AMQPURL, top)
	pub.event(orderPaid(1, 1, 100))
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "the consumer runs")

	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	// An alert that names the DLQ: a check whose lookups straddle the deletions reports only the DLX
	// (a CI run's, 2026-12-07), and declares both again.
	alerted := func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "alert=topology_missing") && strings.Contains(line, top.DeadLetterQueue) {
				return true
			}
		}
		return false
	}
	// A check that looked the names up just before they went declares them again without an alert (the
	// window between its lookups and its declare; under a CI run's load it once hid the deletion for
	// good): delete them again until a check sees them missing, each time polling a second for it.
	for attempt := 0; attempt < 10 && !alerted(); attempt++ {
		require.NoError(t, rabbitmq.DeleteNames(conn, top.DeadLetterQueue, top.DeadLetterExchange))
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && !alerted(); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.True(t, alerted(), "the missing DLQ reported")
	// The alert's check may have met the DLX deleted after its lookups (its bind then fails, and the
	// next check declares it again): a poison dead-lettered before then is dropped, the gap the alert
	// reports. Send it once both are back.
	waitFor(t, 10*time.Second, func() bool { return len(env.Missing(top)) == 0 }, "the DLX and DLQ declared again")

	pub.raw("poison", []byte(`{"event_id":`))
	waitDeadLettered(t, c, channel(t, env.AMQPURL), top, 1, "the poison")
}

// A DLX and DLQ deleted between two sessions: the second session's declare re-created them without a
// word, and the periodic check then found nothing missing, so the dead letters the broker dropped
// meanwhile were never reported (a helper's finding, 2026-12-07). Every session after the first looks
// the names up before it declares them; the first declares a new broker's topology without an alert.
func TestATopologyDeletedBetweenTwoSessionsIsReported(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := env.Topology("fresh.") // not declared yet: the first session creates all of it
	proxy, viaProxy := tcpproxy.ForURL(t, env.AMQPURL)
	logs := &testenv.Output{}
	cfg := testConfig(viaProxy, env.Prefix, top)
	cfg.TopologyCheck = time.Hour // only a session's declare can see the deletion
	cfg.ReconnectMin, cfg.ReconnectMax = 5*time.Millisecond, 10*time.Millisecond
	c := startConsumerOn(t, env.DB, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)
	waitFor(t, 10*time.Second, func() bool { return c.Subscribed() == nil }, "subscribed")
	assert.NotContains(t, logs.String(), "topology_missing", "the first session's declare is no alert")

	env.DeleteWhileCut(proxy, top.DeadLetterQueue, top.DeadLetterExchange)
	waitFor(t, 10*time.Second, func() bool { return strings.Count(logs.String(), "points consumer connected") >= 2 }, "connected again")
	assert.Equal(t, 1, strings.Count(logs.String(), "alert=topology_missing"), "%s", logs.String())
	assert.Contains(t, logs.String(), top.DeadLetterQueue)
	assert.Contains(t, logs.String(), top.DeadLetterExchange)
	assert.Empty(t, env.Missing(top), "declared again")
}

// A message whose lease another consumer keeps taking again is set aside, gives up after each lease
// TTL, and at its last delivery is republished: without a bound the copy did the same, round the queue
// for ever, where it used to reach the DLQ (a helper's finding, 2026-12-06). After MaxRepublish copies
// the DLQ takes it.
func TestAMessageRepublishedMaxRepublishTimesIsDeadLettered(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	logs := &testenv.Output{}
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.LeaseTTL, cfg.MaxRepublish = 200*time.Millisecond, 1
	key := env.Prefix + "points:dedup:" + points.BizIDOrderPaid(1)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // the other consumer takes the lease again and again
		defer close(stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = env.Redis.Set(context.Background(), key, "token-of-a-busy-consumer", cfg.LeaseTTL).Err()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	c := startConsumerOn(t, env.DB, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)
	newPublisher(t, env.AMQPURL, top).event(orderPaid(1, 1, 100))

	ch := channel(t, env.AMQPURL)
	waitFor(t, 20*time.Second, func() bool {
		return queueDepth(t, ch, top.DeadLetterQueue) > 0 || strings.Count(logs.String(), "republished at its last delivery") > 1
	}, "dead-lettered, or republished a second time (which the test refuses at once)")
	require.Equal(t, 1, strings.Count(logs.String(), "republished at its last delivery"), "republished once, then left to the DLQ")
	waitDeadLettered(t, c, ch, top, 1, "the message")
	assert.Equal(t, 1, strings.Count(logs.String(), "republished at its last delivery"), "republished once, then left to the DLQ")
	assert.Equal(t, 2*events.DeliveryLimit+1, c.count(points.OutcomeFailed), "the original's six deliveries and the copy's first five failed")
	assert.Zero(t, state(t, env).Rows)
}

// A hand-back dead-letters none of the messages it holds. Each failed attempt republishes what the
// session holds at its last delivery and acks it; the broker fills the freed prefetch slots at once,
// before the cancel of the hand-back. Those refills came back with the session's channel, and the ones
// at their last delivery were dead-lettered, uncounted (a helper's finding, 2026-12-08: 10 of 60 good
// messages in the DLQ, a prefetch's worth). Every message here is at its last delivery.
func TestAHandBackDeadLettersNoneOfWhatArrivedAfterItsRepublish(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	const n = 40
	pub := newPublisher(t, env.AMQPURL, top)
	for i := int64(1); i <= n; i++ {
		pub.event(orderPaid(i, i%3+1, 100))
	}
	returnEach(t, env, top, n, top.DeliveryLimit)

	proxy, viaProxy := tcpproxy.ForURL(t, env.DatabaseURL)
	db, err := postgres.Open(context.Background(), viaProxy, postgres.Options{LockTimeout: 2 * time.Second,
		StatementTimeout: 10 * time.Second, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(db) })
	proxy.Cut()
	t.Cleanup(proxy.Restore) // before the consumer's stop
	logs := &testenv.Output{}
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.Prefetch, cfg.BatchSize = 10, 1
	// Handed back at the first failed attempt: the refills of what it republished are the ones at risk,
	// and the queue still has more than a prefetch.
	cfg.AttemptTimeout, cfg.HandBackAfter = 300*time.Millisecond, time.Millisecond
	cfg.Reachable = func(ctx context.Context) error { return postgres.Reachable(ctx, viaProxy) }
	c := startConsumerOn(t, db, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)

	waitFor(t, 10*time.Second, func() bool { return logs.Contains("handing this consumer's messages back to the queue") },
		"handed back")
	proxy.Restore()
	ch := channel(t, env.AMQPURL)
	waitFor(t, 20*time.Second, func() bool {
		return c.count(points.OutcomeApplied)+queueDepth(t, ch, top.DeadLetterQueue) >= n
	}, "each message credited (once the database answers) or dead-lettered")
	assert.Zero(t, queueDepth(t, ch, top.DeadLetterQueue), "nothing dead-lettered")
	assert.Equal(t, ledgerState{Rows: n, Distinct: n, Sum: n, Balances: n}, state(t, env))
	assert.Zero(t, c.count(points.OutcomeDeadLettered))
}

// returnEach takes each of the n messages of top's queue and returns it (nack, requeue), times times
// over, as consumers that crashed would have: x-delivery-count reaches times.
func returnEach(t *testing.T, env *testenv.Env, top rabbitmq.Topology, n, times int) {
	t.Helper()
	ch := channel(t, env.AMQPURL)
	for range times {
		var got []amqp.Delivery
		waitFor(t, 10*time.Second, func() bool {
			d, ok, err := ch.Get(top.Queue, false)
			require.NoError(t, err)
			if ok {
				got = append(got, d)
			}
			return len(got) == n
		}, "all %d taken", n)
		for _, d := range got {
			require.NoError(t, d.Nack(false, true))
		}
	}
}
