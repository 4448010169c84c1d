// Package callback is the signed callback guard, the guard of the incident this project exists for: the platform resent one "payment succeeded" callback three times,
// and each copy deducted stock and credited points. Here, any number of identical (or reordered)
// callbacks change the order, the stock and the outbox exactly once.
package callback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"idemshop/internal/callback/wire"
	"idemshop/internal/decisions"
	"idemshop/internal/events"
	"idemshop/internal/orders"
	"idemshop/internal/outbox"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/pgtext"
	"idemshop/internal/platform/pgtx"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/problem"
	"idemshop/internal/refunds"
)

// Callback is the body the payment platform POSTs to the callback route: wire.Callback's members and
// units, with the shop's methods.
type Callback wire.Callback

// Callback statuses sent by the platform.
const (
	StatusSuccess  = "SUCCESS"
	StatusFailed   = "FAILED"
	StatusRefunded = "REFUNDED"
)

// Outcome is what a callback did; it labels idemshop_payments_callbacks_total and the audit table.
type Outcome string

// The outcomes. Only applied changed the order's status; duplicate, stale and recorded are answered 200
// all the same, so that the platform stops resending: each of them is settled for good.
const (
	OutcomeApplied   Outcome = "applied"   // the conditional UPDATE changed the order
	OutcomeDuplicate Outcome = "duplicate" // the order already has this status (a resend)
	OutcomeStale     Outcome = "stale"     // the order has moved past what this event could change
	OutcomeRecorded  Outcome = "recorded"  // the event's fact (a refund) is stored; it moves the order later
	OutcomeRejected  Outcome = "rejected"  // bad signature, bad body, unknown order, amount or payment mismatch, reused refund event id
)

// Errors of the callback route; codes are stable.
var (
	ErrSignature = problem.New(problem.KindUnauthorized, "signature_invalid",
		"X-Pay-Signature is missing, malformed, stale or does not match the body")
	ErrAmountMismatch = problem.New(problem.KindInvalid, "amount_mismatch",
		"amount or currency does not match the order")
	ErrPaymentMismatch = problem.New(problem.KindInvalid, "payment_mismatch",
		"payment_id is not the order's payment")
	ErrInvalidCallback = problem.New(problem.KindInvalid, "validation_failed", "the callback is invalid")
)

// OrderLock is a lock taken around one callback's transaction; unlock runs after the commit. Production
// takes none: the conditional UPDATE alone decides, and concurrent copies of one event queue on its row
// lock, which PostgreSQL releases the moment the winner commits. (A Redis lease per order used to sit
// here as an efficiency layer; measured, its two round trips on every callback cost more than the
// row-lock waits it spared the few duplicates: docs/performance.md.) Lab scenario S5 passes its
// FlashSaleLock, the lock the naive team trusted with the stock. Lock returning an error means "go on
// without it": a lock here is never what makes a callback safe.
type OrderLock interface {
	Lock(ctx context.Context, orderID int64) (unlock func(), err error)
}

// Applier is the callback's swap point, as idempotency.Runner is the order route's: the step that
// turns a verified, checked callback into the order's new state, inside the callback's transaction.
// Guarded is production's. The lab's twins, NoStateGuard (S1) and DropEarlyRefund (S12) in
// callback_unsafe.go and CheckThenWriteStock (S5) in callback_stock_unsafe.go, differ from it by the
// guard alone. A Service gets one at construction and keeps it.
type Applier struct {
	name  string
	apply func(s *Service, ctx context.Context, tx *gorm.DB, cb Callback, o orders.Order) (Outcome, string, error)
	// resendFastPath answers a resend of an event the order already reflects from the order's read
	// alone, without the conditional UPDATE and its row lock. It is a guard too, so S1's twin runs
	// without it.
	resendFastPath bool
}

// Guarded is the applier of production: the state-machine UPDATE decides, the stock decrement is
// conditional, and a resend is answered from the order's read.
var Guarded = Applier{name: "guarded", apply: (*Service).apply, resendFastPath: true}

// Service applies payment callbacks.
type Service struct {
	db       *gorm.DB
	orders   *orders.Repository
	verifier paysig.Verifier
	lock     OrderLock // nil in production; S5's FlashSaleLock in the lab
	metrics  *Metrics
	applier  Applier
	sink     decisions.Sink // the lab's live view; nil in production
	// wake, if set, is called after a transaction that may have inserted outbox rows has committed: the
	// relay of this process (outbox.Relay.Wake) publishes them now instead of at its next poll.
	wake func()
	now  func() time.Time
}

