// Package outbox is the transactional outbox: Insert writes an event in the caller's transaction, so
// the event exists if and only if the state change it announces committed; the Relay (relay.go)
// publishes pending rows to RabbitMQ with publisher confirms and marks them published. Delivery is at
// least once: consumers must absorb duplicates.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"gorm.io/gorm"
)

// Insert adds one event to the outbox inside tx. eventID is a UUID (it becomes the AMQP message_id);
// payload is encoded as JSON and published as is.
func Insert(ctx context.Context, tx *gorm.DB, eventID, routingKey string, payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encode outbox payload: %w", err)
	}
	err = tx.WithContext(ctx).Exec(`INSERT INTO outbox (event_id, routing_key, payload) VALUES (?, ?, ?)`,
		eventID, routingKey, string(b)).Error
	if err != nil {
		return fmt.Errorf("insert outbox row: %w", err)
	}
	return nil
}
