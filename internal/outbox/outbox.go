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
// payload is encoded as JSON and published as is. Once tx has committed (not before: the relay would
// find nothing), a writer in the relay's process calls Relay.Wake, so that the event is published now
// rather than at the next poll.
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

// Notify asks PostgreSQL to wake the relays (LISTEN NotifyChannel, listen.go) when tx commits; a
// rollback drops the notification. Call it in the transaction that inserted outbox rows; once per
// transaction is enough (PostgreSQL folds identical notifications of one transaction into one).
//
// No writer of the shop calls it yet, on purpose: PostgreSQL (15 here) serializes the commits of all
// notifying transactions of the whole server, holding a global lock across each one's WAL flush, so
// with a NOTIFY in each, 16 pgbench clients made 80–128 one-row commits a second instead of
// 1,543–1,813 (measured 2026-12-01, docs/points.md#the-relay). The shop's writers wake the relay of their own process
// instead (Relay.Wake, after the commit), which costs the database nothing; the relays of other
// replicas find those rows by polling.
func Notify(ctx context.Context, tx *gorm.DB) error {
	if err := tx.WithContext(ctx).Exec(`SELECT pg_notify(?, '')`, NotifyChannel).Error; err != nil {
		return fmt.Errorf("notify the outbox relay: %w", err)
	}
	return nil
}
