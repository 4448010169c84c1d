// Package orders is the order business area: products, orders and their statuses. Domain types here
// carry no HTTP or SQL; repository.go holds the SQL and http.go the Echo handlers.
package orders

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"idemshop/internal/platform/problem"
)

// Status is an order's status (docs/design.md, "API and status codes"; transitions in status.go).
type Status string

// The order statuses.
const (
	StatusPending        Status = "PENDING"
	StatusPaying         Status = "PAYING"
	StatusPaid           Status = "PAID"
	StatusFailed         Status = "FAILED"
	StatusCancelled      Status = "CANCELLED"
	StatusRefundRequired Status = "REFUND_REQUIRED"
	StatusRefunded       Status = "REFUNDED"
)

// Product is a catalogue entry. PriceCents is in minor units of Currency (ISO 4217).
type Product struct {
	ID         int64  `json:"id"`
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	PriceCents int64  `json:"price_cents"`
	Currency   string `json:"currency"`
	Stock      int64  `json:"stock"`
}

// Order is one order. AmountCents = PriceCents × Quantity at creation, in minor units of Currency.
type Order struct {
	ID          int64
	UserID      int64
	Status      Status
	ProductID   int64
	Quantity    int
	AmountCents int64
	Currency    string
	// PaymentID is the platform's payment id, once known (nil before).
	PaymentID *string
	// RefundedCents is how much of AmountCents the platform has refunded so far (0..AmountCents).
	RefundedCents int64
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Quantity bounds for one order line.
const (
	MinQuantity = 1
	MaxQuantity = 10
)

// CreateRequest is the body of POST /v1/orders: {"product_id":1,"quantity":2}.
type CreateRequest struct {
	ProductID int64 `json:"product_id"`
	Quantity  int   `json:"quantity"`
}

// Errors of the order area; codes are stable.
var (
	ErrValidation        = problem.New(problem.KindInvalid, "validation_failed", "the request is invalid")
	ErrUnknownProduct    = problem.New(problem.KindInvalid, "unknown_product", "no product with this product_id")
	ErrInsufficientStock = problem.New(problem.KindConflict, "insufficient_stock", "not enough stock for this quantity")
	ErrOrderNotFound     = problem.New(problem.KindNotFound, "order_not_found", "no such order")
	// ErrRefundEventReused is a refund event whose id was first recorded for another order or another
	// amount: not a resend (a resend carries the same refund), and counting it as one would lose this
	// refund for good. The real platform gives every refund an id of its own; a sender that reuses one
	// is broken or forged.
	ErrRefundEventReused = problem.New(problem.KindUnprocessable, "event_id_reused",
		"event_id was already used for another refund")
	// ErrOtherPayment is an event (a refund, a SUCCESS, a FAILED) of another payment than the order's,
	// found after the caller read the order: the order learnt its payment in between (a SUCCESS or
	// FAILED of its own that committed first).
	ErrOtherPayment = errors.New("the event is of another payment than the order's")
)

// Validate checks the fields that need no database.
func (r CreateRequest) Validate() error {
	if r.ProductID <= 0 {
		return problem.Newf(problem.KindInvalid, ErrValidation.Code, "product_id is required and must be a positive integer")
	}
	if r.Quantity == 0 { // absent, most likely: "got 0" read as if the client had sent 0
		return problem.Newf(problem.KindInvalid, ErrValidation.Code,
			"quantity is required and must be between %d and %d", MinQuantity, MaxQuantity)
	}
	if r.Quantity < MinQuantity || r.Quantity > MaxQuantity {
		return problem.Newf(problem.KindInvalid, ErrValidation.Code,
			"quantity must be between %d and %d, got %d", MinQuantity, MaxQuantity, r.Quantity)
	}
	return nil
}

// Amount returns price × quantity in minor units. quantity is at most MaxQuantity, so overflow needs a
// price above MaxInt64/10; it is refused rather than wrapped.
func Amount(priceCents int64, quantity int) (int64, error) {
	const maxInt64 = int64(^uint64(0) >> 1)
	if priceCents < 0 || quantity < 0 || (quantity > 0 && priceCents > maxInt64/int64(quantity)) {
		return 0, fmt.Errorf("amount overflow: %d × %d", priceCents, quantity)
	}
	return priceCents * int64(quantity), nil
}

// ParseID reads an order id written the one canonical way: decimal digits, no sign, no leading zero,
// within int64. "01" and "+1" are not ids: a lenient parse would let two spellings name one order.
func ParseID(s string) (int64, bool) {
	if s == "" || len(s) > 19 || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil
}
