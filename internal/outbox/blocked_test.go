package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/outbox"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/node"
)

// A RabbitMQ resource alarm (memory or disk) blocks every publishing connection of its node until it
// clears (connection.blocked): the broker reads nothing more from them. The relay waits on its one
// connection, its health and gauge name the block, and its rows stay pending with at most the one
// attempt of the batch in flight when the block began. After the clear every row reaches the queue
// (that batch's rows possibly twice) without a reconnect. The alarm is node-wide, so the test runs a
// node of its own: the shared broker's other users must not be blocked. Guards the mutants
// relay-blocked-wait and relay-blocked-keep.
func TestARelayBlockedByABrokerAlarmWaitsOnItsConnectionForTheClear(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a RabbitMQ node of its own")
	}
	t.Parallel()
	env := testenv.New(t)
	rabbit := node.StartRabbit(t)
	top := topology(t, env)
	cfg := relayConfig(rabbit.URL(), top)
	cfg.ConfirmTimeout = 300 * time.Millisecond
	var relay *outbox.Relay
	reg := runRelay(t, env, cfg, func(r *outbox.Relay) { relay = r })
	// Cleanups run last-in first-out: the node stops before the relay's cleanup waits for the relay, so
	// a relay stuck writing into a blocked socket whose buffers are full (one that kept publishing into
	// the block) is freed and the test fails instead of hanging.
	t.Cleanup(func() { _ = rabbit.Stop() })
	ctx := context.Background()

	insertPaid(t, env.DB, 1, 3)
	waitFor(t, 20*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published before the alarm")

	_, err := rabbit.Ctl(ctx, "eval", "rabbit_alarm:set_alarm({{resource_limit, memory, node()}, []}).")
	require.NoError(t, err)
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

	_, err = rabbit.Ctl(ctx, "eval", "rabbit_alarm:clear_alarm({resource_limit, memory, node()}).")
	require.NoError(t, err)
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

func maxAttempts(t *testing.T, env *testenv.Env) int {
	t.Helper()
	var n int
	require.NoError(t, env.DB.Raw(`SELECT coalesce(max(attempts), 0) FROM outbox WHERE id > 3`).Scan(&n).Error)
	return n
}