// NewService returns a Service that applies callbacks with applier (Guarded, except in the lab). lock
// may be nil (production's choice: no lock), sink (which is told every callback's outcome) too, and
// wake (called after each commit that may have inserted outbox rows: the in-process relay's Wake) too;
// the others must not be.
func NewService(db *gorm.DB, repo *orders.Repository, verifier paysig.Verifier, lock OrderLock, m *Metrics, applier Applier,
	sink decisions.Sink, wake func()) (*Service, error) {
	if db == nil || repo == nil || m == nil || len(verifier.Secret) == 0 || applier.apply == nil {
		return nil, errors.New("callback: NewService needs a db, an orders repository, metrics, a verifier secret and an applier")
	}
	return &Service{db: db, orders: repo, verifier: verifier, lock: lock, metrics: m, applier: applier, sink: sink,
		wake: wake, now: time.Now}, nil
}

// committed runs after a transaction of this service committed with outcome: an applied callback (or
// reconciliation) may have inserted outbox rows (a paid or refunded order's event), so it wakes the
// relay. Only after the commit: woken before, the relay would find nothing, and the rows would wait for
// its poll. An applied change that inserted none (a failed payment) costs the relay one empty drain.
func (s *Service) committed(outcome Outcome) {
	if s.wake != nil && outcome == OutcomeApplied {
		s.wake()
	}
}

