package points

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"idemshop/internal/platform/rabbitmq"
)

// A message's last delivery. A quorum queue on RabbitMQ 3.x counts every return of a message toward
// x-delivery-limit, not only failures: a consumer that crashes, restarts or shuts down returns what it
// holds, and so does a nack. A good message the consumer held while the database could not take it (a
// locked ledger, retried in place), or while another consumer held its lease (set aside), was therefore
// dead-lettered after five restarts in that window, and its credit waited in the DLQ for a person (a
// helper's finding, 2026-12-06). RabbitMQ 4.3 and later leave such returns out of the count; 3.x is
// what compose and the tests run.
//
// So a message held at its last delivery (the one whose return dead-letters it) is republished: a copy
// goes straight to the consumer's queue (the default exchange, under the queue's name, mandatory: a
// copy no queue takes comes back), with the event's routing key in the header
// x-idemshop-routing-key, and only once the broker confirmed it is the delivery acked. The copy starts a
// new delivery count. Held means:
//   - the batch's messages, and every delivery waiting in the inbox behind it, once an attempt at the
//     database failed (retry: the batch may be stuck there for as long as the outage lasts);
//   - a message set aside because another consumer holds its lease (setAside). One that meets such a
//     lease during a shutdown fails at once and is not republished: at its last delivery the broker
//     dead-letters it (points.md lists it under what the republish does not cover).
//
// The consumer goes on with the delivery it has, if it has it in a batch; whichever of the two reaches
// the ledger second is a duplicate there (its unique biz_id). A message that does not decode is poison
// and never republished. One the ledger refuses (a conflicting credit, an unknown user) is poison too,
// but looks like any other until its statement runs: if its sixth delivery meets a failed attempt, it
// is republished with the rest and starts a new count.

// RoutingKeyHeader carries a republished copy's event routing key (order.paid or order.refunded): the
// copy comes through the default exchange under the queue's name.
const RoutingKeyHeader = "x-idemshop-routing-key"

// RepublishedHeader counts how many times a message was republished (an integer, absent: 0). A message
// republished MaxRepublish times is not republished again: without a bound, one whose lease another
// consumer kept taking again, or a poison one that only the ledger judges and whose sixth delivery kept
// meeting a failed attempt, went round the queue for ever instead of reaching the DLQ (a helper's
// finding, 2026-12-06).
const RepublishedHeader = "x-idemshop-republished"

// republishes returns d's RepublishedHeader.
func republishes(d amqp.Delivery) int64 { return rabbitmq.IntHeader(d.Headers, RepublishedHeader) }

// inbox holds the deliveries the client has handed over and the session has not taken yet. fill, a
// goroutine of the session, moves each one here as it arrives, so that the ones behind a batch stuck on
// the database are within reach of republishLast; read from the client directly, they stayed in its
// buffer, unacked, and a crash dead-lettered them at their last delivery (the helper's second finding).
// It holds at most the prefetch.
type inbox struct {
	mu     sync.Mutex
	ds     []amqp.Delivery
	closed bool
	// ready is signalled (capacity 1) when a delivery arrives and when the inbox closes.
	ready chan struct{}
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

// fill moves every delivery into the inbox until the client closes deliveries (the channel or the
// connection lost, or the subscription cancelled and its buffer handed over), then closes the inbox.
func (in *inbox) fill(deliveries <-chan amqp.Delivery) {
	for d := range deliveries {
		in.mu.Lock()
		in.ds = append(in.ds, d)
		in.mu.Unlock()
		in.signal()
	}
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	in.signal()
}

func (in *inbox) signal() {
	select {
	case in.ready <- struct{}{}:
	default:
	}
}

// take removes and returns up to n deliveries, oldest first; closed reports that the inbox is closed
// and now empty.
func (in *inbox) take(n int) (ds []amqp.Delivery, closed bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	k := min(n, len(in.ds))
	ds = slices.Clone(in.ds[:k])
	in.ds = in.ds[k:]
	return ds, in.closed && len(in.ds) == 0
}

func (in *inbox) len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.ds)
}

func (in *inbox) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}

// takeIf removes and returns the deliveries for which keep is true, in order.
func (in *inbox) takeIf(keep func(amqp.Delivery) bool) []amqp.Delivery {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out, rest []amqp.Delivery
	for _, d := range in.ds {
		if keep(d) {
			out = append(out, d)
		} else {
			rest = append(rest, d)
		}
	}
	in.ds = rest
	return out
}

// putBack returns ds to the inbox, each at its place in delivery order (by delivery tag). The inbox
// must stay in that order: settle's multiple-ack acknowledges every outstanding delivery up to a
// batch's highest tag, and that is right only while every lower tag is settled or set aside. Put back at
// the front, a later delivery whose republish failed went into the next batch ahead of earlier ones
// still waiting, and that batch's multiple-ack acked them unread; a crash then lost their credits (41
// of 141 in a helper's run, 2026-12-06).
func (in *inbox) putBack(ds []amqp.Delivery) {
	if len(ds) == 0 {
		return
	}
	ds = slices.Clone(ds)
	slices.SortFunc(ds, func(a, b amqp.Delivery) int { return cmp.Compare(a.DeliveryTag, b.DeliveryTag) })
	in.mu.Lock()
	merged := make([]amqp.Delivery, 0, len(in.ds)+len(ds))
	i, j := 0, 0
	for i < len(in.ds) || j < len(ds) {
		if j == len(ds) || i < len(in.ds) && in.ds[i].DeliveryTag < ds[j].DeliveryTag {
			merged = append(merged, in.ds[i])
			i++
		} else {
			merged = append(merged, ds[j])
			j++
		}
	}
	in.ds = merged
	in.mu.Unlock()
	in.signal()
}

