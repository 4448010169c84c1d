package paymock

import (
	"time"

	"idemshop/internal/platform/problem"
)

// Status is a payment's state. PENDING moves once, to SUCCESS or FAILED; a SUCCESS payment becomes
// REFUNDED when refunds reach its full amount.
type Status string

// The payment statuses. SUCCESS, FAILED and REFUNDED are also the callback statuses.
const (
	StatusPending  Status = "PENDING"
	StatusSuccess  Status = "SUCCESS"
	StatusFailed   Status = "FAILED"
	StatusRefunded Status = "REFUNDED"
)

// DeclineSuffixCents is the deterministic decline trigger: a payment whose amount_cents ends in 13
// (amount_cents % 100 == 13, e.g. 1013 = 10.13) is declined when the payer approves it, whether the
// approval comes from the API or from auto-approve. Workshops use it to get a FAILED callback on demand.
const DeclineSuffixCents = 13

// declines reports whether the platform declines a payment of amount cents.
func declines(amount int64) bool { return amount%100 == DeclineSuffixCents }

// Payment is the platform's view of one charge. Money is int64 minor units (cents) throughout.
type Payment struct {
	ID              string    `json:"id"`
	MerchantOrderNo string    `json:"merchant_order_no"`
	AmountCents     int64     `json:"amount_cents"`
	Currency        string    `json:"currency"`
	Status          Status    `json:"status"`
	RefundedCents   int64     `json:"refunded_cents"`
	NotifyURL       string    `json:"notify_url"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// Refund is one refund of part or all of a SUCCESS payment. It succeeds at once (Status "SUCCEEDED").
type Refund struct {
	ID          string    `json:"id"`
	RefundNo    string    `json:"refund_no"`
	PaymentID   string    `json:"payment_id"`
	AmountCents int64     `json:"amount_cents"`
	Currency    string    `json:"currency"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"created_at"`
}

// Event is a callback body, exactly the fields docs/design.md fixes (the orders route decodes it strictly).
// For REFUNDED, AmountCents is the refund's amount, not the payment's.
type Event struct {
	EventID         string    `json:"event_id"`
	PaymentID       string    `json:"payment_id"`
	MerchantOrderNo string    `json:"merchant_order_no"`
	Status          Status    `json:"status"`
	AmountCents     int64     `json:"amount_cents"`
	Currency        string    `json:"currency"`
	OccurredAt      time.Time `json:"occurred_at"`
}

// Outcome of one callback attempt, as logged and counted in idemshop_paymock_callbacks_sent_total.
const (
	OutcomeSuccess  = "success"  // 2xx with {"result":"success"}: delivered
	OutcomeAckLost  = "ack_lost" // delivered, but chaos dropped the ack, so it is sent again
	OutcomeRetry    = "retry"    // any other answer (5xx, 3xx, 2xx without the success body): sent again
	OutcomeRejected = "rejected" // 4xx: the receiver refused it for good; no more attempts
	OutcomeError    = "error"    // no answer (connection refused, timeout): sent again
)

// Attempt is one entry of the delivery log: one HTTP POST of one copy of one event.
type Attempt struct {
	Seq         int64     `json:"seq"`         // position in the log, from 1
	DeliveryID  string    `json:"delivery_id"` // one copy of one event; its retries share it
	EventID     string    `json:"event_id"`
	PaymentID   string    `json:"payment_id"`
	EventStatus Status    `json:"event_status"`
	Source      string    `json:"source"` // settle, refund, replay or reorder (the stale event)
	Copy        int       `json:"copy"`   // 1..N among the duplicates of this dispatch
	Attempt     int       `json:"attempt"`
	JitterMS    int64     `json:"jitter_ms"`
	HTTPStatus  int       `json:"http_status"` // 0 when no answer came
	Outcome     string    `json:"outcome"`
	Final       bool      `json:"final"` // no further attempt of this delivery follows
	Error       string    `json:"error,omitempty"`
	At          time.Time `json:"at"`
	LatencyMS   float64   `json:"latency_ms"`

	// For the replay export (GET /admin/deliveries?format=jsonl): the exact body sent, and when the
	// attempt was due. Parallel copies of one dispatch with the same wait share their due time, which
	// the send times (At) never quite do; the export groups them by it.
	body []byte
	due  time.Time
}

// Stable problem codes of the platform API.
var (
	ErrValidation         = problem.New(problem.KindInvalid, "validation_failed", "the request is invalid")
	ErrPaymentNotFound    = problem.New(problem.KindNotFound, "payment_not_found", "no such payment")
	ErrOrderNoConflict    = problem.New(problem.KindConflict, "merchant_order_no_conflict", "a payment for this merchant_order_no exists with a different amount or currency")
	ErrNotPending         = problem.New(problem.KindConflict, "payment_not_pending", "the payment is already settled the other way")
	ErrNotRefundable      = problem.New(problem.KindConflict, "payment_not_refundable", "only a SUCCESS payment can be refunded")
	ErrRefundExceeds      = problem.New(problem.KindInvalid, "refund_exceeds_payment", "the refund is more than the unrefunded amount of the payment")
	ErrRefundNoConflict   = problem.New(problem.KindConflict, "refund_no_conflict", "this refund_no was used for a different payment or amount")
	ErrNotSettled         = problem.New(problem.KindConflict, "payment_not_settled", "a PENDING payment has no event to replay")
	ErrChaosUnavailable   = problem.New(problem.KindUnavailable, "chaos_error", "chaos: injected failure; nothing was stored")
	ErrAdminLoopbackOnly  = problem.New(problem.KindForbidden, "admin_loopback_only", "admin routes answer on loopback only; set ADMIN_TOKEN to reach them remotely")
	ErrAdminTokenRequired = problem.New(problem.KindUnauthorized, "unauthorized", "admin routes need Authorization: Bearer <ADMIN_TOKEN>")
)
