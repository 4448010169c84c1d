package orders

import "fmt"

// transitions is THE table of legal order status changes: for each target status, the statuses an
// order may be in to move there. Every status change in the shop is one conditional UPDATE built from
// this table (Repository.Transition): `UPDATE orders SET status = $to WHERE id = $id AND status IN
// (<allowed priors>)`. Whatever is not listed here is rejected, by construction.
//
//	PENDING ──► PAYING ──► PAID ──► REFUND_REQUIRED ──► REFUNDED
//	   │          │  ▲       └─────────────────────────────▲
//	   │          │  └ PENDING ► PAID (callback before the pay flow recorded PAYING)
//	   ├──────────┴──► FAILED (PENDING ► FAILED: the decline came before the pay flow recorded PAYING)
//	   └──────────┴──► CANCELLED
//
// An event may arrive before the pay flow has recorded PAYING (the platform answers the callback first,
// or the answer to the pay call is lost), so SUCCESS and FAILED are both legal from PENDING: a FAILED
// that could only be answered "stale" there would never be resent, and the order would wait forever.
var transitions = map[Status][]Status{
	StatusPaying:         {StatusPending},
	StatusPaid:           {StatusPending, StatusPaying},
	StatusFailed:         {StatusPending, StatusPaying},
	StatusCancelled:      {StatusPending, StatusPaying},
	StatusRefundRequired: {StatusPaid},
	StatusRefunded:       {StatusPaid, StatusRefundRequired},
}

// AllowedFrom returns the statuses from which an order may move to to (nil: none).
func AllowedFrom(to Status) []Status {
	return transitions[to]
}

// CanTransition reports whether from → to is in the table.
func CanTransition(from, to Status) bool {
	for _, s := range transitions[to] {
		if s == from {
			return true
		}
	}
	return false
}

// Statuses lists every status, in lifecycle order.
func Statuses() []Status {
	return []Status{StatusPending, StatusPaying, StatusPaid, StatusFailed, StatusCancelled,
		StatusRefundRequired, StatusRefunded}
}

// ErrIllegalTransition is returned for a target status that no status may move to; it is a
// programming error, not a race (a race shows up as "0 rows changed").
type ErrIllegalTransition struct{ To Status }

func (e ErrIllegalTransition) Error() string {
	return fmt.Sprintf("no order status may move to %q", e.To)
}
