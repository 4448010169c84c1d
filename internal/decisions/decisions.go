// Package decisions carries what the guards decide, as they decide it, to whoever watches: the lab's
// live page (GET /lab) and its event stream (GET /lab/events). A guard never depends on a watcher: it
// gets an optional Sink when it is built (nil in production unless ORDERS_LAB=true) and reports each
// outcome with one Emit call at the point where the outcome is known. The package knows no HTTP.
package decisions

import "time"

// The types of decision, one per guard a trainer points at.
const (
	TypeCallback    = "callback"    // a payment callback: applied, duplicate, stale, recorded, rejected
	TypeIdempotency = "idempotency" // an Idempotency-Key request: executed, replayed, in_flight (409), mismatch (422), invalid (400)
	TypePayRecord   = "pay_record"  // a pay record moved: PROCESSING (claimed or left), COMPLETED, FAILED_*
	TypeFence       = "fence"       // a fenced write refused: a newer holder owns the record
	TypeOutbox      = "outbox"      // an outbox row published and confirmed by the broker
	TypePoints      = "points"      // points credited, reversed or debited (a ledger row), or suppressed
	TypeMissed      = "missed"      // the watcher was too slow: Count decisions were dropped for it
)

// Decision is one guard decision. Type and Outcome are always set; the rest when the guard knows it.
type Decision struct {
	Seq     uint64    `json:"seq"` // set by the Bus: increasing, so a page can ask for what it missed
	At      time.Time `json:"at"`  // set by the Bus if zero
	Type    string    `json:"type"`
	Outcome string    `json:"outcome"`
	EventID string    `json:"event_id,omitempty"`
	OrderID int64     `json:"order_id,omitempty"`
	UserID  int64     `json:"user_id,omitempty"`
	// Copy is the nth decision of this Type on this EventID the Bus has seen: copy 1 of a callback is
	// the first delivery, copies 2 and 3 are the platform's resends. Set by the Bus.
	Copy  int    `json:"copy,omitempty"`
	Route string `json:"route,omitempty"` // the route pattern of an Idempotency-Key request
	Guard string `json:"guard,omitempty"` // which code decided: "guarded", or a lab twin's name
	Fence int64  `json:"fence,omitempty"` // the fencing token of a pay record's holder
	Count int64  `json:"count,omitempty"` // how many, for a decision that stands for several (points suppressed, missed)
	// Detail is a short reason, for people: "already PAID", "409", "order-paid:17 +25".
	Detail string `json:"detail,omitempty"`
}

// Sink receives decisions. Record must not block the guard: the Bus drops rather than waits.
type Sink interface {
	Record(Decision)
}

// Emit sends d to s. A nil s records nothing, so a guard built without a watcher needs no check.
func Emit(s Sink, d Decision) {
	if s != nil {
		s.Record(d)
	}
}
