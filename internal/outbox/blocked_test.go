package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/events"
	"idemshop/internal/outbox"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/node"
)

// A RabbitMQ resource alarm (memory or disk) blocks every publishing connection of its node until it
// clears (connection.blocked): the broker reads nothing more from them. The alarm is node-wide, so the
// test runs a node of its own (the shared broker's other users must not be blocked), and its subtests
// run one after the other on it.
func TestARelayBlockedByABrokerAlarm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a RabbitMQ node of its own")
	}
	t.Parallel()
	rabbit := node.StartRabbit(t)
	t.Run("WaitsOnItsConnectionForTheClear", func(t *testing.T) { waitsOnItsConnectionForTheClear(t, rabbit) })
	t.Run("StopsABatchBiggerThanTheSocketBuffers", func(t *testing.T) { stopsABatchBiggerThanTheSocketBuffers(t, rabbit) })
}

// The relay waits on its one connection, its health and gauge name the block, and its rows stay
// pending with at most the one attempt of the batch in flight when the block began. After the clear
// every row reaches the queue (that batch's rows possibly twice) without a reconnect. Guards the
// mutants relay-blocked-wait and relay-blocked-keep.
func waitsOnItsConnectionForTheClear(t *testing.T, rabbit *node.Rabbit) {
	env := testenv.New(t)
	top := topology(t, env)
	cfg := relayConfig(rabbit.URL(), top)
	cfg.ConfirmTimeout = 300 * time.Millisecond
	var relay *outbox.Relay
	reg := runRelay(t, env, cfg, func(r *outbox.Relay) { relay = r })
	stopNodeIfFailed(t, rabbit)
	ctx := context.Background()

	insertPaid(t, env.DB, 1, 3)
	waitFor(t, 20*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published before the alarm")

	require.NoError(t, rabbit.MemoryAlarm(context.Background(), true))
	insertPaid(t, env.DB, 4, 10) // one batch (BatchSize 7), published into the block
	waitFor(t, 20*time.Second, func() bool { return gathered(reg, "idemshop_outbox_broker_blocked") == 1 },
		"the gauge says the relay is blocked")
	require.ErrorContains(t, relay.Health(), "blocked by the broker")

	// Long enough for a relay that dialed again after each unconfirmed batch to do so several times
	// (ConfirmTimeout plus at most ReconnectMax a round).
	time.Sleep(4 * (cfg.ConfirmTimeout + cfg.ReconnectMax))
	assert.EqualValues(t, 7, pending(t, env.DB))
	assert.LessOrEqual(t, maxAttempts(t, env), 1, "no batch was sent again while blocked")
	conns, err := rabbit.Ctl(ctx, "list_connections", "--no-table-headers", "-q", "name")
	require.NoError(t, err)
	assert.Len(t, strings.Fields(strings.ReplaceAll(conns, "->", "")), 2,
		"one connection on the node, the relay's (its name is two addresses): %q", conns)

	require.NoError(t, rabbit.MemoryAlarm(context.Background(), false))
	waitFor(t, 20*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published after the clear")
	waitFor(t, 5*time.Second, func() bool { return relay.Health() == nil }, "healthy after the clear")
	assert.Equal(t, 0, gathered(reg, "idemshop_outbox_broker_blocked"))
	assert.LessOrEqual(t, maxAttempts(t, env), 2)

	// Every event reached the queue; the blocked batch's rows at most twice.
	var want []string
	require.NoError(t, env.DB.Raw(`SELECT event_id::text FROM outbox ORDER BY id`).Scan(&want).Error)
	got := map[string]int{}
	conn, err := amqp.Dial(rabbit.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		m, ok, err := ch.Get(top.Queue, true)
		require.NoError(t, err)
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		got[m.MessageId]++
	}
	require.Len(t, got, len(want), "every event in the queue")
	for _, id := range want {
		assert.Contains(t, []int{1, 2}, got[id], "event %s", id)
	}
}

// A batch bigger than the socket buffers between the relay and the broker: once the broker blocks the
// connection, a write that fills them waits for the clear, past the confirm timeout, with the batch's
// transaction open. The relay stops the batch's publishes when the block is known, so the batch ends
// at its confirm timeout like any other: every row gets its attempt and the transaction closes while
// the alarm goes on. Guards the mutant relay-blocked-batch.
func stopsABatchBiggerThanTheSocketBuffers(t *testing.T, rabbit *node.Rabbit) {
	const rows = 10_000 // of about 1.1 kB each on the wire: 11 MB, past this machine's 4-6 MB of buffers
	env := testenv.New(t)
	top := topology(t, env)
	cfg := relayConfig(rabbit.URL(), top)
	cfg.BatchSize = rows
	cfg.ConfirmTimeout = 500 * time.Millisecond
	var relay *outbox.Relay
	reg := runRelay(t, env, cfg, func(r *outbox.Relay) { relay = r })
	stopNodeIfFailed(t, rabbit)
	waitFor(t, 20*time.Second, func() bool { return relay.Health() == nil }, "the relay connected and drained")

	require.NoError(t, rabbit.MemoryAlarm(context.Background(), true))
	require.NoError(t, env.DB.Exec(`INSERT INTO outbox (event_id, routing_key, payload)
		SELECT gen_random_uuid(), ?, jsonb_build_object('order_id', g, 'pad', repeat('x', 1000))
		FROM generate_series(1, ?) g`, events.RoutingKeyOrderPaid, rows).Error)
	waitFor(t, 15*time.Second, func() bool { return attemptless(t, env) == 0 },
		"every row of the batch got its attempt while the alarm goes on")
	assert.EqualValues(t, rows, pending(t, env.DB))
	assert.Equal(t, 1, gathered(reg, "idemshop_outbox_broker_blocked"))
	waitFor(t, 10*time.Second, func() bool { return idleInTransaction(t, env) == 0 }, "no transaction left open")

	require.NoError(t, rabbit.MemoryAlarm(context.Background(), false))
	waitFor(t, 60*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published after the clear")
}

// stopNodeIfFailed kills the node, when t has failed, before the relay's cleanup waits for the relay
// (cleanups run last-in first-out: call it after the relay is started). A relay stuck writing into a
// blocked socket whose buffers are full is freed, and the test fails instead of hanging.
func stopNodeIfFailed(t *testing.T, rabbit *node.Rabbit) {
	t.Cleanup(func() {
		if t.Failed() {
			rabbit.Kill()
		}
	})
}

func attemptless(t *testing.T, env *testenv.Env) int64 {
	t.Helper()
	var n int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM outbox WHERE attempts = 0`).Scan(&n).Error)
	return n
}

func idleInTransaction(t *testing.T, env *testenv.Env) int64 {
	t.Helper()
	var n int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&n).Error)
	return n
}

func maxAttempts(t *testing.T, env *testenv.Env) int {
	t.Helper()
	var n int
	require.NoError(t, env.DB.Raw(`SELECT coalesce(max(attempts), 0) FROM outbox WHERE id > 3`).Scan(&n).Error)
	return n
}
