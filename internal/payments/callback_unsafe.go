package payments

// LAB ONLY — the triple-callback incident (lab scenario S1), as the naive handler was written: no state
// guard. Every copy of a "payment succeeded" callback marks the order paid, deducts the stock and
// credits the points, so three copies deduct and credit three times. Mounted only with ORDERS_LAB=true,
// at POST /lab/unsafe/payments/callback. Compare applyUnsafe with apply in callback.go: the guard is the
// `WHERE status IN (...)` of Transition, and what happens only when it changed a row.

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"idemshop/internal/events"
	"idemshop/internal/orders"
)

// HandleUnsafe is Handle without the state-machine guard. Signature, parsing, amount checks and the
// audit row are the same.
func (s *Service) HandleUnsafe(ctx context.Context, signature string, raw []byte) (Outcome, error) {
	return s.handle(ctx, signature, raw, s.applyUnsafe, false)
}

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
