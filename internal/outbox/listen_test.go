package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/events"
	"idemshop/internal/outbox"
	"idemshop/internal/testenv"
)

// The poll is an hour away, so only the notification sent on commit (Notify) can make the relay
// publish. The
// rows are inserted one at a time once the relay listens, each waited for: the relay's start-up drains
// (one when its broker session starts, one when LISTEN succeeds) can publish at most two rows that no
// notification announced, so the third is published only if a notification wakes the relay.
// Guards the relay-wake-on-notify mutant (internal/mutants).
func TestRelayWakesOnCommitWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := relayConfig(env.AMQPURL, topology(t, env))
	cfg.PollInterval = time.Hour
	relay := runRelay(t, env, cfg, nil)
	waitFor(t, 10*time.Second, func() bool { return gathered(relay, "idemshop_outbox_listening") == 1 }, "listening")

	for id := int64(1); id <= 3; id++ {
		insertPaidNotified(t, env.DB, id, id)
		waitFor(t, 5*time.Second, func() bool { return pending(t, env.DB) == 0 },
			fmt.Sprintf("row %d published on its commit's notification, not an hour later", id))
	}
	assert.GreaterOrEqual(t, gathered(relay, "idemshop_outbox_notifications_total"), 3)
	assert.Equal(t, 3, gathered(relay, "idemshop_outbox_published_total"))
}

// The listen connection is killed (pg_terminate_backend) and, for a while, cannot be opened again:
// the relay goes on publishing on its poll. Once the database lets it in, it listens again on a new
// connection, and the next commit's notification reaches it.
func TestRelayPollsWhileItsListenConnectionIsGoneThenListensAgain(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := relayConfig(env.AMQPURL, topology(t, env)) // 20 ms poll
	var refuse atomic.Bool
	var refused atomic.Int64
	relay := runRelay(t, env, cfg, func(r *outbox.Relay) {
		outbox.SetBeforeListen(r, func() error {
			if refuse.Load() {
				refused.Add(1)
				return errors.New("simulated: the database refuses the listen connection")
			}
			return nil
		})
	})
	listening := func() int { return gathered(relay, "idemshop_outbox_listening") }
	waitFor(t, 10*time.Second, func() bool { return listening() == 1 }, "listening")
	first := listenerPID(t, env.DB)
	insertPaidNotified(t, env.DB, 1, 1)
	waitFor(t, 5*time.Second, func() bool { return pending(t, env.DB) == 0 }, "first row published")

	refuse.Store(true)
	var terminated bool
	require.NoError(t, env.DB.Raw(`SELECT pg_terminate_backend(?)`, first).Scan(&terminated).Error)
	require.True(t, terminated, "listen connection (pid %d) not terminated", first)
	waitFor(t, 10*time.Second, func() bool { return listening() == 0 && refused.Load() >= 1 },
		"the relay noticed the lost connection and cannot listen again yet")

	insertPaidNotified(t, env.DB, 2, 6) // nobody hears these notifications
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published by the poll alone")
	require.Equal(t, 0, listening(), "the listener came back too early: the poll was not what published")

	notified := gathered(relay, "idemshop_outbox_notifications_total")
	refuse.Store(false)
	waitFor(t, 10*time.Second, func() bool { return listening() == 1 }, "listening again after the backoff")
	assert.NotEqual(t, first, listenerPID(t, env.DB), "a new listen connection")
	insertPaidNotified(t, env.DB, 7, 7)
	waitFor(t, 5*time.Second, func() bool {
		return gathered(relay, "idemshop_outbox_notifications_total") > notified && pending(t, env.DB) == 0
	}, "the next commit's notification reached the relay, and its row was published")
	assert.Equal(t, 7, gathered(relay, "idemshop_outbox_published_total"))
}

