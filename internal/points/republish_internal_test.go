package points

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/testenv"
)

// The inbox stays in delivery order when deliveries whose republish failed are put back: settle's
// multiple-ack acknowledges every outstanding delivery up to a batch's highest tag. Put back at the
// front, a later delivery went into the next batch ahead of earlier ones still waiting, and that batch's
// multiple-ack acked them unread: a crash then lost their credits (a helper's finding, 2026-12-06).
func TestAnInboxPutBackKeepsDeliveryOrder(t *testing.T) {
	in := newInbox()
	for _, tag := range []uint64{3, 4, 6, 9} {
		in.ds = append(in.ds, amqp.Delivery{DeliveryTag: tag})
	}
	in.putBack([]amqp.Delivery{{DeliveryTag: 5}, {DeliveryTag: 10}, {DeliveryTag: 1}})
	in.putBack(nil)

	var tags []uint64
	for {
		ds, _ := in.take(2)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			tags = append(tags, d.DeliveryTag)
		}
	}
	assert.Equal(t, []uint64{1, 3, 4, 5, 6, 9, 10}, tags, "what was there and what came back, in delivery order")
}

// The broker ends a channel, not its connection, on a channel error. The session's publishing channel,
// once closed so, refused every copy for the rest of the session, and each message held at its last
// delivery was dead-lettered at its return (carried from a helper's finding, 2026-12-06). It is
// opened again before the next copy.
func TestARepublishAfterTheBrokerClosedThePublishingChannel(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	queue := env.Queue("points")
	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	consume, err := conn.Channel()
	require.NoError(t, err)
	_, err = consume.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, consume.PublishWithContext(t.Context(), "", queue, false, false,
		amqp.Publishing{MessageId: "m1", ContentType: "application/json", Body: []byte(`{"event_id":"e1"}`)}))
	deliveries, err := consume.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)
	original := nextDelivery(t, deliveries)

	r, err := newRepublisher(conn, consume, newInbox())
	require.NoError(t, err)
	// A channel that asks for an exchange the broker does not have is closed by it (404).
	require.Error(t, r.publish.ExchangeDeclarePassive(env.Prefix+"missing", "topic", false, false, false, false, nil))
	require.Eventually(t, r.publish.IsClosed, 5*time.Second, 10*time.Millisecond, "the broker closed the publishing channel")

	c := &Consumer{
		cfg:         ConsumerConfig{Topology: rabbitmq.Topology{Queue: queue}, AttemptTimeout: 5 * time.Second},
		republisher: r,
	}
	require.NoError(t, c.republish(&message{d: original, kind: "order.paid"}))

	cp := nextDelivery(t, deliveries)
	assert.Equal(t, original.Body, cp.Body, "the copy")
	assert.Equal(t, int64(1), republishes(cp), "counted as republished once")
	assert.Equal(t, "order.paid", cp.Headers[RoutingKeyHeader])
	require.NoError(t, consume.Close()) // the copy, unacked, goes back; the original was acked
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, q.Messages, "the copy alone: the original was acked")
}

func nextDelivery(t *testing.T, ds <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case d, ok := <-ds:
		require.True(t, ok, "the deliveries channel closed")
		return d
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no delivery within 10 s")
		return amqp.Delivery{}
	}
}
