package points

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/events"
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
	env, queue, conn, consume := classicQueue(t)
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

// A message newly set aside at its last delivery is republished with its copies from its batch before
// it joins the message of its order already waiting (deferredSet.add hands its copies over). The other
// way round, the copies went to the waiting message unrepublished: a crash then dead-lettered them
// beside the credited event (read, not proven, since 2026-12-06; the stop-52 carried gap). The
// deliveries are real, from a classic queue; their x-delivery-count is set here, as a quorum queue
// sets it at a redelivery, so that each is at its last delivery.
func TestCopiesThatJoinASetAsideMessageAreRepublishedFirst(t *testing.T) {
	t.Parallel()
	_, queue, conn, consume := classicQueue(t)
	body, err := json.Marshal(events.OrderPaid{EventID: "evt-1", OrderID: 1, UserID: 1, AmountCents: 100,
		Points: events.PointsFor(100), OccurredAt: time.Now().UTC()})
	require.NoError(t, err)
	for range 3 { // one event, three deliveries of it
		require.NoError(t, consume.PublishWithContext(t.Context(), "", queue, false, false, amqp.Publishing{
			MessageId: "evt-1", ContentType: "application/json", Body: body,
			Headers: amqp.Table{RoutingKeyHeader: events.RoutingKeyOrderPaid}}))
	}
	deliveries, err := consume.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)
	var ms []*message
	for range 3 {
		d := nextDelivery(t, deliveries)
		d.Redelivered, d.Headers["x-delivery-count"] = true, int64(events.DeliveryLimit)
		m := &message{d: d}
		require.NoError(t, m.decode())
		ms = append(ms, m)
	}
	waiting, joining, itsCopy := ms[0], ms[1], ms[2]
	joining.follow(itsCopy) // one batch: the second delivery and its copy

	r, err := newRepublisher(conn, consume, newInbox())
	require.NoError(t, err)
	c := &Consumer{
		cfg: ConsumerConfig{Topology: rabbitmq.Topology{Queue: queue, DeliveryLimit: events.DeliveryLimit},
			LeaseTTL: time.Minute, LeasePoll: time.Second, AttemptTimeout: 5 * time.Second, MaxRepublish: DefaultMaxRepublish},
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)), republisher: r,
		republishedTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "republished"}),
	}
	held := &deferredSet{}
	c.setAside(t.Context(), held, []*message{waiting}) // an earlier batch: another consumer holds the lease
	c.setAside(t.Context(), held, []*message{joining})

	require.Equal(t, []*message{joining, itsCopy}, waiting.dups, "the batch joined the message already waiting")
	assert.True(t, waiting.republished && joining.republished && itsCopy.republished,
		"each republished: %v %v %v", waiting.republished, joining.republished, itsCopy.republished)
	for range 3 {
		cp := nextDelivery(t, deliveries)
		assert.Equal(t, body, cp.Body)
		assert.Equal(t, int64(1), republishes(cp), "a copy, republished once")
	}
}

// classicQueue declares a classic queue of the test's own on a connection of its own, and returns the
// connection and the channel that declared it.
func classicQueue(t *testing.T) (*testenv.Env, string, *amqp.Connection, *amqp.Channel) {
	t.Helper()
	env := testenv.New(t)
	queue := env.Queue("points")
	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	consume, err := conn.Channel()
	require.NoError(t, err)
	_, err = consume.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	return env, queue, conn, consume
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
