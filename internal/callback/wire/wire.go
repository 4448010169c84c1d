// Package wire is the callback body as it travels: what the payment platform POSTs to the shop's
// callback route. It imports nothing of the shop, so that a reader of recorded callbacks (the replay
// loader, internal/replay) decodes bodies with the shop's own type.
package wire

import "time"

// Callback is the body the payment platform POSTs to the callback route (docs/design.md, "API and
// status codes"). AmountCents is in minor units of Currency; for REFUNDED it is the refunded amount.
type Callback struct {
	EventID         string    `json:"event_id"`
	PaymentID       string    `json:"payment_id"`
	MerchantOrderNo string    `json:"merchant_order_no"`
	Status          string    `json:"status"`
	AmountCents     int64     `json:"amount_cents"`
	Currency        string    `json:"currency"`
	OccurredAt      time.Time `json:"occurred_at"`
}
