package ordersapp_test

// The shop's outbox writers wake the relay of their process after their commit: their events are
// published at once, not at the relay's next poll. The poll interval here is an hour, so every row
// published within the deadline was published because its writer woke the relay.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/callback"
	"idemshop/internal/events"
	"idemshop/internal/ordersapp"
	"idemshop/internal/platform/config"
	"idemshop/internal/testenv"
)

// relayOnlyWoken is a replica config whose relay never polls within a test (OUTBOX_POLL_INTERVAL=1h),
// on exchanges and queues of the test's own.
func relayOnlyWoken(env *testenv.Env) func(*config.Orders) {
	for _, name := range []string{events.Exchange, events.QueueOrderPaid, events.DeadLetterExchange,
		events.QueueOrderPaidDLQ} {
		env.Queue(name) // deleted when the test ends
	}
	return func(c *config.Orders) {
		c.NamePrefix = env.Prefix
		c.OutboxPollInterval = time.Hour
		c.Reconnect.Min, c.Reconnect.Max = 20*time.Millisecond, 200*time.Millisecond
	}
}

// runRelay runs rp's relay until the test ends, and waits until it listens and has made its first
// drain: from then on, only a wake-up makes it drain again within the hour.
func runRelay(t *testing.T, rp *replica) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = rp.app.Relay.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	require.Eventually(t, func() bool {
		return metricValue(t, rp.reg, "idemshop_outbox_listening", nil) == 1 &&
			metricValue(t, rp.reg, "idemshop_outbox_polls_total", nil) >= 1
	}, 10*time.Second, 10*time.Millisecond, "relay connected, listening, first drain done")
}

func unpublished(t testing.TB, env *testenv.Env) int64 {
	return count(t, env.DB, "outbox", "published_at IS NULL")
}

// amqpChannel opens a channel on the test's broker, closed when the test ends.
func amqpChannel(t *testing.T, env *testenv.Env) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// An applied callback inserts the order's event and wakes the relay after its commit: the event is
// published long before the relay's poll.
func TestAppliedCallbackWakesTheRelayAfterItsCommit(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, queued)
	rp := newReplica(t, env, replicaOpts{cfg: relayOnlyWoken(env)})
	runRelay(t, rp)

	id, amount := rp.newOrder(alice, 1, 1)
	assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-wake-1"))})
	require.EqualValues(t, 1, outboxRows(t, env.DB, id))
	require.Eventually(t, func() bool { return unpublished(t, env) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the order.paid event waits for the relay's poll (an hour): the callback did not wake it")
	assert.Equal(t, 1.0, metricValue(t, rp.reg, "idemshop_outbox_published_total", nil))
}

// The lab's outbox route (what `loadtest bench` measures the lag through) writes like the callbacks:
// insert in a transaction, wake the relay after the commit. It takes bench routing keys only.
func TestLabOutboxRouteWritesAndWakesTheRelay(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	opts := relayOnlyWoken(env)
	rp := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) { opts(c); labMode(c) }})
	runRelay(t, rp)

	bad := rp.call(http.MethodPost, ordersapp.LabOutboxPath, alice, "", []byte(`{"routing_key":"order.paid","seq":1}`))
	assert.Equal(t, http.StatusBadRequest, bad.Status, "%s", bad.Body)
	assert.Zero(t, count(t, env.DB, "outbox"), "no row for a refused routing key")

	// A queue bound to the bench routing key, or the broker would return the message as unroutable.
	key := "bench.wake-test"
	ch := amqpChannel(t, env)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, key, env.Prefix+events.Exchange, false, nil))

	for i := range 3 {
		r := rp.call(http.MethodPost, ordersapp.LabOutboxPath, alice, "", fmt.Appendf(nil, `{"routing_key":%q,"seq":%d}`, key, i))
		require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	}
	assert.EqualValues(t, 3, count(t, env.DB, "outbox", "routing_key = ? AND (payload->>'user_id')::bigint = ?", key, aliceID))
	require.Eventually(t, func() bool { return unpublished(t, env) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the rows wait for the relay's poll (an hour): the route did not wake it")
}