// 2,000 notifications arrive while the relay is busy with a batch: they leave one wake-up pending,
// which costs one more drain, not 2,000.
func TestRelayFoldsABurstOfNotificationsIntoOneDrain(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := relayConfig(env.AMQPURL, topology(t, env))
	cfg.PollInterval = time.Hour // no drain but the ones notifications cause
	inBatch, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	var r *outbox.Relay
	relay := runRelay(t, env, cfg, func(rel *outbox.Relay) {
		r = rel
		outbox.SetBeforeMark(rel, func() error {
			if held.CompareAndSwap(false, true) { // hold the first batch only
				close(inBatch)
				<-release
			}
			return nil
		})
	})
	t.Cleanup(func() {
		if held.Load() {
			select {
			case <-release:
			default:
				close(release) // a failed test must not leave the relay stuck for its cleanup
			}
		}
	})
	waitFor(t, 10*time.Second, func() bool { return gathered(relay, "idemshop_outbox_listening") == 1 }, "listening")
	insertPaidNotified(t, env.DB, 1, 1)
	select {
	case <-inBatch:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never started a batch with the row")
	}

	before := polls(relay) // the held batch is counted once it ends
	notified := gathered(relay, "idemshop_outbox_notifications_total")
	// Distinct payloads, or PostgreSQL would fold the 2,000 into one (same channel, same payload, one
	// transaction).
	require.NoError(t, env.DB.Exec(`SELECT pg_notify(?, g::text) FROM generate_series(1, 2000) g`,
		outbox.NotifyChannel).Error)
	waitCount(t, 10*time.Second, notified+2000, func() int {
		return gathered(relay, "idemshop_outbox_notifications_total")
	}, "every notification received")
	assert.Equal(t, 1, outbox.PendingWakeUps(r), "2,000 notifications leave one wake-up pending")

	close(release)
	waitCount(t, 10*time.Second, before+2, func() int { return polls(relay) },
		"the held batch, then one drain for the whole burst")
	waitFor(t, 5*time.Second, func() bool { return pending(t, env.DB) == 0 }, "row published")
}

// insertPaidNotified is insertPaid by a writer that also calls Notify in each transaction.
func insertPaidNotified(t *testing.T, db *gorm.DB, from, to int64) {
	t.Helper()
	for id := from; id <= to; id++ {
		ev := events.OrderPaid{EventID: uuid.NewString(), OrderID: id, UserID: id%3 + 1, AmountCents: 1250,
			Points: events.PointsFor(1250), OccurredAt: time.Now().UTC()}
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
			if err := outbox.Insert(context.Background(), tx, ev.EventID, events.RoutingKeyOrderPaid, ev); err != nil {
				return err
			}
			return outbox.Notify(context.Background(), tx)
		}))
	}
}

// A notification whose transaction rolls back is never delivered: the relay is not woken for a row
// that does not exist.
func TestNotifyIsDeliveredOnlyOnCommit(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := relayConfig(env.AMQPURL, topology(t, env))
	cfg.PollInterval = time.Hour
	relay := runRelay(t, env, cfg, nil)
	waitFor(t, 10*time.Second, func() bool { return gathered(relay, "idemshop_outbox_listening") == 1 }, "listening")
	rollback := errors.New("rolled back")
	require.ErrorIs(t, env.DB.Transaction(func(tx *gorm.DB) error {
		require.NoError(t, outbox.Notify(context.Background(), tx))
		return rollback
	}), rollback)
	insertPaidNotified(t, env.DB, 1, 1) // then one that commits: its notification arrives, alone
	waitFor(t, 5*time.Second, func() bool { return pending(t, env.DB) == 0 }, "the committed row published")
	assert.Equal(t, 1, gathered(relay, "idemshop_outbox_notifications_total"), "only the committed transaction notified")
}

// runRelay starts a relay with cfg (setup, if set, installs test hooks before it runs) and returns
// its metrics.
func runRelay(t *testing.T, env *testenv.Env, cfg outbox.RelayConfig, setup func(*outbox.Relay)) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	r, err := outbox.NewRelay(env.DB, cfg, logger(), reg)
	require.NoError(t, err)
	if setup != nil {
		setup(r)
	}
	runInBackground(t, r.Run)
	return reg
}

// listenerPID returns the backend pid of the relay's listen connection to this test's database.
func listenerPID(t *testing.T, db *gorm.DB) int64 {
	t.Helper()
	var pids []int64
	require.NoError(t, db.WithContext(context.Background()).Raw(`SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = ?`, outbox.ListenApplicationName).Scan(&pids).Error)
	require.Len(t, pids, 1, "one listen connection")
	return pids[0]
}

// polls returns the relay's drains so far, empty or not.
func polls(g prometheus.Gatherer) int {
	mfs, _ := g.Gather()
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "idemshop_outbox_polls_total" {
			for _, m := range mf.GetMetric() {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}
