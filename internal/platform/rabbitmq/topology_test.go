package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/events"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/testenv"
)

// The production topology binds points.order-paid to order.paid and order.refunded, under any prefix;
// other routing keys do not reach the queue. Declaring twice (the relay and the consumer both do)
// changes nothing.
func TestDeclareBindsEveryRoutingKey(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := rabbitmq.OrderPaidTopology().WithPrefix(env.Prefix)
	require.Equal(t, []string{events.RoutingKeyOrderPaid, events.RoutingKeyRefunded}, top.RoutingKeys(),
		"the prefix is on the names, never on the routing keys")
	env.Queue(events.QueueOrderPaid) // testenv deletes the queues at the end
	env.Queue(events.QueueOrderPaidDLQ)
	env.Queue(events.Exchange)
	env.Queue(events.DeadLetterExchange)

	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, rabbitmq.Declare(ch, top))
	require.NoError(t, rabbitmq.Declare(ch, top), "declaring again is a no-op")

	require.NoError(t, ch.Confirm(false))
	for _, key := range []string{events.RoutingKeyOrderPaid, events.RoutingKeyRefunded, "order.shipped"} {
		dc, err := ch.PublishWithDeferredConfirm(top.Exchange, key, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(key)})
		require.NoError(t, err)
		ok, err := dc.WaitContext(context.Background())
		require.NoError(t, err)
		require.True(t, ok, "confirmed %s", key)
	}
	require.Eventually(t, func() bool {
		n, err := rabbitmq.ReadyMessages(conn, top.Queue)
		return err == nil && n == 2
	}, 10*time.Second, 20*time.Millisecond, "order.paid and order.refunded reach the queue")

	var got []string
	for range 2 {
		d, ok, err := ch.Get(top.Queue, true)
		require.NoError(t, err)
		require.True(t, ok)
		got = append(got, d.RoutingKey)
	}
	assert.ElementsMatch(t, []string{events.RoutingKeyOrderPaid, events.RoutingKeyRefunded}, got,
		"the delivery carries the routing key the consumer dispatches on")
	n, err := rabbitmq.ReadyMessages(conn, top.Queue)
	require.NoError(t, err)
	assert.Zero(t, n, "order.shipped has no binding")
}

func TestValidateRefusesEmptyExtraRoutingKey(t *testing.T) {
	t.Parallel()
	top := rabbitmq.OrderPaidTopology()
	require.NoError(t, top.Validate())
	top.ExtraRoutingKeys = []string{""}
	assert.Error(t, top.Validate())
}