// Handle verifies, checks and applies one callback. raw is the request body exactly as received;
// signature is the X-Pay-Signature header. It returns the outcome, or an error for a rejected callback:
// ErrSignature (401), problem.ErrMalformedBody or ErrInvalidCallback (400), orders.ErrOrderNotFound
// (404, so the platform retries), ErrAmountMismatch or ErrPaymentMismatch (400), orders.ErrRefundEventReused
// (422: a refund under an event id already recorded for another refund). Every callback is
// recorded in payment_callbacks, rejected ones included.
func (s *Service) Handle(ctx context.Context, signature string, raw []byte) (Outcome, error) {
	lg := logging.From(ctx)

	// 1. The signature covers the raw bytes, so it is checked before anything is decoded.
	if err := s.verifier.Verify(signature, raw); err != nil {
		var claimed Callback
		problem.DecodeClaimed(raw, &claimed) // for the audit row only: nothing here is trusted
		s.reject(ctx, lg, claimed, false, RejectedSignature, "signature: "+err.Error())
		return OutcomeRejected, ErrSignature.Wrap(err)
	}

	// 2. Parse and validate. Signed is not the same as storable: text PostgreSQL would refuse (a NUL, a
	// broken UTF-8 sequence) is cleaned here, once, so that no statement below can fail on it. The
	// fields are validated as they came: an id too long to store is refused, not cut, or two ids that
	// differ past the cut would count as one event.
	// Members the platform adds later are ignored; a field in another case or twice is refused, since
	// encoding/json would let either decide it (problem.DecodeJSONOpen).
	var cb Callback
	if err := problem.DecodeJSONOpen(raw, &cb); err != nil {
		var claimed Callback
		problem.DecodeClaimed(raw, &claimed) // for the audit row only
		s.reject(ctx, lg, claimed, true, RejectedMalformed, err.Error())
		return OutcomeRejected, err
	}
	orderID, err := validate(cb)
	cb = cb.cleaned()
	if err != nil {
		s.reject(ctx, lg, cb, true, RejectedMalformed, err.Error())
		return OutcomeRejected, err
	}
	lg = lg.With("event_id", cb.EventID, "order_id", orderID, "payment_id", cb.PaymentID, "callback_status", cb.Status)

	// 3. No lock: copies that read the order before the first copy committed wait on the order's row
	// lock in the conditional UPDATE, and each then finds the row already moved. Only the lab's S5 twin
	// takes a lock here.
	if s.lock != nil {
		if unlock, err := s.lock.Lock(ctx, orderID); err != nil {
			lg.Debug("lock unavailable; the database path alone decides", "err", err)
		} else {
			defer unlock()
		}
	}

	// 4. ONE transaction, opened with the order's read (one round trip for both). The order must exist
	// and the money must match it. Then the conditional UPDATE decides, and the side effects follow only
	// if it changed the row. The audit row commits with them, in the round trip of the COMMIT, but behind
	// a savepoint: it is a log, and a log that cannot be written must never roll the business change
	// back (nor make every resend fail the same way). If it could not be written there, it is written
	// after the commit.
	var o orders.Order
	var outcome Outcome
	var reason string
	auditLater := false
	// A second pass only when the first committed nothing because of the log alone (errAuditUnprepared):
	// the work runs once more, its audit row written after the commit.
	for auditInTx := true; ; auditInTx = false {
		err = pgtx.Run(ctx, s.db, func(t *pgtx.Tx) error {
			var err error
			if o, err = s.orders.BeginAndLookup(ctx, t, orderID); err != nil {
				return err
			}
			if !amountMatches(cb, o) {
				return ErrAmountMismatch
			}
			if !paymentMatches(cb, o) {
				return ErrPaymentMismatch
			}
			// A resend that arrives after its twin committed changes nothing and takes no row lock: an
			// order's status only moves forward, so if it already has the status this callback asks for,
			// nothing this callback could do would change it. Its audit row commits alone. (Skipping on a
			// stale read is safe here, acting on one would not be: the conditional UPDATE stays the only way
			// anything is applied.)
			if s.applier.resendFastPath && already(cb.Status, o.Status) {
				outcome, reason = OutcomeDuplicate, "already "+string(o.Status)
			} else if outcome, reason, err = s.applier.apply(s, ctx, t.Work, cb, o); err != nil {
				return err // pgtx.Run rolls the transaction back
			}
			if !auditInTx {
				auditLater = true
				return pgtx.CommitOutcome(t.Exec(ctx, "COMMIT"))
			}
			auditLater, err = commitWithAudit(ctx, t, lg, auditArgs(cb, orderID, true, outcome, reason))
			return err
		})
		if !auditInTx || !errors.Is(err, errAuditUnprepared) {
			break
		}
		lg.Warn("audit row could not be prepared in the transaction; applying the callback again with the row written after the commit", "err", err)
	}
	switch {
	case errors.Is(err, orders.ErrOrderNotFound):
		s.reject(ctx, lg, cb, true, RejectedUnknownOrder, "unknown order")
		return OutcomeRejected, err
	case errors.Is(err, ErrAmountMismatch):
		lg.Error("ALERT: payment callback amount or currency does not match the order",
			"alert", "amount_mismatch", "callback_amount_cents", cb.AmountCents, "callback_currency", cb.Currency,
			"order_amount_cents", o.AmountCents, "order_currency", o.Currency)
		s.reject(ctx, lg, cb, true, RejectedAmount, "amount or currency mismatch")
		return OutcomeRejected, err
	case errors.Is(err, ErrPaymentMismatch):
		lg.Error("ALERT: payment callback is for another payment than the order's",
			"alert", "payment_mismatch", "order_payment_id", *o.PaymentID)
		s.reject(ctx, lg, cb, true, RejectedPayment, "payment mismatch: the order's payment is "+*o.PaymentID)
		return OutcomeRejected, err
	case errors.Is(err, orders.ErrOtherPayment):
		// The order learnt its payment after this callback read it: a SUCCESS or FAILED of its own
		// committed in between (addRefunded, samePayment).
		lg.Error("ALERT: payment callback is for another payment than the order's",
			"alert", "payment_mismatch", "err", err)
		s.reject(ctx, lg, cb, true, RejectedPayment, "payment mismatch: "+err.Error())
		return OutcomeRejected, ErrPaymentMismatch.Wrap(err)
	case errors.Is(err, orders.ErrRefundEventReused):
		// Answered duplicate, this refund would be lost for good: the platform stops resending, and the
		// reconciler sets only a whole refund from the platform's records.
		var reused *problem.Error
		errors.As(err, &reused) // the case above matched: the chain holds it
		lg.Error("ALERT: a refund came under an event id already recorded for another refund",
			"alert", "event_id_reused", "err", reused.Err)
		s.reject(ctx, lg, cb, true, RejectedEventReused, "event id reused: "+reused.Err.Error())
		return OutcomeRejected, reused
	}
	if err != nil {
		// Rolled back: nothing was applied. The audit row goes in outside the failed transaction. A
		// transient failure (the order or product row stayed locked past DB_LOCK_TIMEOUT in a storm on one
		// product, a lost connection) becomes 503 with Retry-After: the platform resends, as it would anyway.
		// Unless the connection broke after the COMMIT went out: then the change and its audit row may
		// have committed, and this row must not claim otherwise. The resend finds out from the order.
		reason := "not applied: "
		if errors.Is(err, pgtx.ErrCommitUnknown) {
			reason = "outcome unknown (the answer to COMMIT was lost; a resend finds the order's state): "
		}
		s.reject(ctx, lg, cb, true, RejectedNotApplied, reason+err.Error())
		return OutcomeRejected, fmt.Errorf("apply callback %s: %w", cb.EventID, postgres.TranslateError(err))
	}
	s.committed(outcome)
	if strings.Contains(reason, overRefund) {
		lg.Error("ALERT: the platform's refunds of this payment exceed the amount paid", "alert", "over_refund",
			"refund_cents", cb.AmountCents, "order_amount_cents", o.AmountCents, "reason", reason)
	}
	if auditLater {
		s.audit(ctx, lg, cb, orderID, true, outcome, reason)
	}
	s.metrics.count(outcome)
	s.report(cb, orderID, outcome, reason)
	lg.Info("payment callback", "outcome", outcome, "reason", reason)
	return outcome, nil
}

