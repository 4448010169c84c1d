package points_test

import (
	"context"
	"encoding/json"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/events"
	"idemshop/internal/platform/fault"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

// A refund after the credit takes the order's points back: balance 0, the credit row and the
// reversal row, whose delta is the credit's negative.
func TestReversalAfterCreditTakesThePointsBack(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	pub := newPublisher(t, env.AMQPURL, top)
	c := startConsumer(t, env, testConfig(env.AMQPURL, env.Prefix, top))

	pub.event(orderPaid(10, 1, 1234)) // 12 points
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "credited")
	require.Equal(t, account{Balance: 12, Ledger: map[string]int64{"order-paid:10": 12}}, accountOf(t, env, 1))

	pub.refunded(orderRefunded(10, 1, 1234))
	waitCount(t, 10*time.Second, 2, func() int { return c.count(points.OutcomeApplied) }, "reversed")
	assert.Equal(t, account{Balance: 0, Ledger: map[string]int64{"order-paid:10": 12, "order-refunded:10": -12}},
		accountOf(t, env, 1))
	var reason string
	require.NoError(t, env.DB.Raw(`SELECT reason FROM points_ledger WHERE biz_id = ?`,
		points.BizIDOrderRefunded(10)).Scan(&reason).Error)
	assert.Equal(t, points.ReasonOrderRefunded, reason)
	assert.Equal(t, ledgerState{Rows: 2, Distinct: 2, Sum: 0, Balances: 0}, state(t, env))
}

// The same reversal again, whichever way it comes back, reverses once: republished (the same event,
// and a second outbox row with a new event id), republished after Redis forgot the lease (the ledger
// alone says no), and redelivered by the broker after a consumer died between the commit and the ack.
func TestReversalRepeatedReversesOnce(t *testing.T) {
	t.Parallel()
	t.Run("republished", func(t *testing.T) {
		t.Parallel()
		env := testenv.New(t)
		top := topology(t, env)
		pub := newPublisher(t, env.AMQPURL, top)
		c := startConsumer(t, env, testConfig(env.AMQPURL, env.Prefix, top))
		pub.event(orderPaid(20, 2, 5000)) // 50 points
		waitCount(t, 10*time.Second, 1, c.handled, "credited")

		ev := orderRefunded(20, 2, 5000)
		pub.refunded(ev)
		pub.refunded(ev)
		pub.refunded(ev)
		again := ev
		again.EventID = uuid.NewString()
		pub.refunded(again)
		waitCount(t, 10*time.Second, 5, c.handled, "every copy handled")
		assert.Equal(t, 2, c.count(points.OutcomeApplied), "one credit, one reversal")
		assert.Equal(t, 3, c.count(points.OutcomeDuplicate))
		want := account{Balance: 0, Ledger: map[string]int64{"order-paid:20": 50, "order-refunded:20": -50}}
		assert.Equal(t, want, accountOf(t, env, 2))

		keys, err := env.Redis.Keys(context.Background(), env.Prefix+"points:dedup:*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 2, "one lease per biz_id, both done")
		// The marks are written beside the acks: wait for both before forgetting them, or a late one
		// would write "done" again after the DEL.
		waitFor(t, 5*time.Second, func() bool {
			vals, err := env.Redis.MGet(context.Background(), keys...).Result()
			return err == nil && vals[0] == "done" && vals[1] == "done"
		}, "both leases marked done")
		require.NoError(t, env.Redis.Del(context.Background(), keys...).Err())
		pub.refunded(ev)
		waitCount(t, 10*time.Second, 6, c.handled, "handled without Redis's memory")
		assert.Equal(t, 4, c.count(points.OutcomeDuplicate))
		assert.Equal(t, want, accountOf(t, env, 2))
	})

	t.Run("redelivered after a crash between commit and ack", func(t *testing.T) {
		t.Parallel()
		env := testenv.New(t)
		top := topology(t, env)
		pub := newPublisher(t, env.AMQPURL, top)
		cfg := testConfig(env.AMQPURL, env.Prefix, top)
		cfg.LeaseTTL = 500 * time.Millisecond // the redelivery waits this long for the dead claim
		var armed atomic.Bool
		crashed := make(chan struct{})
		first := cfg
		first.Fault = func(_ context.Context, p fault.Point) {
			if p == points.CrashAfterCommit && armed.Load() {
				close(crashed)
				// The consumer's goroutine ends here: no done marker, no ack; its deferred conn.Close
				// runs, so the broker puts the reversal back in the queue (as a kill -9 would).
				runtime.Goexit()
			}
		}
		a := startConsumer(t, env, first)
		pub.event(orderPaid(21, 3, 900)) // 9 points
		waitCount(t, 10*time.Second, 1, a.handled, "credited")
		armed.Store(true)
		pub.refunded(orderRefunded(21, 3, 900))
		select {
		case <-crashed:
		case <-time.After(10 * time.Second):
			t.Fatal("the first consumer did not reach the crash point")
		}
		want := account{Balance: 0, Ledger: map[string]int64{"order-paid:21": 9, "order-refunded:21": -9}}
		require.Equal(t, want, accountOf(t, env, 3), "the reversal was committed before the crash")

		b := startConsumer(t, env, cfg)
		waitCount(t, 10*time.Second, 1, b.handled, "the redelivery handled")
		assert.Equal(t, 1, b.count(points.OutcomeDuplicate), "the ledger already has the reversal")
		assert.Equal(t, want, accountOf(t, env, 3))
		assert.Equal(t, ledgerState{Rows: 2, Distinct: 2, Sum: 0, Balances: 0}, state(t, env))
	})
}

// A reversal that overtakes its credit (a requeue, a redelivery) loses nothing: it applies the credit
// from its own data, then reverses it, in one transaction; the late order.paid is a duplicate.
func TestReversalBeforeItsCreditThenTheCredit(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	pub := newPublisher(t, env.AMQPURL, top)
	c := startConsumer(t, env, testConfig(env.AMQPURL, env.Prefix, top))
	want := account{Balance: 0, Ledger: map[string]int64{"order-paid:30": 25, "order-refunded:30": -25}}

	pub.refunded(orderRefunded(30, 1, 2500)) // 25 points
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "reversal applied")
	assert.Equal(t, want, accountOf(t, env, 1), "credit and reversal, together")

	pub.event(orderPaid(30, 1, 2500))
	waitCount(t, 10*time.Second, 2, c.handled, "the late credit handled")
	assert.Equal(t, 1, c.count(points.OutcomeDuplicate), "the late order.paid is a duplicate")
	assert.Equal(t, want, accountOf(t, env, 1), "credited once, reversed once")
	assert.Equal(t, ledgerState{Rows: 2, Distinct: 2, Sum: 0, Balances: 0}, state(t, env))
}

