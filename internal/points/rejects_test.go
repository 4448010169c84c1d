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