// overRefund is in the audit reason of a REFUNDED event that took the order's refunds past the amount
// paid: the event is recorded with its amount, the order's total stops at the amount, and Handle logs
// an ALERT (alert=over_refund). The real platform refuses such a refund; a sender that makes one is
// broken or forged.
const overRefund = "refunds exceed the amount paid"

// errAuditRow marks the audit INSERT's failure inside commitWithAudit's batch.
var errAuditRow = errors.New("audit row not written")

// errAuditUnprepared marks a commitWithAudit that failed before anything in its batch ran, because
// the audit INSERT could not be prepared: nothing was committed, for the log's sake alone.
var errAuditUnprepared = errors.New("audit row could not be prepared")

// commitWithAudit commits the open transaction with its audit row (auditInsert's args) in one round
// trip: SAVEPOINT, the audit INSERT, COMMIT. If the INSERT fails, PostgreSQL skips the COMMIT queued
// behind it (pgtx), and the transaction waits, aborted, with the savepoint intact: a second round trip
// rolls back to the savepoint and commits the business change alone. It reports whether the audit row
// still has to be written (after the commit); an error means nothing was committed.
//
// pgx prepares a statement new to its connection before the batch runs, and preparing the INSERT takes
// the audit table's lock: a prepare that fails (the table locked past DB_LOCK_TIMEOUT by DDL such as
// CREATE INDEX, or gone) fails inside the transaction before the savepoint exists, and aborts the
// business change with it. That error is errAuditUnprepared, on which Handle applies the callback once
// more with the audit row after the commit (until 2026-12-07 it answered 503, and every resend on a new
// connection failed alike while the lock lasted: a DBA helper's finding).
func commitWithAudit(ctx context.Context, t *pgtx.Tx, lg *slog.Logger, args []any) (auditLater bool, err error) {
	err = t.Batch(ctx, func(b *pgx.Batch) {
		b.Queue("SAVEPOINT audit")
		b.Queue(auditInsert, args...)
		b.Queue("COMMIT")
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("audit savepoint: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%w: %w", errAuditRow, err)
		}
		_, err := br.Exec()
		return err
	})
	var unprepared pgx.ErrPreprocessingBatch
	if errors.As(err, &unprepared) && unprepared.SQL() == auditInsert {
		return false, fmt.Errorf("%w: %w", errAuditUnprepared, err)
	}
	if !errors.Is(err, errAuditRow) {
		return false, pgtx.CommitOutcome(err)
	}
	lg.Warn("audit row not written in the transaction; written after the commit", "err", err)
	if err := t.Exec(ctx, "ROLLBACK TO SAVEPOINT audit", "COMMIT"); err != nil {
		return false, fmt.Errorf("commit without the audit row: %w", pgtx.CommitOutcome(err))
	}
	return true, nil
}

// apply runs inside the callback transaction. It returns the outcome and a reason for the audit row.
func (s *Service) apply(ctx context.Context, tx *gorm.DB, cb Callback, o orders.Order) (Outcome, string, error) {
	return s.applyWithStock(ctx, tx, cb, o, s.orders.DecrementStock)
}

// stockStep takes quantity units of a product, reporting whether there were enough. The guarded step
// is orders.Repository.DecrementStock (one conditional UPDATE); lab scenario S5 swaps in its unsafe twin.
type stockStep func(ctx context.Context, tx *gorm.DB, productID int64, quantity int) (bool, error)

func (s *Service) applyWithStock(ctx context.Context, tx *gorm.DB, cb Callback, o orders.Order, decrement stockStep) (Outcome, string, error) {
	switch cb.Status {
	case StatusSuccess:
		return s.settleSuccess(ctx, tx, o, cb.PaymentID, decrement)
	case StatusFailed:
		return s.settleFailed(ctx, tx, o, cb.PaymentID)
	case StatusRefunded:
		// A refund is a fact about money, whatever the order's status: it is recorded once per event
		// (a resend adds nothing), and the order follows when the refunded total reaches its amount.
		fresh, over, err := s.orders.RecordRefund(ctx, tx, o.ID, cb.EventID, cb.PaymentID, cb.AmountCents)
		if err != nil {
			return "", "", err
		}
		refunded, err := s.settleRefunds(ctx, tx, o)
		if err != nil {
			return "", "", err
		}
		outcome, reason, err := refundOutcome(ctx, tx, s.orders, o, fresh, refunded)
		if over > 0 {
			reason = fmt.Sprintf("%s; %s by %d cents", reason, overRefund, over)
		}
		return outcome, reason, err
	}
	return "", "", fmt.Errorf("unreachable: status %q passed validation", cb.Status)
}

