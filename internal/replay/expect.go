package replay

import (
	"cmp"
	"fmt"
	"slices"
)

// Order statuses the guarded callback can leave a replayed order in. A replay never pays through the
// pay flow, so its orders start PENDING, and each has a product of its own with ample stock (no
// REFUND_REQUIRED for want of stock).
const (
	OrderPending  = "PENDING"
	OrderPaid     = "PAID"
	OrderFailed   = "FAILED"
	OrderRefunded = "REFUNDED"
)

// End is where the guarded shop must leave one order once a replay is over, and what its callback guard
// did on the way. Expect derives it from the recording alone, so a trainer's own recording is checked
// the same way as a shipped file.
type End struct {
	Status        string `json:"status"`
	PaidEvent     bool   `json:"paid_event"`     // one order.paid was written (stock taken, points credited)
	RefundedEvent bool   `json:"refunded_event"` // the compensation ran once: stock back, one order.refunded
	RefundedCents int64  `json:"refunded_cents"` // the refunds recorded as facts
	Applied       int    `json:"applied"`        // callbacks that changed the order
	RefundOwed    bool   `json:"refund_owed"`    // a SUCCESS after FAILED: the shop asks the platform to refund it
}

// StockDelta is what the order's product has lost at the end: its quantity while PAID. A REFUNDED order
// gave it back, and a FAILED or PENDING one never took it.
func (e End) StockDelta(quantity int) int64 {
	if e.Status == OrderPaid {
		return -int64(quantity)
	}
	return 0
}

// Points is what the order's user holds for it at the end: floor(amount/100) while PAID (docs/design.md),
// nothing once the credit was reversed or if it was never made.
func (e End) Points(amountCents int64) int64 {
	if e.Status == OrderPaid {
		return amountCents / 100
	}
	return 0
}

// maxRacing bounds the distinct events of one order sent in one group: their arrival order is unknown,
// so every order is tried (n! of them).
const maxRacing = 6

// Expect predicts each order's end under the guarded callback route, by order ref. It plays the distinct
// events (copies of one event change nothing after the first: that is the guard) group by group, in
// sending order. Events of one order sent in the same group race each other, so every arrival order is
// played, and each order gets the set of ends that some arrival order gives; usually one. currency is the
// fresh orders' currency: an event in another is rejected by the shop, as is an amount that does not fit.
func (r *Recording) Expect(orders []Order, currency string) (map[string][]End, error) {
	byRef := map[string]Order{}
	for _, o := range orders {
		byRef[o.Ref] = o
	}
	out := map[string][]End{}
	for _, o := range orders {
		ends := []End{{Status: OrderPending}}
		seen := map[string]bool{}
		for _, group := range r.Groups() {
			var racing []Event
			for _, i := range group {
				ev := r.Events[i]
				if ev.MerchantOrderNo != o.Ref || seen[ev.EventID] {
					continue
				}
				seen[ev.EventID] = true
				racing = append(racing, ev)
			}
			if len(racing) == 0 {
				continue
			}
			if len(racing) > maxRacing {
				return nil, fmt.Errorf("order %q: %d different events sent at once (at_ms %d); at most %d can be predicted",
					o.Ref, len(racing), r.Deliveries[group[0]].AtMS, maxRacing)
			}
			next := map[End]bool{}
			for _, start := range ends {
				permute(racing, func(seq []Event) {
					e := start
					for _, ev := range seq {
						e = e.step(ev, o.AmountCents, currency)
					}
					next[e] = true
				})
			}
			ends = ends[:0]
			for e := range next {
				ends = append(ends, e)
			}
			slices.SortFunc(ends, compareEnds)
		}
		out[o.Ref] = ends
	}
	return out, nil
}

// step applies one new event the way the guarded callback handler does (docs/callbacks.md, "What each
// callback does"): the money must match the order, then the status table decides, and refunds are facts
// recorded whatever the status.
func (e End) step(ev Event, amount int64, currency string) End {
	if ev.Currency != currency {
		return e // 400 amount_mismatch: nothing changes
	}
	switch ev.Status {
	case StatusSuccess:
		if ev.AmountCents != amount {
			return e
		}
		switch e.Status {
		case OrderPending:
			e.Status, e.PaidEvent = OrderPaid, true
			e.Applied++
			if e.RefundedCents >= amount { // the refund came first: the SUCCESS pays and refunds at once
				e.Status, e.RefundedEvent = OrderRefunded, true
			}
		case OrderFailed:
			e.RefundOwed = true // the platform took money for an order the shop gave up
		}
	case StatusFailed:
		if ev.AmountCents != amount {
			return e
		}
		if e.Status == OrderPending { // a decline may overtake the pay flow: PENDING → FAILED is legal
			e.Status = OrderFailed
			e.Applied++
		}
	case StatusRefunded:
		if ev.AmountCents > amount {
			return e
		}
		e.RefundedCents += ev.AmountCents
		if e.RefundedCents >= amount && e.Status == OrderPaid {
			e.Status, e.RefundedEvent = OrderRefunded, true
			e.Applied++
		}
	}
	return e
}

// permute calls fn with every ordering of evs (Heap's algorithm, on a copy).
func permute(evs []Event, fn func([]Event)) {
	a := slices.Clone(evs)
	var gen func(k int)
	gen = func(k int) {
		if k <= 1 {
			fn(a)
			return
		}
		gen(k - 1)
		for i := range k - 1 {
			if k%2 == 0 {
				a[i], a[k-1] = a[k-1], a[i]
			} else {
				a[0], a[k-1] = a[k-1], a[0]
			}
			gen(k - 1)
		}
	}
	gen(len(a))
}

// compareEnds orders ends so that a set of them prints the same way every time.
func compareEnds(a, b End) int {
	return cmp.Or(cmp.Compare(a.Status, b.Status), cmpBool(a.PaidEvent, b.PaidEvent),
		cmpBool(a.RefundedEvent, b.RefundedEvent), cmp.Compare(a.RefundedCents, b.RefundedCents),
		cmp.Compare(a.Applied, b.Applied), cmpBool(a.RefundOwed, b.RefundOwed))
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
