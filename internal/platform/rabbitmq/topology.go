package rabbitmq

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"idemshop/internal/events"
)

// Topology names the broker objects one event stream travels through. Production uses
// OrderPaidTopology; tests pass per-test names so that parallel tests share no broker state.
type Topology struct {
	Exchange   string // durable topic exchange the producer publishes to
	RoutingKey string // binding key of Queue on Exchange (and the key tests publish order.paid with)
	// ExtraRoutingKeys are further binding keys of the same Queue on the same Exchange: one consumer
	// reads several event types from one queue and tells them apart by the delivery's routing key.
	ExtraRoutingKeys []string
	Queue            string // quorum queue the consumer reads
	// DeadLetterExchange receives what Queue gives up on (delivery limit reached); it routes with
	// the key DeadLetterQueue into DeadLetterQueue.
	DeadLetterExchange string
	DeadLetterQueue    string
	// DeliveryLimit is the quorum queue's x-delivery-limit: after the first delivery plus this many
	// redeliveries (RabbitMQ 3.x counts each return in the x-delivery-count header), a message that is
	// returned again is dead-lettered instead of requeued.
	DeliveryLimit int
}

// OrderPaidTopology is the production topology of points-consumer's queue (docs/design.md, "Events"): the
// queue points.order-paid receives order.paid and, through a second binding, order.refunded. The
// names stay those of order.paid, so an existing queue keeps its messages.
func OrderPaidTopology() Topology {
	return Topology{
		Exchange:           events.Exchange,
		RoutingKey:         events.RoutingKeyOrderPaid,
		ExtraRoutingKeys:   []string{events.RoutingKeyRefunded},
		Queue:              events.QueueOrderPaid,
		DeadLetterExchange: events.DeadLetterExchange,
		DeadLetterQueue:    events.QueueOrderPaidDLQ,
		DeliveryLimit:      events.DeliveryLimit,
	}
}

// WithPrefix returns t with prefix in front of every exchange and queue name (not the routing keys).
// It lets several environments, or parallel tests, share one broker (AMQP_NAME_PREFIX).
func (t Topology) WithPrefix(prefix string) Topology {
	t.Exchange = prefix + t.Exchange
	t.Queue = prefix + t.Queue
	t.DeadLetterExchange = prefix + t.DeadLetterExchange
	t.DeadLetterQueue = prefix + t.DeadLetterQueue
	return t
}

// Validate refuses a topology with a missing name or a limit below 1.
func (t Topology) Validate() error {
	for _, f := range [][2]string{
		{"exchange", t.Exchange}, {"routing key", t.RoutingKey}, {"queue", t.Queue},
		{"dead-letter exchange", t.DeadLetterExchange}, {"dead-letter queue", t.DeadLetterQueue},
	} {
		if f[1] == "" {
			return fmt.Errorf("topology: %s is empty", f[0])
		}
	}
	for _, k := range t.ExtraRoutingKeys {
		if k == "" {
			return errors.New("topology: an extra routing key is empty")
		}
	}
	if t.DeliveryLimit < 1 {
		return errors.New("topology: delivery limit must be >= 1")
	}
	return nil
}

// RoutingKeys returns every binding key of Queue: RoutingKey, then ExtraRoutingKeys.
func (t Topology) RoutingKeys() []string {
	return append([]string{t.RoutingKey}, t.ExtraRoutingKeys...)
}

