package callback

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"idemshop/internal/platform/pgtext"
)

// The audit of callbacks: payment_callbacks is written here and read here only. It is a log, never the
// truth (the business tables are): an operator reads "3 received, 1 applied" from it.

// auditTextMax bounds each text column of an audit row (bytes): the body may come from anyone.
const auditTextMax = 200

// record inserts the audit row. Every text goes through pgtext.Clean: a forged body with a NUL in it
// must still leave its row.
func record(ctx context.Context, db *gorm.DB, cb Callback, orderID int64, sigOK bool, outcome Outcome, reason string) error {
	var oid *int64
	if orderID > 0 {
		oid = &orderID
	}
	clip := func(v string) string { return pgtext.Clean(v, auditTextMax) }
	err := db.WithContext(ctx).Exec(`INSERT INTO payment_callbacks
		(event_id, payment_id, order_id, status, amount_cents, currency, signature_ok, applied, outcome, reason)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		clip(cb.EventID), clip(cb.PaymentID), oid, clip(cb.Status), cb.AmountCents, clip(cb.Currency),
		sigOK, outcome == OutcomeApplied, outcome, clip(reason)).Error
	if err != nil {
		return fmt.Errorf("record callback: %w", err)
	}
	return nil
}

// Counts returns how many payment callbacks with a valid signature were received for order id, and how
// many of them were applied. The order page shows them (orders.CallbackCounter).
func (s *Service) Counts(ctx context.Context, id int64) (received, applied int64, err error) {
	row := s.db.WithContext(ctx).Raw(`SELECT count(*), count(*) FILTER (WHERE applied)
		FROM payment_callbacks WHERE order_id = ? AND signature_ok`, id).Row()
	if err := row.Scan(&received, &applied); err != nil {
		return 0, 0, fmt.Errorf("count callbacks of order %d: %w", id, err)
	}
	return received, applied, nil
}
