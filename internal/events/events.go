// Package events defines the messages the shop publishes and the RabbitMQ names they travel under
// (docs/design.md, "Events"). Both the outbox (producer side) and points-consumer use these definitions.
package events

import "time"

// RabbitMQ names. The queue names are the defaults; tests use per-test names.
const (
	Exchange            = "idemshop.events"       // durable topic exchange
	RoutingKeyOrderPaid = "order.paid"            // routing key of OrderPaid
	RoutingKeyRefunded  = "order.refunded"        // routing key of OrderRefunded (same queue, second binding)
	QueueOrderPaid      = "points.order-paid"     // quorum queue, x-delivery-limit 5
	DeadLetterExchange  = "idemshop.events.dlx"   // where points.order-paid dead-letters
	QueueOrderPaidDLQ   = "points.order-paid.dlq" // the dead letters
	DeliveryLimit       = 5
)

// OrderPaid is published once per paid order (at least once on the wire). The message_id AMQP property
// is EventID; consumers must de-duplicate on OrderID, the business key, never on the message id.
// AmountCents is int64 minor units; Points = AmountCents / 100 (integer division).
type OrderPaid struct {
	EventID     string    `json:"event_id"`
	OrderID     int64     `json:"order_id"`
	UserID      int64     `json:"user_id"`
	AmountCents int64     `json:"amount_cents"`
	Points      int64     `json:"points"`
	OccurredAt  time.Time `json:"occurred_at"`
}

// OrderRefunded is published once per order whose payment came back in full after the order was PAID
// (at least once on the wire). The consumer reverses the order's credit once, under the ledger business
// key "order-refunded:<order id>" (docs/design.md, "Events"). Points is the credit to reverse, PointsFor of
// the order's AmountCents (int64 cents), the same number order.paid carried.
type OrderRefunded struct {
	EventID     string    `json:"event_id"`
	OrderID     int64     `json:"order_id"`
	UserID      int64     `json:"user_id"`
	AmountCents int64     `json:"amount_cents"`
	Points      int64     `json:"points"`
	OccurredAt  time.Time `json:"occurred_at"`
}

// PointsFor returns the points earned for amountCents: floor(amountCents / 100), integer maths only.
// Negative amounts earn nothing.
func PointsFor(amountCents int64) int64 {
	if amountCents <= 0 {
		return 0
	}
	return amountCents / 100
}