// settleSuccess applies "the payment succeeded" to order o: the callback's SUCCESS, and the reconciler's
// when the platform's query API says SUCCESS.
func (s *Service) settleSuccess(ctx context.Context, tx *gorm.DB, o orders.Order, paymentID string, decrement stockStep) (Outcome, string, error) {
	// One UPDATE decides the race: the row lock admits one writer at a time, and only the first still
	// finds PENDING or PAYING. Every other copy of this event sees 0 rows.
	paid, refundedCents, err := s.orders.Pay(ctx, tx, o.ID, paymentID)
	if err != nil {
		return "", "", err
	}
	if !paid {
		return s.afterLostSuccess(ctx, tx, o, paymentID)
	}
	if refundedCents > 0 {
		// Refunds recorded before the order knew its payment may be another payment's: the platform
		// can hold two for one order number. They are not this order's money.
		if refundedCents, err = s.ownRefunds(ctx, tx, o.ID, paymentID); err != nil {
			return "", "", err
		}
	}
	inStock, err := decrement(ctx, tx, o.ProductID, o.Quantity)
	if err != nil {
		return "", "", err
	}
	if !inStock {
		// The money is taken but the goods are gone (stock is checked at order time, deducted only now):
		// the order owes a refund, which the sweeper executes against the platform, unless the platform
		// has already refunded it in full (a refund that arrived before this SUCCESS). What it refunded in
		// part before this SUCCESS is not asked for again: the platform refuses a refund past what is
		// left, and the request would stay owed for ever.
		if _, err := s.orders.Transition(ctx, tx, o.ID, orders.StatusRefundRequired, ""); err != nil {
			return "", "", err
		}
		refunded, err := s.settleRefunds(ctx, tx, o)
		if err != nil {
			return "", "", err
		}
		if refunded {
			return OutcomeApplied, "paid, out of stock, and already refunded in full", nil
		}
		if err := refunds.Request(ctx, tx, o.ID, paymentID, o.AmountCents-refundedCents, "out_of_stock"); err != nil {
			return "", "", err
		}
		return OutcomeApplied, "paid, but out of stock: refund required", nil
	}
	ev := events.OrderPaid{EventID: uuid.NewString(), OrderID: o.ID, UserID: o.UserID,
		AmountCents: o.AmountCents, Points: events.PointsFor(o.AmountCents), OccurredAt: s.now().UTC()}
	if err := outbox.Insert(ctx, tx, ev.EventID, events.RoutingKeyOrderPaid, ev); err != nil {
		return "", "", err
	}
	// The platform may have refunded this payment before its SUCCESS reached us (a delayed delivery):
	// that refund was recorded then, and is owed now. Pay returned the refunded total, so the common
	// case (nothing refunded) costs no read.
	if refundedCents < o.AmountCents {
		return OutcomeApplied, "paid", nil
	}
	refunded, err := s.settleRefunds(ctx, tx, o)
	if err != nil {
		return "", "", err
	}
	if refunded {
		return OutcomeApplied, "paid, and refunded in full (the refund arrived first)", nil
	}
	return OutcomeApplied, "paid", nil
}

// ownRefunds is orders.Repository.OwnRefunds for order orderID, which has just learnt its payment
// paymentID, with the ALERT when it took other payments' refunds out of the order's total. It returns
// the order's refunded total (cents) and takes the order's row lock.
func (s *Service) ownRefunds(ctx context.Context, tx *gorm.DB, orderID int64, paymentID string) (int64, error) {
	refunded, other, err := s.orders.OwnRefunds(ctx, tx, orderID, paymentID)
	if err == nil && other != 0 {
		logging.From(ctx).Error("ALERT: refunds recorded before the order knew its payment were of another payment; "+
			"they do not count towards this order's", "alert", "refund_of_another_payment",
			"order_id", orderID, "payment_id", paymentID, "other_refunded_cents", other)
	}
	return refunded, err
}

