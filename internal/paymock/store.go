package paymock

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// store is the platform's memory: payments, refunds and the delivery log behind one mutex. Every method
// is one critical section, so each check-then-write (idempotent create, settle, refund) is atomic, the
// way a database transaction would make it. Ids are counters (pay_1, evt_1, ..., or pay_<tag>_1 with
// Config.IDTag), so two runs that make the same calls in the same order get the same ids.
type store struct {
	mu       sync.Mutex
	now      func() time.Time
	idTag    string // "" or "<tag>_", between an id's prefix and its number
	counters map[string]int64
	payments map[string]*entry // by payment id
	byOrder  map[string]*entry // by merchant_order_no
	refunds  map[string]Refund // by refund_no
	asked    map[string]int64  // well-formed POST /v1/payments by merchant_order_no, whatever came of them
	log      []Attempt         // the last logLimit attempts, oldest first
	logLimit int
	logSeq   int64
}

// entry is a payment plus its latest real event, the one a replay re-sends.
type entry struct {
	p    Payment
	last *Event
}

func newStore(now func() time.Time, logLimit int, idTag string) *store {
	if idTag != "" {
		idTag += "_"
	}
	return &store{
		now: now, idTag: idTag, counters: map[string]int64{},
		payments: map[string]*entry{}, byOrder: map[string]*entry{}, refunds: map[string]Refund{},
		asked:    map[string]int64{},
		logLimit: logLimit,
	}
}

// nextIDLocked returns "<prefix>_<n>", or "<prefix>_<tag>_<n>", with n counting from 1 per prefix.
func (s *store) nextIDLocked(prefix string) string {
	s.counters[prefix]++
	return prefix + "_" + s.idTag + strconv.FormatInt(s.counters[prefix], 10)
}

func (s *store) nextID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextIDLocked(prefix)
}

// stamp is the store's clock in UTC at microsecond precision, the precision PostgreSQL keeps.
func (s *store) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// createPayment stores a new PENDING payment, or returns the existing one for the same
// merchant_order_no with created=false. The same order number with a different amount or currency is
// ErrOrderNoConflict: the merchant is asking for a different charge under a key it already used.
func (s *store) createPayment(req createPaymentRequest) (p Payment, created bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byOrder[req.MerchantOrderNo]; ok {
		if e.p.AmountCents != req.AmountCents || e.p.Currency != req.Currency {
			return Payment{}, false, ErrOrderNoConflict
		}
		return e.p, false, nil
	}
	now := s.stamp()
	e := &entry{p: Payment{
		ID: s.nextIDLocked("pay"), MerchantOrderNo: req.MerchantOrderNo, AmountCents: req.AmountCents,
		Currency: req.Currency, Status: StatusPending, NotifyURL: req.NotifyURL, CreatedAt: now, UpdatedAt: now,
	}}
	s.payments[e.p.ID] = e
	s.byOrder[e.p.MerchantOrderNo] = e
	return e.p, true, nil
}

// ask counts one create request for merchant_order_no no. The payment alone cannot tell a caller that
// asked once from one that asked again: the second create answers the same payment.
func (s *store) ask(no string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked[no]++
}

// asks is how many create requests named merchant_order_no no.
func (s *store) asks(no string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[no]
}

func (s *store) payment(id string) (Payment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.payments[id]
	if !ok {
		return Payment{}, ErrPaymentNotFound
	}
	return e.p, nil
}

func (s *store) paymentByOrderNo(no string) (Payment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byOrder[no]
	if !ok {
		return Payment{}, false
	}
	return e.p, true
}

// settle moves a PENDING payment to SUCCESS or FAILED and returns the event to send. Settling to the
// state the payment is already in is a no-op (ev == nil), so a double-click on "approve" sends nothing
// twice; so is approving a payment refunded in full, which was approved before its refunds. Settling a
// payment the other way is ErrNotPending.
func (s *store) settle(id string, to Status) (p Payment, ev *Event, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.payments[id]
	if !ok {
		return Payment{}, nil, ErrPaymentNotFound
	}
	if e.p.Status == to || (e.p.Status == StatusRefunded && to == StatusSuccess) {
		return e.p, nil, nil
	}
	if e.p.Status != StatusPending {
		return e.p, nil, ErrNotPending
	}
	now := s.stamp()
	e.p.Status, e.p.UpdatedAt = to, now
	e.last = &Event{
		EventID: s.nextIDLocked("evt"), PaymentID: e.p.ID, MerchantOrderNo: e.p.MerchantOrderNo, Status: to,
		AmountCents: e.p.AmountCents, Currency: e.p.Currency, OccurredAt: now,
	}
	return e.p, e.last, nil
}