// Declare creates the exchange, the DLX, the DLQ, the queue and its bindings (one per routing key). Every declaration is
// idempotent, so the producer and the consumer both call it at start and whichever runs first wins;
// a relay that starts before any consumer then never publishes into an exchange with no queue bound
// (RabbitMQ would drop such a message silently). A declaration whose arguments differ from the
// existing object fails with PRECONDITION_FAILED and closes ch: a topology drift is loud, not silent.
func Declare(ch *amqp.Channel, t Topology) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.Exchange, err)
	}
	// A direct DLX with an explicit dead-letter routing key keeps this queue's dead letters apart from
	// any other queue that might share the DLX later.
	if err := ch.ExchangeDeclare(t.DeadLetterExchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare dead-letter exchange %s: %w", t.DeadLetterExchange, err)
	}
	quorum := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if _, err := ch.QueueDeclare(t.DeadLetterQueue, true, false, false, false, quorum); err != nil {
		return fmt.Errorf("declare dead-letter queue %s: %w", t.DeadLetterQueue, err)
	}
	if err := ch.QueueBind(t.DeadLetterQueue, t.DeadLetterQueue, t.DeadLetterExchange, false, nil); err != nil {
		return fmt.Errorf("bind dead-letter queue %s: %w", t.DeadLetterQueue, err)
	}
	_, err := ch.QueueDeclare(t.Queue, true, false, false, false, amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		"x-delivery-limit":          t.DeliveryLimit,
		"x-dead-letter-exchange":    t.DeadLetterExchange,
		"x-dead-letter-routing-key": t.DeadLetterQueue,
	})
	if err != nil {
		return fmt.Errorf("declare queue %s: %w", t.Queue, err)
	}
	// Bindings are not queue arguments: adding one to an existing queue is allowed, so a broker that
	// has the queue from before order.refunded existed simply gains the second binding.
	for _, key := range t.RoutingKeys() {
		if err := ch.QueueBind(t.Queue, key, t.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %s to %s with %s: %w", t.Queue, t.Exchange, key, err)
		}
	}
	return nil
}

// DeliveryCount returns how many times a quorum-queue message was returned to the queue before this
// delivery (the x-delivery-count header the queue sets on a redelivery), and 0 on the first delivery.
// A first delivery's header, if it has one, is not this queue's count: it came with the message, as
// with a dead letter moved back from its DLQ, whose headers the move copies (the DLQ's own count,
// raised by each inspection that requeued it). Taken as the count, it made the consumer log and count
// that first delivery's failure as dead_lettered while the broker requeued it.
func DeliveryCount(d amqp.Delivery) int64 {
	if !d.Redelivered {
		return 0
	}
	return IntHeader(d.Headers, "x-delivery-count")
}

// IntHeader returns the integer header name of h, whatever width the publisher encoded it in, and 0
// when it is absent or not an integer.
func IntHeader(h amqp.Table, name string) int64 {
	switch v := h[name].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int:
		return int64(v)
	case int16:
		return int64(v)
	case int8:
		return int64(v)
	case uint8:
		return int64(v)
	}
	return 0
}

// DeadLetteredFrom returns the routing key a dead-lettered message was first published with (the
// first routing key of the newest x-death entry the broker added when it dead-lettered it), and
// whether there is one. A dead letter moved back from its DLQ (the management UI's "Move messages", a
// shovel) arrives through the default exchange under the queue's name: this is its own.
func DeadLetteredFrom(d amqp.Delivery) (string, bool) {
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) == 0 {
		return "", false
	}
	death, _ := deaths[0].(amqp.Table)
	keys, _ := death["routing-keys"].([]any)
	if len(keys) == 0 {
		return "", false
	}
	key, ok := keys[0].(string)
	return key, ok && key != ""
}

// ReadyMessages is the number of ready messages in queue; a queue that does not exist is an error.
func ReadyMessages(conn *amqp.Connection, queue string) (int64, error) {
	q, found, err := inspectQueue(conn, queue)
	if err == nil && !found {
		err = fmt.Errorf("inspect queue %s: it does not exist", queue)
	}
	return int64(q.Messages), err
}

// Consumers returns how many consumers queue has; 0 when it does not exist.
func Consumers(conn *amqp.Connection, queue string) (int, error) {
	q, _, err := inspectQueue(conn, queue)
	return q.Consumers, err
}