// settleFailed applies "the payment failed" to order o. PENDING and PAYING may both fail: a decline can
// overtake the pay flow's own PENDING → PAYING.
func (s *Service) settleFailed(ctx context.Context, tx *gorm.DB, o orders.Order, paymentID string) (Outcome, string, error) {
	failed, refundedCents, err := s.orders.Fail(ctx, tx, o.ID, paymentID)
	if err != nil {
		return "", "", err
	}
	if !failed {
		return classify(ctx, tx, s.orders, o.ID, paymentID, orders.StatusFailed)
	}
	if refundedCents > 0 {
		// The order knows its payment now: another payment's refunds recorded before are not its own.
		if _, err := s.ownRefunds(ctx, tx, o.ID, paymentID); err != nil {
			return "", "", err
		}
	}
	return OutcomeApplied, "payment failed", nil
}

// settleRefunds moves order o to REFUNDED if its refunded total has reached its amount, and reports
// whether it did. Only a PAID order gets its stock and points back (REFUND_REQUIRED never took stock
// nor earned points); the conditional UPDATE PAID → REFUNDED makes that happen once, however many
// callbacks, resends and reconciler runs reach this point. Either way the order's refund requests are
// done: the money is back. Below the amount, a refund request not sent yet is capped at what is left
// (refunds.Cap): a refund recorded after the request was (an operator's at the platform, a partial
// refund whose callback came late) leaves less to refund than it asks for.
func (s *Service) settleRefunds(ctx context.Context, tx *gorm.DB, o orders.Order) (bool, error) {
	refunded, _, err := s.orders.Refunded(ctx, tx, o.ID)
	if err != nil {
		return false, err
	}
	if refunded < o.AmountCents {
		return false, refunds.Cap(ctx, tx, o.ID, o.AmountCents-refunded)
	}
	if err := refunds.CloseAll(ctx, tx, o.ID); err != nil {
		return false, err
	}
	fromPaid, err := s.orders.TransitionFrom(ctx, tx, o.ID, orders.StatusPaid, orders.StatusRefunded)
	if err != nil {
		return false, err
	}
	if fromPaid {
		// Compensation, in the transaction of the transition that guards it: the stock comes back, and
		// order.refunded asks points-consumer to reverse the credit (ledger key order-refunded:<id>).
		if err := s.orders.RestoreStock(ctx, tx, o.ProductID, o.Quantity); err != nil {
			return false, err
		}
		ev := events.OrderRefunded{EventID: uuid.NewString(), OrderID: o.ID, UserID: o.UserID,
			AmountCents: o.AmountCents, Points: events.PointsFor(o.AmountCents), OccurredAt: s.now().UTC()}
		if err := outbox.Insert(ctx, tx, ev.EventID, events.RoutingKeyRefunded, ev); err != nil {
			return false, err
		}
		return true, nil
	}
	return s.orders.TransitionFrom(ctx, tx, o.ID, orders.StatusRefundRequired, orders.StatusRefunded)
}

// refundOutcome names what a REFUNDED event did. fresh: its amount was counted now; refunded: the order
// became REFUNDED now.
func refundOutcome(ctx context.Context, tx *gorm.DB, repo *orders.Repository, o orders.Order, fresh, refunded bool) (Outcome, string, error) {
	if refunded {
		return OutcomeApplied, "refunded in full", nil
	}
	total, status, err := repo.Refunded(ctx, tx, o.ID)
	if err != nil {
		return "", "", err
	}
	switch {
	case !fresh:
		return OutcomeDuplicate, "refund event already recorded", nil
	case total < o.AmountCents:
		return OutcomeRecorded, fmt.Sprintf("partial refund: %d of %d cents refunded so far", total, o.AmountCents), nil
	case status == orders.StatusPending || status == orders.StatusPaying:
		return OutcomeRecorded, "refunded in full before its SUCCESS arrived: the SUCCESS will refund the order", nil
	}
	return OutcomeRecorded, "refunded in full; the order is " + string(status), nil
}

// afterLostSuccess handles a SUCCESS that changed nothing. If the order is already paid it is a resend.
// If the order had FAILED or been CANCELLED, the platform has nevertheless taken the money: the order
// stays as it is (the transition table has no way back) and a refund is recorded, idempotent on its
// refund_no, so the customer is never charged for an order they do not get.
func (s *Service) afterLostSuccess(ctx context.Context, tx *gorm.DB, o orders.Order, paymentID string) (Outcome, string, error) {
	current, payment, err := s.orders.StatusAndPayment(ctx, tx, o.ID)
	if err != nil {
		return "", "", err
	}
	if err := samePayment(o.ID, payment, paymentID); err != nil {
		return "", "", err
	}
	switch current {
	case orders.StatusPaid, orders.StatusRefundRequired, orders.StatusRefunded:
		return OutcomeDuplicate, "already " + string(current), nil
	case orders.StatusFailed, orders.StatusCancelled:
		// Only what the platform has not refunded yet is owed: refunds of this payment may have been
		// recorded before its SUCCESS arrived, and a request past what is left would be refused for ever.
		// OwnRefunds' UPDATE takes the row lock, which keeps a refund committing meanwhile from being
		// missed (only here: the copies of a SUCCESS that lost the race to PAID take no lock), and
		// counts this payment's refunds only.
		refunded, err := s.ownRefunds(ctx, tx, o.ID, paymentID)
		if err != nil {
			return "", "", err
		}
		rest := o.AmountCents - refunded
		if rest <= 0 {
			return OutcomeStale, "success for a " + string(current) + " order: already refunded in full", nil
		}
		if err := refunds.Request(ctx, tx, o.ID, paymentID, rest, "success_after_"+strings.ToLower(string(current))); err != nil {
			return "", "", err
		}
		return OutcomeStale, "success for a " + string(current) + " order: refund requested", nil
	}
	return OutcomeStale, "order is " + string(current), nil
}

