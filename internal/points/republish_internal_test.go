package points

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
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
