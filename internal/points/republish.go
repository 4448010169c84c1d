package points

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"idemshop/internal/platform/rabbitmq"
)

// A message's last delivery. A quorum queue on RabbitMQ 3.x counts every return of a message toward
// x-delivery-limit, not only failures: a consumer that crashes, restarts or shuts down returns what it
// holds. A good message the consumer holds while the database cannot take it (a locked ledger, retried
// in place) or while another consumer holds its lease (set aside) was therefore dead-lettered after
// five restarts in that window, and its credit waited in the DLQ for a person (a helper's finding,
// 2026-12-06). RabbitMQ 4.3 and later leave such returns out of the count; 3.x is what compose and
// the tests run.
//
// So a message that is about to be held at its last delivery (the one whose return dead-letters it)
// is republished first: a copy goes to the events exchange under the event's routing key (mandatory,
// with a publisher confirm), and only once the broker confirmed it is the delivery acked. The copy
// starts a new delivery count. The consumer goes on with the delivery it has; whichever of the two
// reaches the ledger second is a duplicate there (its unique biz_id). Only a message that fails for a
// reason outside itself is republished: a poison one is never held, and goes to the DLQ as before.

// republisher is one session's publishing side: a channel of its own in confirm mode, so that a
// failed publish (a closed channel) never closes the consuming channel and its unacked deliveries.
type republisher struct {
	consume *amqp.Channel // the deliveries' channel: the original is acked there
	publish *amqp.Channel
	returns <-chan amqp.Return
}

// newRepublisher opens the publishing channel on conn for deliveries of consume.
func newRepublisher(conn *amqp.Connection, consume *amqp.Channel) (*republisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open republish channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	// One message is published at a time and its return, if any, is read before the next: one slot.
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	return &republisher{consume: consume, publish: ch, returns: returns}, nil
}

// lastDelivery reports whether m's return would dead-letter it: its x-delivery-count has reached the
// limit (RabbitMQ 3.x semantics, as in settle).
func (c *Consumer) lastDelivery(m *message) bool {
	return rabbitmq.DeliveryCount(m.d) >= int64(c.cfg.Topology.DeliveryLimit)
}

// republishLast republishes each of ms and their copies (dups) that is at its last delivery and was not
// republished yet, one at a time, and acks its delivery; each one done is marked republished, so that
// settle leaves it alone. One that could not be republished stays as it was: its return dead-letters
// it, as before. Errors are logged, never returned: the message is no worse off than without this.
func (c *Consumer) republishLast(ms []*message) {
	if c.republisher == nil {
		return
	}
	for _, m := range ms {
		for _, x := range append([]*message{m}, m.dups...) {
			if x.republished || x.kind == "" || !c.lastDelivery(x) {
				continue
			}
			if err := c.republish(x); err != nil {
				c.logger.Warn("points message at its last delivery not republished; a return now dead-letters it",
					append(x.logAttrs(), "err", err)...)
				continue
			}
			x.republished = true
			c.republishedTotal.Inc()
			c.logger.Info("points message republished at its last delivery: the copy starts a new delivery count",
				append(x.logAttrs(), "delivery_count", rabbitmq.DeliveryCount(x.d))...)
		}
	}
}

// errReturned is a copy the broker routed nowhere (no queue bound for its routing key).
var errReturned = errors.New("returned by the broker: no queue is bound for its routing key")

// republish publishes a copy of m (its body and message id, persistent) to the events exchange under
// m.kind and waits for the broker's confirm, at most AttemptTimeout; then it acks m's delivery. An ack
// that fails (the channel is gone) leaves the original to the broker, which dead-letters it: the DLQ
// then holds a message whose copy is in the queue, a duplicate if it is ever moved back.
func (c *Consumer) republish(m *message) error {
	r := c.republisher
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.AttemptTimeout)
	defer cancel()
	dc, err := r.publish.PublishWithDeferredConfirmWithContext(ctx, c.cfg.Topology.Exchange, m.kind,
		true, // mandatory: a copy no queue takes comes back, and the original is kept
		false,
		amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			MessageId:    m.d.MessageId,
			ContentType:  m.d.ContentType,
			Timestamp:    m.d.Timestamp,
			Body:         m.d.Body,
		})
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("wait for the confirm: %w", err)
	case !acked:
		return errors.New("not confirmed by the broker (nack or channel closed)")
	}
	// The client hands a basic.return to the listener before the basic.ack that follows it.
	select {
	case ret := <-r.returns:
		return fmt.Errorf("%w (%d %s)", errReturned, ret.ReplyCode, ret.ReplyText)
	default:
	}
	if err := r.consume.Ack(m.d.DeliveryTag, false); err != nil {
		return fmt.Errorf("republished, but the delivery was not acked (the broker dead-letters it; its copy is in the queue): %w", err)
	}
	return nil
}
