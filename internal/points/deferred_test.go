package points_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

// holdLease makes order orderID's credit lease look like the claim of a consumer that died between
// its claim and its commit: a token nobody will ever mark done or release, running out after ttl.
// It returns the lease key.
func holdLease(t *testing.T, env *testenv.Env, orderID int64, ttl time.Duration) string {
	t.Helper()
	key := env.Prefix + "points:dedup:" + points.BizIDOrderPaid(orderID)
	require.NoError(t, env.Redis.Set(context.Background(), key, "token-of-a-dead-consumer", ttl).Err())
	return key
}

// credited reports whether the ledger has the credit of each order.
func credited(t *testing.T, env *testenv.Env, orderIDs ...int64) bool {
	t.Helper()
	ids := make([]string, len(orderIDs))
	for i, id := range orderIDs {
		ids[i] = points.BizIDOrderPaid(id)
	}
	var n int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM points_ledger WHERE biz_id IN ?`, ids).Scan(&n).Error)
	return n == int64(len(orderIDs))
}

// A consumer killed between its claim and its commit leaves its lease held for a whole lease TTL. The
// message of that order is set aside, unacknowledged, and the rest of its batch goes on: B and C are
// credited within seconds, long before A's 20 s lease runs out. A republish of A that arrives while A
// waits joins it. Once the dead claim is gone, A is credited exactly once; neither of its copies was
// acked before that (A was published first: a multiple-ack of B or C would have acked it and lost it).
func TestHeldLeaseDoesNotStallTheBatch(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.LeaseTTL = 20 * time.Second
	key := holdLease(t, env, 1, cfg.LeaseTTL)
	pub := newPublisher(t, env.AMQPURL, top)
	a := orderPaid(1, 1, 1000) // 10 points, lease held
	pub.event(a)
	pub.event(orderPaid(2, 2, 2000)) // 20
	pub.event(orderPaid(3, 3, 3000)) // 30
	c := startConsumer(t, env, cfg)  // started after the publishes: A, B and C come in one batch

	waitFor(t, 5*time.Second, func() bool { return credited(t, env, 2, 3) }, "B and C credited while A's lease is held")
	waitCount(t, 5*time.Second, 2, func() int { return c.count(points.OutcomeApplied) }, "B and C acked and counted")
	ch := channel(t, env.AMQPURL)
	assert.Zero(t, queueDepth(t, ch, top.Queue), "A is with the consumer, not back in the queue")
	assert.False(t, credited(t, env, 1), "A waits for its lease")

	again := a
	again.EventID = uuid.NewString() // a second outbox row for A, delivered while A waits
	pub.event(again)
	waitFor(t, 5*time.Second, func() bool { return queueDepth(t, ch, top.Queue) == 0 }, "the republish delivered")
	assert.False(t, credited(t, env, 1), "the republish waits too")

	require.NoError(t, env.Redis.Del(context.Background(), key).Err()) // the dead claim runs out
	waitCount(t, 5*time.Second, 4, c.handled, "A and its republish handled")
	assert.Equal(t, 3, c.count(points.OutcomeApplied))
	assert.Equal(t, 1, c.count(points.OutcomeDuplicate), "the republish")
	assert.Zero(t, c.count(points.OutcomeFailed), "waiting for a lease is not a failure")
	assert.Equal(t, ledgerState{Rows: 3, Distinct: 3, Sum: 60, Balances: 60}, state(t, env))
	assert.Zero(t, queueDepth(t, ch, top.Queue))
	assert.Zero(t, queueDepth(t, ch, top.DeadLetterQueue))
}

// A lease held past the TTL (a holder that keeps claiming it again; a lease with a longer TTL is waited
// out instead: TestALongerLeaseIsWaitedOutToItsEnd; one that never expires is broken:
// TestALeaseThatNeverExpiresIsTaken) is not waited for forever: after LeaseTTL+LeasePoll the message
// fails as before (nack, requeue), comes back, waits again, and is credited once the lease is gone.
func TestLeaseHeldPastTheTTLFailsAndComesBack(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.LeaseTTL = 300 * time.Millisecond
	key := holdLease(t, env, 1, cfg.LeaseTTL)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // the holder claims it again and again
		defer close(stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = env.Redis.Set(context.Background(), key, "token-of-a-busy-consumer", cfg.LeaseTTL).Err()
			}
		}
	}()
	c := startConsumer(t, env, cfg)
	pub := newPublisher(t, env.AMQPURL, top)
	pub.event(orderPaid(1, 1, 1000))
	pub.event(orderPaid(2, 2, 2000))

	waitFor(t, 10*time.Second, func() bool { return c.count(points.OutcomeFailed) >= 1 }, "A gave up after one lease TTL")
	close(stop)
	<-stopped
	require.NoError(t, env.Redis.Del(context.Background(), key).Err()) // the holder lets go
	waitCount(t, 10*time.Second, 2, func() int { return c.count(points.OutcomeApplied) }, "both credited in the end")
	assert.Equal(t, ledgerState{Rows: 2, Distinct: 2, Sum: 30, Balances: 30}, state(t, env))
	ch := channel(t, env.AMQPURL)
	assert.Zero(t, queueDepth(t, ch, top.DeadLetterQueue))
}

// A claim without expiry (a PERSIST, a restore, a hand-made key: no consumer writes one) would never be
// freed. Waited for, it failed its message after each LeaseTTL until the DLQ took it (a helper's
// finding, 2026-12-06). It is taken at once, like an expired one; the ledger still decides.
func TestALeaseThatNeverExpiresIsTaken(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.LeaseTTL = time.Minute // waited for, it would outlast the test
	key := holdLease(t, env, 1, 0)
	logs := &testenv.Output{}
	c := startConsumerOn(t, env.DB, env.Redis, slog.New(slog.NewTextHandler(logs, nil)), cfg)
	newPublisher(t, env.AMQPURL, top).event(orderPaid(1, 1, 1000))

	waitFor(t, 10*time.Second, func() bool {
		return c.count(points.OutcomeApplied) > 0 || logs.Contains("points message set aside")
	}, "credited, or set aside to wait (which the test refuses at once)")
	require.False(t, logs.Contains("points message set aside"), "taken at once, not waited for")
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "credited")
	assert.Zero(t, c.count(points.OutcomeFailed))
	assert.Equal(t, ledgerState{Rows: 1, Distinct: 1, Sum: 10, Balances: 10}, state(t, env))
	waitFor(t, 5*time.Second, func() bool { return env.Redis.Get(context.Background(), key).Val() == "done" },
		"the lease marked done")
	assert.Positive(t, env.Redis.PTTL(context.Background(), key).Val(), "with an expiry")
}

// While A waits, its lease's holder commits A's credit and marks the lease done. The set-aside message
// is not acked on the word of Redis: it goes to the ledger, which answers "duplicate". One row.
func TestDeferredMessageWhoseLeaseTurnsDoneIsDecidedByTheLedger(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.LeaseTTL = 20 * time.Second
	key := holdLease(t, env, 1, cfg.LeaseTTL)
	pub := newPublisher(t, env.AMQPURL, top)
	pub.event(orderPaid(1, 1, 1000))
	pub.event(orderPaid(2, 2, 2000))
	c := startConsumer(t, env, cfg)
	waitFor(t, 5*time.Second, func() bool { return credited(t, env, 2) }, "B credited while A's lease is held")
	require.False(t, credited(t, env, 1))

	// The holder was slow, not dead: it commits A and marks its lease done.
	ledger, err := points.NewLedger(env.DB)
	require.NoError(t, err)
	_, err = ledger.Apply(context.Background(), []points.Credit{
		{BizID: points.BizIDOrderPaid(1), UserID: 1, Delta: 10, Reason: points.ReasonOrderPaid}})
	require.NoError(t, err)
	require.NoError(t, env.Redis.Set(context.Background(), key, "done", time.Hour).Err())

	waitCount(t, 5*time.Second, 2, c.handled, "A handled")
	assert.Equal(t, 1, c.count(points.OutcomeApplied), "B")
	assert.Equal(t, 1, c.count(points.OutcomeDuplicate), "A: the ledger had the holder's row")
	assert.Equal(t, ledgerState{Rows: 2, Distinct: 2, Sum: 30, Balances: 30}, state(t, env))
}

// Shutdown while A waits for a held lease: B's batch is finished and acked, A is handed back to the
// broker (never acked), and the next consumer credits it once when the lease is gone.
func TestShutdownWhileDeferredGivesTheMessageBack(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.LeaseTTL = 20 * time.Second
	key := holdLease(t, env, 1, cfg.LeaseTTL)
	pub := newPublisher(t, env.AMQPURL, top)
	pub.event(orderPaid(1, 1, 1000))
	pub.event(orderPaid(2, 2, 2000))
	first := startConsumer(t, env, cfg)
	waitCount(t, 5*time.Second, 1, func() int { return first.count(points.OutcomeApplied) }, "B credited and counted")
	ch := channel(t, env.AMQPURL)
	require.Zero(t, queueDepth(t, ch, top.Queue), "A is with the consumer")

	first.stop(t)
	waitCount(t, 5*time.Second, 1, func() int { return queueDepth(t, ch, top.Queue) }, "A back in the queue")
	assert.False(t, credited(t, env, 1))
	assert.Equal(t, 1, first.handled(), "only B was acked")

	require.NoError(t, env.Redis.Del(context.Background(), key).Err()) // the dead claim runs out
	second := startConsumer(t, env, cfg)
	waitCount(t, 5*time.Second, 1, func() int { return second.count(points.OutcomeApplied) }, "A credited by the next consumer")
	assert.Equal(t, ledgerState{Rows: 2, Distinct: 2, Sum: 30, Balances: 30}, state(t, env))
	assert.Zero(t, queueDepth(t, ch, top.Queue))
}

// A lease held by a consumer with a longer POINTS_LEASE_TTL than this one's (a rolling change of the
// setting, replicas that differ) is waited out to its own end, then claimed: the message is credited
// once, never nacked. Waiting only this consumer's TTL gave up, nacked and set it aside again until
// the broker dead-lettered it, before the lease ran out.
func TestALongerLeaseIsWaitedOutToItsEnd(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.LeaseTTL = 300 * time.Millisecond // six deliveries of 320 ms give up before 4 s
	holdLease(t, env, 5, 4*time.Second)
	pub := newPublisher(t, env.AMQPURL, top)
	pub.event(orderPaid(5, 1, 1000))
	c := startConsumer(t, env, cfg)

	waitCount(t, 15*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "credited once the lease ran out")
	assert.Zero(t, c.count(points.OutcomeFailed), "never given up")
	assert.Equal(t, ledgerState{Rows: 1, Distinct: 1, Sum: 10, Balances: 10}, state(t, env))
	ch := channel(t, env.AMQPURL)
	assert.Equal(t, 0, queueDepth(t, ch, top.DeadLetterQueue))
	assert.Equal(t, 0, queueDepth(t, ch, top.Queue))
}
