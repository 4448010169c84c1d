// Package invariants checks, on the database rows themselves, that duplicates changed nothing twice:
// each paid order paid once, stock deducted once, one order.paid event, points credited once. The lab
// (loadtest) and the end-to-end tests share these checks.
package invariants

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// Violation is one broken invariant.
type Violation struct {
	Check   string `json:"check"`
	Subject string `json:"subject"`
	Detail  string `json:"detail"`
}

func (v Violation) String() string { return v.Check + " " + v.Subject + ": " + v.Detail }

// OrderFacts is what the database says about one order.
type OrderFacts struct {
	ID                int64
	UserID            int64
	ProductID         int64
	Quantity          int64
	AmountCents       int64
	Status            string
	OutboxRows        int64 // order.paid events
	PublishedRows     int64 // of which the relay has published
	LedgerRows        int64 // points ledger rows for order-paid:<id>
	CallbacksReceived int64 // with a valid signature
	CallbacksApplied  int64
}

// Load reads the facts of the given orders.
func Load(ctx context.Context, db *gorm.DB, ids []int64) ([]OrderFacts, error) {
	var out []OrderFacts
	err := db.WithContext(ctx).Raw(`
		SELECT o.id, o.user_id, o.product_id, o.quantity, o.amount_cents, o.status,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.paid' AND (x.payload->>'order_id')::bigint = o.id) AS outbox_rows,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.paid' AND (x.payload->>'order_id')::bigint = o.id
		     AND x.published_at IS NOT NULL) AS published_rows,
		  (SELECT count(*) FROM points_ledger l WHERE l.biz_id = 'order-paid:' || o.id) AS ledger_rows,
		  (SELECT count(*) FROM payment_callbacks c WHERE c.order_id = o.id AND c.signature_ok) AS callbacks_received,
		  (SELECT count(*) FROM payment_callbacks c WHERE c.order_id = o.id AND c.applied) AS callbacks_applied
		FROM orders o WHERE o.id IN ? ORDER BY o.id`, ids).Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("load order facts: %w", err)
	}
	return out, nil
}

// PaidOnce checks that every order is PAID, had exactly one callback applied and one order.paid event,
// and (when withPoints) exactly one points credit.
func PaidOnce(facts []OrderFacts, withPoints bool) []Violation {
	var vs []Violation
	for _, f := range facts {
		subject := fmt.Sprintf("order %d", f.ID)
		if f.Status != "PAID" {
			vs = append(vs, Violation{"order paid", subject, "status " + f.Status})
		}
		if f.CallbacksApplied != 1 {
			vs = append(vs, Violation{"callback applied once", subject, fmt.Sprintf("%d applied of %d received", f.CallbacksApplied, f.CallbacksReceived)})
		}
		if f.OutboxRows != 1 {
			vs = append(vs, Violation{"one order.paid event", subject, fmt.Sprintf("%d outbox rows", f.OutboxRows)})
		}
		if withPoints && f.LedgerRows != 1 {
			vs = append(vs, Violation{"points credited once", subject, fmt.Sprintf("%d ledger rows", f.LedgerRows)})
		}
	}
	return vs
}

// Stock checks that product productID went from initial down by exactly wantDelta units, and is not
// negative.
func Stock(ctx context.Context, db *gorm.DB, productID, initial, wantDelta int64) (int64, []Violation, error) {
	var stock int64
	if err := db.WithContext(ctx).Raw(`SELECT stock FROM products WHERE id = ?`, productID).Scan(&stock).Error; err != nil {
		return 0, nil, fmt.Errorf("read stock: %w", err)
	}
	var vs []Violation
	subject := fmt.Sprintf("product %d", productID)
	if got := stock - initial; got != wantDelta {
		vs = append(vs, Violation{"stock deducted once", subject, fmt.Sprintf("delta %d, want %d", got, wantDelta)})
	}
	if stock < 0 {
		vs = append(vs, Violation{"stock never negative", subject, fmt.Sprintf("stock %d", stock)})
	}
	return stock - initial, vs, nil
}

// Balance returns a user's points balance (0 without an account).
func Balance(ctx context.Context, db *gorm.DB, userID int64) (int64, error) {
	var b int64
	err := db.WithContext(ctx).Raw(`SELECT COALESCE((SELECT balance FROM points_accounts WHERE user_id = ?), 0)`, userID).Scan(&b).Error
	if err != nil {
		return 0, fmt.Errorf("read balance: %w", err)
	}
	return b, nil
}

// Points checks that userID's balance is want.
func Points(ctx context.Context, db *gorm.DB, userID, want int64) (int64, []Violation, error) {
	b, err := Balance(ctx, db, userID)
	if err != nil {
		return 0, nil, err
	}
	if b != want {
		return b, []Violation{{"points credited once", fmt.Sprintf("user %d", userID), fmt.Sprintf("balance %d, want %d", b, want)}}, nil
	}
	return b, nil, nil
}