// Points already spent on rewards are not clawed back below zero: the reversal takes what is left,
// and its ledger row records that amount, so the balance still equals the sum of the deltas.
func TestReversalOfSpentPointsStopsAtZero(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		spent        int64
		wantReversal int64
	}{
		"part spent": {spent: 30, wantReversal: -20},
		"all spent":  {spent: 50, wantReversal: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			top := topology(t, env)
			pub := newPublisher(t, env.AMQPURL, top)
			c := startConsumer(t, env, testConfig(env.AMQPURL, env.Prefix, top))
			pub.event(orderPaid(40, 2, 5000)) // 50 points
			waitCount(t, 10*time.Second, 1, c.handled, "credited")
			spend(t, env.DB, 2, tc.spent, "redeem:test-token")

			pub.refunded(orderRefunded(40, 2, 5000))
			waitCount(t, 10*time.Second, 2, c.handled, "reversal handled")
			assert.Equal(t, 2, c.count(points.OutcomeApplied), "a partial reversal is applied, not failed")
			assert.Equal(t, account{Balance: 0, Ledger: map[string]int64{
				"order-paid:40": 50, "redeem:test-token": -tc.spent, "order-refunded:40": tc.wantReversal,
			}}, accountOf(t, env, 2))
			assert.Equal(t, ledgerState{Rows: 3, Distinct: 3, Sum: 0, Balances: 0}, state(t, env))
		})
	}
}

