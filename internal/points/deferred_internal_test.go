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
)

// Messages set aside that come due together are claimed again one batch at a time, and each delivery
// is acked once. Order 1's message (tag 1) waits with a copy that joined it later (tag 3); order 2's
// (tag 2) waits beside it. Taken out of held together, the first batch (tags 1 and 3) multiple-acked
// tag 3, which acked tag 2 unread; the second batch acked tag 2 again, and the broker closed the
// channel on the unknown delivery tag (CI, 2026-12-07: two consumers racing on copies counted 402 of
// 400 deliveries, the ones handled on the closing channel coming back). The deliveries are real, from
// a classic queue; the leases and the ledger are the test's Redis and database.
func TestDueMessagesAreRetriedOneBatchAtATimeAndAckedOnce(t *testing.T) {
	t.Parallel()
	env, queue, conn, ch := classicQueue(t)
	first, second := events.OrderPaid{EventID: "evt-order-1", OrderID: 1, UserID: 1, AmountCents: 1000,
		Points: events.PointsFor(1000), OccurredAt: time.Now().UTC()},
		events.OrderPaid{EventID: "evt-order-2", OrderID: 2, UserID: 2, AmountCents: 2000,
			Points: events.PointsFor(2000), OccurredAt: time.Now().UTC()}
	for _, ev := range []events.OrderPaid{first, second, first} { // tags 1, 2, 3: order 1, order 2, order 1 again
		body, err := json.Marshal(ev)
		require.NoError(t, err)
		require.NoError(t, ch.PublishWithContext(t.Context(), "", queue, false, false, amqp.Publishing{
			MessageId: ev.EventID, ContentType: "application/json", Body: body,
			Headers: amqp.Table{RoutingKeyHeader: events.RoutingKeyOrderPaid}}))
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	c, err := NewConsumer(env.DB, env.Redis, ConsumerConfig{
		AMQPURL: env.AMQPURL, KeyPrefix: env.Prefix, Prefetch: 10, BatchSize: 1,
		Topology: rabbitmq.Topology{Exchange: "x", RoutingKey: events.RoutingKeyOrderPaid, Queue: queue,
			DeadLetterExchange: "dlx", DeadLetterQueue: "dlq", DeliveryLimit: events.DeliveryLimit},
		LeaseTTL: time.Minute, DoneTTL: time.Hour, LeasePoll: time.Minute,
		ReconnectMin: time.Second, ReconnectMax: time.Second,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	require.NoError(t, err)

	held := &deferredSet{}
	for range 3 { // each in a batch of its own, whose claim met another consumer's lease
		m := &message{d: nextDelivery(t, deliveries)}
		require.NoError(t, m.decode())
		c.setAside(t.Context(), held, []*message{m})
	}
	var waiting []uint64
	held.all(func(m *message) {
		m.retryAt = time.Time{} // due now: the other consumer's leases ran out
		waiting = append(waiting, m.d.DeliveryTag)
	})
	require.ElementsMatch(t, []uint64{1, 2}, waiting, "order 1's copy joined order 1's message")

	c.retryHeld(t.Context(), t.Context(), ch, held)

	// A call on the channel answers after the broker has read every ack before it: an ack of an
	// unknown tag closed the channel, and this fails.
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err, "the channel is still open: no delivery was acked twice")
	assert.Zero(t, q.Messages)
	assert.Equal(t, map[string]float64{OutcomeApplied: 2, OutcomeDuplicate: 1, OutcomeFailed: 0, OutcomeDeadLettered: 0},
		outcomes(t, reg), "each delivery counted once, order 1's copy a duplicate")
	require.NoError(t, ch.Close()) // anything still unacked goes back to the queue
	other, err := conn.Channel()
	require.NoError(t, err)
	q, err = other.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err)
	assert.Zero(t, q.Messages, "every delivery was acked")
	var rows, sum int64
	require.NoError(t, env.DB.Raw(`SELECT count(*), coalesce(sum(delta), 0) FROM points_ledger`).Row().Scan(&rows, &sum))
	assert.Equal(t, [2]int64{2, 30}, [2]int64{rows, sum}, "each order credited once")
}

// outcomes reads idemshop_points_messages_total from reg, by outcome.
func outcomes(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "idemshop_points_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
