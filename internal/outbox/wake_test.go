package outbox_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/outbox"
	"idemshop/internal/testenv"
)

// A writer of the relay's process wakes it after its commit (Relay.Wake): the rows are published at
// once, with no notification (they were inserted without Notify) and no poll (an hour away).
func TestRelayWakeDrainsWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := relayConfig(env.AMQPURL, topology(t, env))
	cfg.PollInterval = time.Hour
	var r *outbox.Relay
	relay := runRelay(t, env, cfg, func(rel *outbox.Relay) { r = rel })
	waitFor(t, 10*time.Second, func() bool {
		return gathered(relay, "idemshop_outbox_listening") == 1 && polls(relay) >= 1 && outbox.PendingWakeUps(r) == 0
	}, "listening, start-up drains done")

	for round := range 3 {
		from := int64(round*5 + 1)
		insertPaid(t, env.DB, from, from+4) // committed, unannounced
		r.Wake()
		waitFor(t, 5*time.Second, func() bool { return pending(t, env.DB) == 0 },
			"rows published on Wake, not an hour later")
	}
	assert.Equal(t, 15, gathered(relay, "idemshop_outbox_published_total"))
	assert.Zero(t, gathered(relay, "idemshop_outbox_notifications_total"), "nothing notified")
}

// A drain that found rows is followed at once by another: rows committed while a batch was being
// published, announced by nothing, are published without waiting for the poll (an hour away).
func TestRelayDrainsAgainAtOnceAfterABatchThatFoundRows(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := relayConfig(env.AMQPURL, topology(t, env))
	cfg.PollInterval = time.Hour
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
	waitFor(t, 10*time.Second, func() bool {
		return gathered(relay, "idemshop_outbox_listening") == 1 && polls(relay) >= 1 && outbox.PendingWakeUps(r) == 0
	}, "listening, start-up drains done")

	insertPaid(t, env.DB, 1, 1)
	r.Wake()
	select {
	case <-inBatch:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never started a batch with the row")
	}
	// The batch may have started from the listener's start-up wake-up, leaving this test's own
	// pending (a suite run under load, 2026-12-07): drop it, so that nothing announces the rows below.
	outbox.DropWakeUp(r)
	insertPaid(t, env.DB, 2, 4) // fewer than a batch (7): the held batch was not full either
	require.Zero(t, outbox.PendingWakeUps(r), "nothing woke the relay for these rows")
	close(release)
	waitFor(t, 5*time.Second, func() bool { return pending(t, env.DB) == 0 },
		"the rows committed during the batch wait for the poll, an hour away")
	assert.Equal(t, 4, gathered(relay, "idemshop_outbox_published_total"))
}

// With BatchWait set, the rows of the commits that follow a wake-up within the wait share its drain:
// one drain publishes the row that woke the relay and the two committed after the relay took that
// wake-up. Without the wait, the wake-up's drain starts at once and takes the first row alone.
func TestRelayBatchWaitGathersTheRowsCommittedAfterTheWakeUp(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := relayConfig(env.AMQPURL, topology(t, env))
	cfg.PollInterval = time.Hour
	cfg.BatchWait = 3 * time.Second // far longer than the insert below takes
	var r *outbox.Relay
	relay := runRelay(t, env, cfg, func(rel *outbox.Relay) {
		r = rel
		// No listen connection: its wake-up on connecting would start a wait of its own, and the
		// test's wake-up could land in that one instead.
		outbox.SetBeforeListen(rel, func() error { return errors.New("simulated: no listen connection") })
	})
	waitFor(t, 10*time.Second, func() bool { return polls(relay) >= 1 && outbox.PendingWakeUps(r) == 0 },
		"the start-up drain done")
	require.Zero(t, drainsWithRows(relay))

	insertPaid(t, env.DB, 1, 1)
	r.Wake()
	waitFor(t, 5*time.Second, func() bool { return outbox.PendingWakeUps(r) == 0 }, "the relay took the wake-up")
	insertPaid(t, env.DB, 2, 3)
	r.Wake() // as a writer does; it waits in the channel, and the drain takes it as it starts
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "all three rows published")
	assert.Equal(t, 3, gathered(relay, "idemshop_outbox_published_total"))
	// The drain is counted after it marked its rows: the rows can be seen published a moment before.
	waitCount(t, 5*time.Second, 1, func() int { return drainsWithRows(relay) }, "the three rows in one drain")
}

// drainsWithRows returns the relay's drains that found rows.
func drainsWithRows(g prometheus.Gatherer) int {
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "idemshop_outbox_polls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "rows" {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return -1
}