// N consumers, N copies of one reversal published at once behind a barrier: one reversal row.
func TestConsumersRacingOnOneReversalReverseOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.Prefetch, cfg.BatchSize = 1, 1 // spread the copies over the consumers
	const n = 4
	consumers := make([]*running, n)
	for i := range consumers {
		consumers[i] = startConsumer(t, env, cfg)
	}
	total := func(outcome string) int {
		sum := 0
		for _, c := range consumers {
			sum += c.count(outcome)
		}
		return sum
	}
	newPublisher(t, env.AMQPURL, top).event(orderPaid(50, 1, 7700)) // 77 points
	waitCount(t, 10*time.Second, 1, func() int { return total(points.OutcomeApplied) }, "credited")

	ev := orderRefunded(50, 1, 7700)
	start := make(chan struct{})
	done := make(chan struct{}, n)
	for range n {
		pub := newPublisher(t, env.AMQPURL, top) // one channel per goroutine: channels are not shared
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			pub.refunded(ev)
		}()
	}
	close(start)
	for range n {
		<-done
	}
	waitCount(t, 15*time.Second, 1+n, func() int {
		return total(points.OutcomeApplied) + total(points.OutcomeDuplicate)
	}, "every copy handled")
	assert.Equal(t, 2, total(points.OutcomeApplied), "one credit, one reversal")
	assert.Equal(t, account{Balance: 0, Ledger: map[string]int64{"order-paid:50": 77, "order-refunded:50": -77}},
		accountOf(t, env, 1))
}

// A reversal that does not validate is poison like a bad order.paid, and so is a routing key the
// consumer does not know: retried to the delivery limit, dead-lettered, never applied.
func TestReversalPoisonAndUnknownRoutingKeyAreDeadLettered(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env, "order.shipped")
	pub := newPublisher(t, env.AMQPURL, top)
	c := startConsumer(t, env, testConfig(env.AMQPURL, env.Prefix, top))

	wrongPoints := orderRefunded(60, 1, 1000)
	wrongPoints.Points = 11 // 1000 cents earn 10
	pub.refunded(wrongPoints)
	noUser := orderRefunded(61, 0, 1000)
	pub.refunded(noUser)
	body, err := json.Marshal(orderPaid(62, 1, 1000)) // a good body under a key nobody handles
	require.NoError(t, err)
	pub.rawTo("order.shipped", uuid.NewString(), body)
	pub.event(orderPaid(63, 1, 1000)) // a good message among them still goes through

	ch := channel(t, env.AMQPURL)
	waitDeadLettered(t, c, ch, top, 3, "three poisons")
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "the good one applied")
	assert.Equal(t, 3*events.DeliveryLimit, c.count(points.OutcomeFailed), "each retried up to the limit")
	assert.Equal(t, account{Balance: 10, Ledger: map[string]int64{"order-paid:63": 10}}, accountOf(t, env, 1))
	assert.Equal(t, 0, queueDepth(t, ch, top.Queue))
}

// A forged reversal beside the real one in one batch (same order, another user) is judged on its own:
// the real one takes the order's points back from its user, the forged one is dead-lettered and takes
// nothing. (As copies of one event, the real one followed the forged one's outcome into the DLQ.)
func TestAForgedReversalBesideTheRealOneFailsAlone(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	pub := newPublisher(t, env.AMQPURL, top)
	l, err := points.NewLedger(env.DB)
	require.NoError(t, err)
	_, err = l.Apply(context.Background(), []points.Credit{
		{BizID: points.BizIDOrderPaid(70), UserID: 1, Delta: 10, Reason: points.ReasonOrderPaid},
		{BizID: points.BizIDOrderPaid(71), UserID: 2, Delta: 50, Reason: points.ReasonOrderPaid},
	})
	require.NoError(t, err)

	// Both are queued before the consumer starts, and its batch closes at two messages, with a batch
	// wait that leaves the broker 200 ms to hand over the second (2 ms let it slip into a batch of its
	// own about once in 25 runs, and the test then passed without the guard).
	pub.refunded(orderRefunded(70, 2, 1000)) // forged: order 70 credited user 1
	pub.refunded(orderRefunded(70, 1, 1000))
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.BatchSize, cfg.BatchWait = 2, 200*time.Millisecond
	c := startConsumer(t, env, cfg)

	ch := channel(t, env.AMQPURL)
	waitDeadLettered(t, c, ch, top, 1, "the forged one")
	require.Equal(t, 1, c.count(points.OutcomeDeadLettered), "the real one is not dead-lettered with it")
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "the real one applied")
	assert.Equal(t, account{Balance: 0, Ledger: map[string]int64{"order-paid:70": 10, "order-refunded:70": -10}},
		accountOf(t, env, 1))
	assert.Equal(t, account{Balance: 50, Ledger: map[string]int64{"order-paid:71": 50}}, accountOf(t, env, 2))
	assert.Equal(t, 0, queueDepth(t, ch, top.Queue))
}