// inspectQueue looks queue up with a passive declare, on a channel of its own: a failed one closes its
// channel. found is false when the broker says 404; any other refusal is err.
func inspectQueue(conn *amqp.Connection, queue string) (q amqp.Queue, found bool, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return q, false, fmt.Errorf("look up queue %s: %w", queue, err)
	}
	defer ch.Close() // already closed if it is missing
	q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return q, true, nil
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return amqp.Queue{}, false, nil
	}
	return amqp.Queue{}, false, fmt.Errorf("look up queue %s: %w", queue, err)
}

// Delete removes t's queues and exchanges. A name that does not exist is not an error; any other
// refusal (a queue another connection holds exclusively: 405 RESOURCE_LOCKED; 403 ACCESS_REFUSED) is
// returned, every name tried first: `orders teardown` must not say it removed what is still there.
func Delete(conn *amqp.Connection, t Topology) error {
	return errors.Join(deleteOne(conn, "queue", t.Queue), deleteOne(conn, "queue", t.DeadLetterQueue),
		deleteOne(conn, "exchange", t.Exchange), deleteOne(conn, "exchange", t.DeadLetterExchange))
}

// DeleteNames deletes each name as a queue and as an exchange (a run's leftovers, whose kind the caller
// does not know), with Delete's errors.
func DeleteNames(conn *amqp.Connection, names ...string) error {
	var errs []error
	for _, n := range names {
		errs = append(errs, deleteOne(conn, "queue", n), deleteOne(conn, "exchange", n))
	}
	return errors.Join(errs...)
}

// deleteOne deletes one queue or exchange on a channel of its own: a refused delete closes its channel.
func deleteOne(conn *amqp.Connection, kind, name string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, name, err)
	}
	defer ch.Close() // already closed by a refusal; the second close's error says nothing new
	if kind == "queue" {
		_, err = ch.QueueDelete(name, false, false, false)
	} else {
		err = ch.ExchangeDelete(name, false, false)
	}
	var ae *amqp.Error
	if err == nil || errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return nil
	}
	return fmt.Errorf("delete %s %s: %w", kind, name, err)
}

// Redeclare declares t on ch as Declare does; when lookFirst (every session of a process after its
// first), it first looks t's names up on conn (Missing) and returns the ones that were gone. A
// session's declare re-created a DLX or DLQ deleted since the last session without a word, so the dead
// letters the broker had dropped meanwhile went unreported (a helper's finding, 2026-12-07); the caller
// raises topology_missing for what this returns. A first session cannot tell a new broker from a
// deletion, and declares quietly.
func Redeclare(conn *amqp.Connection, ch *amqp.Channel, t Topology, lookFirst bool) (missing []string, err error) {
	if lookFirst {
		if missing, err = Missing(conn, t); err != nil {
			return nil, err
		}
	}
	return missing, Declare(ch, t)
}

// Missing returns the names of t's exchanges and queues that do not exist on the broker, each looked up
// with a passive declare on a channel of its own (a declare of a missing name closes its channel).
func Missing(conn *amqp.Connection, t Topology) ([]string, error) {
	var missing []string
	for _, n := range []struct{ kind, name string }{
		{"exchange", t.Exchange}, {"queue", t.Queue}, {"exchange", t.DeadLetterExchange}, {"queue", t.DeadLetterQueue},
	} {
		ok, err := exists(conn, n.kind, n.name)
		if err != nil {
			return nil, err
		}
		if !ok {
			missing = append(missing, n.name)
		}
	}
	return missing, nil
}

// exists looks kind name up with a passive declare.
func exists(conn *amqp.Connection, kind, name string) (bool, error) {
	if kind == "queue" {
		_, found, err := inspectQueue(conn, name)
		return found, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("look up %s %s: %w", kind, name, err)
	}
	defer ch.Close() // already closed if it is missing
	err = ch.ExchangeDeclarePassive(name, "", true, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("look up %s %s: %w", kind, name, err)
}
