package callback

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"idemshop/internal/orders"
	"idemshop/internal/payclient"
	"idemshop/internal/platform/pgtx"
)

// Reconciliation: the platform's records are the truth about money, and callbacks are only its news. A
// callback can be lost (retries exhausted while the shop was down), be answered before the order could
// take it, or never be sent; a pay answer can be lost on the wire. So, like any shop that takes real
// payments, idemshop compares its orders with the platform's query API and applies the difference
// through the very steps a callback takes (settleSuccess, settleFailed, settleRefunds): the guards
// stay in one place, and a reconciler that runs twice, or races a callback, changes nothing twice.

// ApplyPayment applies what the platform says of order o's payment, inside the caller's tx, through the callbacks'
// guarded steps. PENDING at the platform changes nothing. It returns the outcome (applied when the
// order's status changed) and a reason.
func (s *Service) ApplyPayment(ctx context.Context, tx *gorm.DB, o orders.Order, pay payclient.Payment) (Outcome, string, error) {
	if pay.AmountCents != o.AmountCents || pay.Currency != o.Currency {
		return OutcomeRejected, "", ErrAmountMismatch.Wrap(fmt.Errorf("platform payment %s is %d %s, order %d is %d %s",
			pay.ID, pay.AmountCents, pay.Currency, o.ID, o.AmountCents, o.Currency))
	}
	switch pay.Status {
	case StatusSuccess:
		return s.settleSuccess(ctx, tx, o, pay.ID, s.orders.DecrementStock)
	case StatusFailed:
		return s.settleFailed(ctx, tx, o, pay.ID)
	case StatusRefunded:
		// REFUNDED at the platform means it succeeded first and came back in full: record the whole
		// refund, then the SUCCESS (which refunds the order at once if it pays it now), then the refund
		// (for an order that was already PAID). The whole refund goes first so that a SUCCESS on a
		// FAILED or out-of-stock order asks for no refund the platform has already made.
		if err := s.orders.RecordFullRefund(ctx, tx, o.ID); err != nil {
			return "", "", err
		}
		outcome, reason, err := s.settleSuccess(ctx, tx, o, pay.ID, s.orders.DecrementStock)
		if err != nil {
			return "", "", err
		}
		// Again: a SUCCESS that taught the order its payment took other payments' refunds out of the
		// total (OwnRefunds), and the whole refund recorded above with them. The platform's word stands.
		if err := s.orders.RecordFullRefund(ctx, tx, o.ID); err != nil {
			return "", "", err
		}
		refunded, err := s.settleRefunds(ctx, tx, o)
		if err != nil {
			return "", "", err
		}
		if refunded {
			return OutcomeApplied, "refunded in full", nil
		}
		return outcome, reason, nil
	}
	return OutcomeDuplicate, "payment is " + pay.Status + " at the platform", nil
}

// Reconcile applies the platform's view of order o's payment in its own transaction. See ApplyPayment.
// An error of the COMMIT itself that may have committed all the same (its answer lost) is
// pgtx.ErrCommitUnknown.
func (s *Service) Reconcile(ctx context.Context, o orders.Order, pay payclient.Payment) (Outcome, string, error) {
	var outcome Outcome
	var reason string
	applied := false // the work ran to its end: a failure after it is the COMMIT's
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		outcome, reason, err = s.ApplyPayment(ctx, tx, o, pay)
		applied = err == nil
		return err
	})
	if err == nil {
		s.committed(outcome)
	} else if applied {
		err = pgtx.CommitOutcome(err)
	}
	return outcome, reason, err
}