// already reports whether an order in status has already done what a callback with cbStatus asks.
// Never for a REFUNDED event: a refund is a fact about money, recorded once per event, and an order's
// status cannot tell a resend from a further refund (one past the amount paid, which must be recorded
// and alerted) without reading its refund events. Refunds are rare; apply's INSERT … ON CONFLICT on
// the event id answers a resend.
func already(cbStatus string, status orders.Status) bool {
	switch cbStatus {
	case StatusSuccess:
		return status == orders.StatusPaid || status == orders.StatusRefundRequired || status == orders.StatusRefunded
	case StatusFailed:
		return status == orders.StatusFailed
	}
	return false
}

// samePayment is paymentMatches again, on the order's payment as it is now (orders.ErrOtherPayment if
// it is another). A callback passes paymentMatches on the order it read before its transition; when the
// transition then changes nothing, another payment's SUCCESS or FAILED may have committed in between
// (the two raced), and this callback is about money that is not the order's: a SUCCESS of it must not
// pass as a resend, nor ask back a refund of the wrong payment and recount the order's refunds by it.
func samePayment(id int64, orderPayment, paymentID string) error {
	if orderPayment != "" && orderPayment != paymentID {
		return fmt.Errorf("order %d's payment is %s, not %s: %w", id, orderPayment, paymentID, orders.ErrOtherPayment)
	}
	return nil
}

// classify names a callback that changed nothing: a duplicate if the order already has the status the
// callback asked for, otherwise stale (e.g. a FAILED that arrives after the SUCCESS); another payment's
// is orders.ErrOtherPayment (samePayment).
func classify(ctx context.Context, tx *gorm.DB, repo *orders.Repository, id int64, paymentID string, target orders.Status) (Outcome, string, error) {
	current, payment, err := repo.StatusAndPayment(ctx, tx, id)
	if err != nil {
		return "", "", err
	}
	if err := samePayment(id, payment, paymentID); err != nil {
		return "", "", err
	}
	if current == target {
		return OutcomeDuplicate, "already " + string(current), nil
	}
	return OutcomeStale, "order is " + string(current), nil
}

// invalid is ErrInvalidCallback whose detail says what is wrong: the platform's engineers read it in
// their delivery log (until 2026-12-06 it was "the callback is invalid", the cause in our log alone).
func invalid(format string, args ...any) error {
	return ErrInvalidCallback.WithDetail("the callback is invalid: " + fmt.Sprintf(format, args...))
}

func validate(cb Callback) (int64, error) {
	// An id of white space alone is as good as none: no platform makes one, and " " and "  " would be
	// two events.
	var missing []string
	if strings.TrimSpace(cb.EventID) == "" {
		missing = append(missing, "event_id")
	}
	if strings.TrimSpace(cb.PaymentID) == "" {
		missing = append(missing, "payment_id")
	}
	if len(missing) > 0 {
		return 0, invalid("missing %s", strings.Join(missing, ", "))
	}
	// The stored form is measured, not the one received: cleaning turns each NUL (1 byte) into U+FFFD
	// (3 bytes), and an id that grew past the limit would be cut, so two ids that differ only past the
	// cut would count as one event.
	if len(pgtext.Clean(cb.EventID, 0)) > callbackIDMax || len(pgtext.Clean(cb.PaymentID, 0)) > callbackIDMax {
		return 0, invalid("event_id and payment_id must be at most %d bytes as stored "+
			"(a NUL or an invalid byte is stored as U+FFFD, 3 bytes)", callbackIDMax)
	}
	switch cb.Status {
	case StatusSuccess, StatusFailed, StatusRefunded:
	default:
		return 0, invalid("unknown status %q: want %s, %s or %s", logging.Clip(cb.Status), StatusSuccess, StatusFailed, StatusRefunded)
	}
	id, ok := orders.ParseID(cb.MerchantOrderNo)
	if !ok {
		return 0, invalid("merchant_order_no %q is not an order id", logging.Clip(cb.MerchantOrderNo))
	}
	return id, nil
}

