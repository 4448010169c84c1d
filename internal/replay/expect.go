package replay

import (
	"cmp"
	"fmt"
	"maps"
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

	// What the shop holds beside the status while the replay goes on, to decide later events; not part
	// of the end compared with the shop's (Expect leaves them out). payment is the order's payment once a
	// SUCCESS or FAILED applied told it; refunds are the recorded refund events' sums by payment, sorted
	// by payment id so that two arrival orders that record the same refunds reach the same state.
	payment string
	refunds [maxPayments]paymentRefunds
}

// paymentRefunds is the sum of one payment's refund events, in cents.
type paymentRefunds struct {
	payment string
	cents   int64
}

// maxPayments bounds the distinct payment ids of one order's events that Expect follows.
const maxPayments = 8

// record adds a refund event of payment to e's per-payment sums.
func (e *End) record(payment string, cents int64) {
	for i := range e.refunds {
		switch {
		case e.refunds[i].payment == payment:
			e.refunds[i].cents += cents
			return
		case e.refunds[i].payment == "" || e.refunds[i].payment > payment:
			copy(e.refunds[i+1:], e.refunds[i:len(e.refunds)-1])
			e.refunds[i] = paymentRefunds{payment, cents}
			return
		}
	}
}

// ownRefunds is orders.Repository.OwnRefunds: once the order knows its payment, refunds of other
// payments recorded before are not its money, and its total becomes its own payment's refunds, capped
// at the amount. With no other payment's refund the total stays as it is.
func (e *End) ownRefunds(amount int64) {
	var own, other int64
	for _, r := range e.refunds {
		switch {
		case r.payment == "":
		case r.payment == e.payment:
			own += r.cents
		default:
			other += r.cents
		}
	}
	if other > 0 {
		e.RefundedCents = min(amount, own)
	}
}

// public is e without the state Expect keeps on the way: the end the shop's is compared with.
func (e End) public() End {
	e.payment, e.refunds = "", [maxPayments]paymentRefunds{}
	return e
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
		payments := map[string]bool{}
		for _, ev := range r.Events {
			if ev.MerchantOrderNo == o.Ref {
				payments[ev.PaymentID] = true
			}
		}
		if len(payments) > maxPayments {
			return nil, fmt.Errorf("order %q: events of %d different payments; at most %d can be predicted", o.Ref, len(payments), maxPayments)
		}
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
		public := map[End]bool{}
		for _, e := range ends {
			public[e.public()] = true
		}
		out[o.Ref] = slices.SortedFunc(maps.Keys(public), compareEnds)
	}
	return out, nil
}

// step applies one new event the way the guarded callback handler does (docs/callbacks.md, "What each
// callback does"): the money must match the order, and once the order knows its payment the event must
// be about it (400 payment_mismatch); then the status table decides, and refunds are facts recorded
// whatever the status, the order's total capped at its amount.
func (e End) step(ev Event, amount int64, currency string) End {
	if ev.Currency != currency {
		return e // 400 amount_mismatch: nothing changes
	}
	if e.payment != "" && ev.PaymentID != e.payment {
		return e // 400 payment_mismatch: nothing changes
	}
	switch ev.Status {
	case StatusSuccess:
		if ev.AmountCents != amount {
			return e
		}
		switch e.Status {
		case OrderPending:
			e.Status, e.PaidEvent, e.payment = OrderPaid, true, ev.PaymentID
			e.Applied++
			e.ownRefunds(amount)
			if e.RefundedCents >= amount { // the refund came first: the SUCCESS pays and refunds at once
				e.Status, e.RefundedEvent = OrderRefunded, true
			}
		case OrderFailed:
			// The platform took money for an order the shop gave up: what it has not refunded yet of
			// this payment is asked back, if anything.
			e.ownRefunds(amount)
			if e.RefundedCents < amount {
				e.RefundOwed = true
			}
		}
	case StatusFailed:
		if ev.AmountCents != amount {
			return e
		}
		if e.Status == OrderPending { // a decline may overtake the pay flow: PENDING → FAILED is legal
			e.Status, e.payment = OrderFailed, ev.PaymentID
			e.Applied++
			e.ownRefunds(amount)
		}
	case StatusRefunded:
		if ev.AmountCents <= 0 || ev.AmountCents > amount {
			return e
		}
		e.record(ev.PaymentID, ev.AmountCents)
		e.RefundedCents = min(amount, e.RefundedCents+ev.AmountCents) // past it: alert=over_refund
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
