package callback

// LAB ONLY — the triple-callback incident (lab scenario S1), as the naive handler was written: no state
// guard. Every copy of a "payment succeeded" callback marks the order paid, deducts the stock and
// credits the points, so three copies deduct and credit three times. The assembly mounts a service with
// this applier only with ORDERS_LAB=true, at POST /lab/unsafe/payments/callback. Compare applyUnsafe with
// apply in callback.go: the guard is the `WHERE status IN (...)` of Transition, and what happens only
// when it changed a row.

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"idemshop/internal/events"
	"idemshop/internal/orders"
)

// NoStateGuard is the S1 applier: no state guard, and no resend fast path (itself a guard). Signature,
// parsing, amount checks and the audit row are the same as Guarded's.
var NoStateGuard = Applier{name: "s1-no-state-guard", apply: (*Service).applyUnsafe}

func (s *Service) applyUnsafe(ctx context.Context, tx *gorm.DB, cb Callback, o orders.Order) (Outcome, string, error) {
	if cb.Status != StatusSuccess {
		return OutcomeStale, "the unsafe handler only knows SUCCESS", nil
	}
	db := tx.WithContext(ctx)
	// No "AND status IN ('PENDING','PAYING')": the update always "succeeds".
	if err := db.Exec(`UPDATE orders SET status = 'PAID', payment_id = COALESCE(payment_id, ?), updated_at = now()
		WHERE id = ?`, cb.PaymentID, o.ID).Error; err != nil {
		return "", "", fmt.Errorf("unsafe: mark paid: %w", err)
	}
	// No "AND stock >= quantity", and run for every copy.
	if err := db.Exec(`UPDATE products SET stock = stock - ? WHERE id = ?`, o.Quantity, o.ProductID).Error; err != nil {
		return "", "", fmt.Errorf("unsafe: deduct stock: %w", err)
	}
	// Points straight from the handler, keyed by nothing that repeats: every copy credits.
	pts := events.PointsFor(o.AmountCents)
	if err := db.Exec(`INSERT INTO points_ledger (user_id, biz_id, delta, reason)
		VALUES (?, 'unsafe-callback:' || gen_random_uuid(), ?, 'order_paid')`, o.UserID, pts).Error; err != nil {
		return "", "", fmt.Errorf("unsafe: ledger: %w", err)
	}
	if err := db.Exec(`INSERT INTO points_accounts (user_id, balance) VALUES (?, ?)
		ON CONFLICT (user_id) DO UPDATE SET balance = points_accounts.balance + EXCLUDED.balance, updated_at = now()`,
		o.UserID, pts).Error; err != nil {
		return "", "", fmt.Errorf("unsafe: balance: %w", err)
	}
	return OutcomeApplied, "unsafe: applied without a guard", nil
}

// LAB ONLY — a refund delivered before the SUCCESS it refunds (lab scenario S12), as the handler was
// before refunds became facts. The platform refunds a payment and its REFUNDED event overtakes the
// SUCCESS (a delayed delivery, a resend after a timeout): the order is still PENDING or PAYING. The old
// rule honoured a refund only as a move of a PAID order to REFUNDED and answered anything else 200
// "stale", so the refund was acknowledged (the platform never sends it again) and recorded nowhere.
// The SUCCESS that follows then marks the order PAID, takes the stock and credits the points, and
// nothing is left to give them back: the customer has their money and the goods. Mounted only with
// ORDERS_LAB=true, at POST /lab/unsafe/s12/payments/callback. Compare applyEarlyRefundUnsafe with
// applyWithStock in callback.go: the only difference is the status check in front of the refund; the
// guarded handler records every refund whatever the order's status (order_refund_events,
// orders.refunded_cents), and settleSuccess refunds the order when it finds that refund there.

// DropEarlyRefund is the S12 applier: Guarded with the pre-fix refund rule. Signature, parsing, amount
// checks, the resend fast path and the audit row are the same.
var DropEarlyRefund = Applier{name: "s12-drop-early-refund", apply: (*Service).applyEarlyRefundUnsafe, resendFastPath: true}

// applyEarlyRefundUnsafe drops a REFUNDED event for an order that is neither PAID nor REFUND_REQUIRED:
// 200 "stale", nothing recorded. Every other event goes through the guarded steps of apply.
func (s *Service) applyEarlyRefundUnsafe(ctx context.Context, tx *gorm.DB, cb Callback, o orders.Order) (Outcome, string, error) {
	if cb.Status == StatusRefunded {
		current, err := s.orders.Status(ctx, tx, o.ID)
		if err != nil {
			return "", "", err
		}
		// The missing guard: a refund is a fact about money, not a transition that needs the right
		// status. Here it is treated as one, and a refund that came early is lost.
		if current != orders.StatusPaid && current != orders.StatusRefundRequired {
			return OutcomeStale, "unsafe: refund for a " + string(current) + " order dropped", nil
		}
	}
	return s.apply(ctx, tx, cb, o)
}