// amountMatches: SUCCESS and FAILED carry the payment's amount, which must equal the order's; REFUNDED
// carries the refunded amount, which may be partial but never more than was paid.
func amountMatches(cb Callback, o orders.Order) bool {
	if cb.Currency != o.Currency {
		return false
	}
	if cb.Status == StatusRefunded {
		return cb.AmountCents > 0 && cb.AmountCents <= o.AmountCents
	}
	return cb.AmountCents == o.AmountCents
}

// paymentMatches: once the order knows its payment (the first SUCCESS or FAILED stored it), every event
// must be about that payment. The platform keeps one payment per order (idempotent on
// merchant_order_no), so another payment's event comes from a broken or forged sender: applied, its
// refund would refund this order while the platform refunded something else, and its SUCCESS would pass
// as a resend while a second charge went unnoticed. Before the order knows its payment (a refund that
// arrives before its SUCCESS) there is nothing to compare with.
func paymentMatches(cb Callback, o orders.Order) bool {
	return o.PaymentID == nil || *o.PaymentID == cb.PaymentID
}

// reject records a refused callback and counts it under why; reason is the audit row's and the log's.
func (s *Service) reject(ctx context.Context, lg *slog.Logger, cb Callback, sigOK bool, why Rejection, reason string) {
	// The reason may quote the sender's value (a time that does not parse, twice): a signed callback
	// with a 500 kB occurred_at made a 1 MB log line (a helper's finding, 2026-12-06).
	reason = logging.Clip(reason)
	s.metrics.reject(why)
	var orderID int64
	if id, ok := orders.ParseID(cb.MerchantOrderNo); ok {
		orderID = id
	}
	s.audit(ctx, lg, cb, orderID, sigOK, OutcomeRejected, reason)
	s.report(cb, orderID, OutcomeRejected, reason)
	lg.Warn("payment callback rejected", "rejected", why, "reason", reason, "signature_ok", sigOK)
}

// report tells the sink (the lab's live view) what this callback did; the bus numbers its copies.
func (s *Service) report(cb Callback, orderID int64, outcome Outcome, reason string) {
	decisions.Emit(s.sink, decisions.Decision{Type: decisions.TypeCallback, Outcome: string(outcome),
		EventID: cb.EventID, OrderID: orderID, Guard: s.applier.String(), Detail: reason})
}

// audit inserts the audit row on its own, outside any business transaction, and only logs a failure:
// the business tables are the truth, the audit is what an operator reads ("3 received, 1 applied").
// It outlives a sender that hung up (the request's cancellation, not its deadline): the row of a
// callback that waited on the database and whose sender gave up went in under a cancelled context and
// was lost, and the audit counted fewer callbacks than the platform sent (2026-12-06).
func (s *Service) audit(ctx context.Context, lg *slog.Logger, cb Callback, orderID int64, sigOK bool, outcome Outcome, reason string) {
	actx := context.WithoutCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadline(actx, deadline)
		defer cancel()
	}
	if err := record(actx, s.db, cb, orderID, sigOK, outcome, reason); err != nil {
		lg.Error("record payment callback audit row", "err", err, "outcome", outcome)
	}
}

// callbackIDMax bounds event_id and payment_id (bytes), which are stored in business tables.
const callbackIDMax = 200

// IDMaxBytes is callbackIDMax for other packages: the replay loader refuses a recorded id that its run's
// prefix would take past it (replay.MaxIDBytes is the same number, checked by a test).
const IDMaxBytes = callbackIDMax

// cleaned returns cb with its text made storable (pgtext.Clean). A signed callback is trusted, but
// PostgreSQL still refuses a NUL or broken UTF-8, and would refuse it again on every resend.
func (cb Callback) cleaned() Callback {
	cb.EventID = pgtext.Clean(cb.EventID, callbackIDMax)
	cb.PaymentID = pgtext.Clean(cb.PaymentID, callbackIDMax)
	cb.MerchantOrderNo = pgtext.Clean(cb.MerchantOrderNo, callbackIDMax)
	cb.Status = pgtext.Clean(cb.Status, callbackIDMax)
	cb.Currency = pgtext.Clean(cb.Currency, callbackIDMax)
	return cb
}

// String is the applier's name, for logs: "guarded", "s1-no-state-guard", ...
func (a Applier) String() string { return a.name }