// refund applies a refund once per refund_no. A repeat with the same payment and amount returns the
// stored refund with created=false and no event; a repeat that differs is ErrRefundNoConflict.
func (s *store) refund(req refundRequest) (r Refund, created bool, p Payment, ev *Event, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.refunds[req.RefundNo]; ok {
		if r.PaymentID != req.PaymentID || r.AmountCents != req.AmountCents {
			return Refund{}, false, Payment{}, nil, ErrRefundNoConflict
		}
		return r, false, s.payments[r.PaymentID].p, nil, nil
	}
	e, ok := s.payments[req.PaymentID]
	if !ok {
		return Refund{}, false, Payment{}, nil, ErrPaymentNotFound
	}
	// A payment refunded in full is REFUNDED: not refundable any more (409), like a PENDING or FAILED
	// one. A repeat of one of its refunds was answered above.
	if e.p.Status != StatusSuccess {
		return Refund{}, false, Payment{}, nil, ErrNotRefundable
	}
	if req.AmountCents > e.p.AmountCents-e.p.RefundedCents {
		return Refund{}, false, Payment{}, nil, ErrRefundExceeds
	}
	now := s.stamp()
	r = Refund{
		ID: s.nextIDLocked("ref"), RefundNo: req.RefundNo, PaymentID: e.p.ID, AmountCents: req.AmountCents,
		Currency: e.p.Currency, Status: "SUCCEEDED", CreatedAt: now,
	}
	s.refunds[r.RefundNo] = r
	e.p.RefundedCents += r.AmountCents
	if e.p.RefundedCents == e.p.AmountCents {
		e.p.Status = StatusRefunded
	}
	e.p.UpdatedAt = now
	e.last = &Event{
		EventID: s.nextIDLocked("evt"), PaymentID: e.p.ID, MerchantOrderNo: e.p.MerchantOrderNo,
		Status: StatusRefunded, AmountCents: r.AmountCents, Currency: e.p.Currency, OccurredAt: now,
	}
	return r, true, e.p, e.last, nil
}

// lastEvent is the event a replay re-sends: the payment's latest real one.
func (s *store) lastEvent(id string) (Payment, Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.payments[id]
	if !ok {
		return Payment{}, Event{}, ErrPaymentNotFound
	}
	if e.last == nil {
		return e.p, Event{}, ErrNotSettled
	}
	return e.p, *e.last, nil
}

// records returns every payment and every refund, each sorted by the number in its id, which is
// creation order (pay_2 before pay_10). The lists are never nil, so they encode as [] when empty.
func (s *store) records() ([]Payment, []Refund) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pays := make([]Payment, 0, len(s.payments))
	for _, e := range s.payments {
		pays = append(pays, e.p)
	}
	refs := make([]Refund, 0, len(s.refunds))
	for _, r := range s.refunds {
		refs = append(refs, r)
	}
	slices.SortFunc(pays, func(a, b Payment) int { return cmp.Compare(idSeq(a.ID), idSeq(b.ID)) })
	slices.SortFunc(refs, func(a, b Refund) int { return cmp.Compare(idSeq(a.ID), idSeq(b.ID)) })
	return pays, refs
}

// idSeq is n of an id "<prefix>_<n>" made by nextIDLocked. A string sort would put pay_10 before pay_2.
func idSeq(id string) int64 {
	n, _ := strconv.ParseInt(id[strings.LastIndexByte(id, '_')+1:], 10, 64)
	return n
}

// appendAttempt adds a to the log, dropping the oldest entry past the limit so memory stays bounded.
func (s *store) appendAttempt(a Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logSeq++
	a.Seq = s.logSeq
	if len(s.log) == s.logLimit {
		copy(s.log, s.log[1:])
		s.log = s.log[:len(s.log)-1]
	}
	s.log = append(s.log, a)
}

// attempts returns a copy of the log, oldest first, keeping entries that match the non-empty filters.
func (s *store) attempts(paymentID, eventID string) []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Attempt, 0, len(s.log))
	for _, a := range s.log {
		if (paymentID == "" || a.PaymentID == paymentID) && (eventID == "" || a.EventID == eventID) {
			out = append(out, a)
		}
	}
	return out
}