// republisher is one session's publishing side: a channel of its own in confirm mode, so that a
// failed publish (a closed channel) never closes the consuming channel and its unacked deliveries.
type republisher struct {
	conn    *amqp.Connection
	consume *amqp.Channel // the deliveries' channel: the original is acked there
	// publish is opened again (open) when the broker has closed it: a channel error ends a channel, not
	// its connection, and the session would otherwise have gone on without republishing (every copy
	// refused by the closed channel, each held message dead-lettered at its return).
	publish *amqp.Channel
	returns <-chan amqp.Return
	inbox   *inbox
	// batch is the batch being worked on (process), nil between batches: a failed attempt at the
	// database republishes its messages at their last delivery.
	batch []*message
}

// newRepublisher opens the publishing channel on conn for deliveries of consume, which fill in.
func newRepublisher(conn *amqp.Connection, consume *amqp.Channel, in *inbox) (*republisher, error) {
	r := &republisher{conn: conn, consume: consume, inbox: in}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// open opens the publishing channel in confirm mode, with a listener for returns.
func (r *republisher) open() error {
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("open republish channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("enable publisher confirms: %w", err)
	}
	// One message is published at a time, and the returns are drained before each: one slot.
	r.publish, r.returns = ch, ch.NotifyReturn(make(chan amqp.Return, 1))
	return nil
}

// lastDelivery reports whether d's return would dead-letter it: its x-delivery-count has reached the
// limit (RabbitMQ 3.x semantics, as in settle).
func (c *Consumer) lastDelivery(d amqp.Delivery) bool {
	return rabbitmq.DeliveryCount(d) >= int64(c.cfg.Topology.DeliveryLimit)
}

// mayRepublish reports whether d is at its last delivery and may be republished once more.
func (c *Consumer) mayRepublish(d amqp.Delivery) bool {
	return c.lastDelivery(d) && republishes(d) < int64(c.cfg.MaxRepublish)
}

// republishHeld republishes what a batch stuck on the database holds at its last delivery: the batch's
// messages and the deliveries waiting in the inbox behind it. Called after each failed attempt (the
// inbox fills while the batch waits).
func (c *Consumer) republishHeld() {
	r := c.republisher
	if r == nil {
		return
	}
	c.republishLast(r.batch)
	waiting := r.inbox.takeIf(c.mayRepublish)
	var keep []amqp.Delivery
	for _, d := range waiting {
		m := &message{d: d}
		if m.decode() != nil || !c.republishOne(m) {
			keep = append(keep, d) // poison goes on to the DLQ; a failed republish is as before
		}
	}
	r.inbox.putBack(keep)
}

// republishLast republishes each of ms and their copies (dups) that is at its last delivery, decoded,
// and not republished yet; each one done is marked republished, so that settle leaves it alone.
func (c *Consumer) republishLast(ms []*message) {
	if c.republisher == nil {
		return
	}
	for _, m := range ms {
		for _, x := range append([]*message{m}, m.dups...) {
			if !x.republished && x.kind != "" && c.mayRepublish(x.d) {
				x.republished = c.republishOne(x)
			}
		}
	}
}

// republishOne republishes m and acks its delivery, and reports whether it did. A failure is logged:
// the message is no worse off than without this (its return dead-letters it).
func (c *Consumer) republishOne(m *message) bool {
	if err := c.republish(m); err != nil {
		c.logger.Warn("points message at its last delivery not republished; a return now dead-letters it",
			append(m.logAttrs(), "err", err)...)
		return false
	}
	c.republishedTotal.Inc()
	c.logger.Info("points message republished at its last delivery: the copy starts a new delivery count",
		append(m.logAttrs(), "delivery_count", rabbitmq.DeliveryCount(m.d))...)
	return true
}

// errReturned is a copy the broker routed nowhere: the queue is gone.
var errReturned = errors.New("returned by the broker: the queue is gone")

// republish publishes a copy of m (its body, message id and content type, persistent, its routing key
// in RoutingKeyHeader) to the consumer's queue and waits for the broker's confirm, at most
// AttemptTimeout; then it acks m's delivery. An ack that fails (the channel is gone) leaves the
// original to the broker, which dead-letters it: the DLQ then holds a message whose copy is in the
// queue, a duplicate if it is ever moved back.
func (c *Consumer) republish(m *message) error {
	r := c.republisher
	if r.publish.IsClosed() {
		if err := r.open(); err != nil {
			return err
		}
	}
	for range len(r.returns) { // a return of an earlier copy whose confirm was not waited for
		<-r.returns
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.AttemptTimeout)
	defer cancel()
	dc, err := r.publish.PublishWithDeferredConfirmWithContext(ctx, "", c.cfg.Topology.Queue,
		true, // mandatory: a copy no queue takes comes back, and the original is kept
		false,
		amqp.Publishing{
			Headers:      amqp.Table{RoutingKeyHeader: m.kind, RepublishedHeader: republishes(m.d) + 1},
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
