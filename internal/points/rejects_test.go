package points

import (
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
)

// Poison goes back by basic.reject, anything else by basic.nack: on RabbitMQ 4.3 and later only a
// reject counts toward x-delivery-limit, so poison nacked would be requeued for ever, and a message
// that failed for the consumer's reasons, rejected, would spend its deliveries.
func TestOnlyPoisonIsRejected(t *testing.T) {
	undecodable := &message{d: amqp.Delivery{RoutingKey: "order.paid", Body: []byte(`{"event_id":`)}}
	undecodable.err = undecodable.decode()
	unknown := &message{d: amqp.Delivery{RoutingKey: "order.shipped", Body: []byte(`{}`)}}
	unknown.err = unknown.decode()
	for name, c := range map[string]struct {
		m    *message
		want bool
	}{
		"undecodable":               {undecodable, true},
		"unknown routing key":       {unknown, true},
		"refused by the ledger":     {&message{err: fmt.Errorf("apply: %w", ErrRejected)}, true},
		"conflicting credit":        {&message{err: fmt.Errorf("%w: order.paid: in the ledger with another amount", errPoison)}, true},
		"shutdown, lease held":      {&message{err: errors.New("shutting down while another consumer holds the lease")}, false},
		"lease held past its TTL":   {&message{err: errors.New("lease still held after one lease TTL")}, false},
		"database gone at shutdown": {&message{err: errors.New("context canceled")}, false},
	} {
		assert.Equal(t, c.want, rejects(c.m), name)
	}
}

// A poison message that names its event names it in the log, whichever member failed to decode: the
// WARN lines said event_id="" when another member had the wrong type. Guards the poison-event-id mutant.
func TestAnUndecodableMessageIsLoggedWithItsEventID(t *testing.T) {
	for name, c := range map[string]struct{ key, body, want string }{
		"order_id a string":          {"order.paid", `{"event_id":"e-strid","order_id":"4011","user_id":1,"amount_cents":500,"points":5}`, "e-strid"},
		"occurred_at no time, first": {"order.refunded", `{"occurred_at":"x","event_id":"e-late","order_id":1,"user_id":1,"amount_cents":500,"points":5}`, "e-late"},
		"event_id a number":          {"order.paid", `{"event_id":7,"order_id":1}`, ""},
		"no JSON":                    {"order.paid", `{"event_id":`, ""},
	} {
		m := &message{d: amqp.Delivery{RoutingKey: c.key, Body: []byte(c.body)}}
		err := m.decode()
		assert.ErrorIs(t, err, errPoison, name)
		assert.Equal(t, c.want, m.eventID, name)
	}
}