// A forged reversal that overtakes its order's order.paid writes the credit from its own data (rule 2
// of the reversal): the real order.paid, for another user, then finds a credit in the ledger that is
// not its own. It is poison, dead-lettered for a person to judge, not a duplicate dropped in silence.
func TestACreditUnlikeTheOneAReversalWroteIsDeadLettered(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	pub := newPublisher(t, env.AMQPURL, top)
	c := startConsumer(t, env, testConfig(env.AMQPURL, env.Prefix, top))

	pub.refunded(orderRefunded(901, 2, 500)) // forged: order 901 is user 1's
	waitCount(t, 10*time.Second, 1, func() int { return c.count(points.OutcomeApplied) }, "the forged reversal applied")
	pub.event(orderPaid(901, 1, 500))

	// Its first delivery already says which: failed (poison, on its way to the DLQ) or a duplicate.
	waitFor(t, 10*time.Second, func() bool { return c.count(points.OutcomeFailed)+c.count(points.OutcomeDuplicate) > 0 },
		"the real credit handled")
	require.Zero(t, c.count(points.OutcomeDuplicate), "not taken for a copy")
	ch := channel(t, env.AMQPURL)
	waitDeadLettered(t, c, ch, top, 1, "the real credit")
	assert.Zero(t, c.count(points.OutcomeDuplicate), "not taken for a copy")
	assert.Equal(t, account{Balance: 0, Ledger: map[string]int64{}}, accountOf(t, env, 1))
	assert.Equal(t, account{Balance: 0, Ledger: map[string]int64{"order-paid:901": 5, "order-refunded:901": -5}},
		accountOf(t, env, 2))
}

// Two credits for one order that say different things (a forged or broken one beside the real one) are
// never copies: the first is credited, the second is judged against its row and dead-lettered, not
// acked as a duplicate or as "applied". Twice where nothing else stood between them: while they wait on
// a lease someone else holds (set aside together, the second once joined the first as its copy), and
// with Redis down, when both reach one INSERT (the second read as inserted).
func TestTwoUnlikeCreditsForOneOrderAreNeverCopies(t *testing.T) {
	t.Parallel()
	for name, redisDown := range map[string]bool{"waiting on a held lease": false, "Redis down": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			top := topology(t, env)
			pub := newPublisher(t, env.AMQPURL, top)
			cfg := testConfig(env.AMQPURL, env.Prefix, top)
			// One batch of two, with time for the broker to hand over the second (as in
			// TestAForgedReversalBesideTheRealOneFailsAlone).
			cfg.BatchSize, cfg.BatchWait = 2, 200*time.Millisecond
			rdb := env.Redis
			if redisDown {
				rdb = redis.NewClient(&redis.Options{Addr: testenv.FreeAddr(t), MaxRetries: -1,
					DialTimeout: 50 * time.Millisecond})
				t.Cleanup(func() { _ = rdb.Close() })
			} else {
				holdLease(t, env, 900, time.Second)
			}
			pub.event(orderPaid(900, 2, 2500)) // first: credited
			pub.event(orderPaid(900, 1, 2500)) // the same order for another user
			c := startConsumerOn(t, env.DB, rdb, testLogger(), cfg)

			ch := channel(t, env.AMQPURL)
			// Until the second's fate shows: dead-lettered, or taken for a copy or applied (asserted
			// below at once, not waited out).
			waitFor(t, 20*time.Second, func() bool {
				return queueDepth(t, ch, top.DeadLetterQueue) > 0 || c.count(points.OutcomeDuplicate) > 0 ||
					c.count(points.OutcomeApplied) > 1
			}, "the second credit handled")
			require.Zero(t, c.count(points.OutcomeDuplicate), "neither is taken for a copy")
			require.LessOrEqual(t, c.count(points.OutcomeApplied), 1, "only the first is applied")
			waitDeadLettered(t, c, ch, top, 1, "the second credit")
			assert.Equal(t, 1, c.count(points.OutcomeApplied), "only the first is applied")
			assert.Zero(t, c.count(points.OutcomeDuplicate), "neither is taken for a copy")
			assert.Equal(t, account{Balance: 25, Ledger: map[string]int64{"order-paid:900": 25}}, accountOf(t, env, 2))
			assert.Equal(t, account{Balance: 0, Ledger: map[string]int64{}}, accountOf(t, env, 1))
			assert.Equal(t, 0, queueDepth(t, ch, top.Queue))
		})
	}
}
