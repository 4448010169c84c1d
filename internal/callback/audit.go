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

// auditInsert is the audit row's INSERT, with pgx's positional parameters: record sends it on its own,
// commitWithAudit in the batch that commits the callback's transaction.
const auditInsert = `INSERT INTO payment_callbacks
	(event_id, payment_id, order_id, status, amount_cents, currency, signature_ok, applied, outcome, reason)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// auditArgs are auditInsert's parameters. Every text goes through pgtext.Clean: a forged body with a
// NUL in it must still leave its row.
func auditArgs(cb Callback, orderID int64, sigOK bool, outcome Outcome, reason string) []any {
	var oid *int64
	if orderID > 0 {
		oid = &orderID
	}
	clip := func(v string) string { return pgtext.Clean(v, auditTextMax) }
	return []any{clip(cb.EventID), clip(cb.PaymentID), oid, clip(cb.Status), cb.AmountCents, clip(cb.Currency),
		sigOK, outcome == OutcomeApplied, string(outcome), clip(reason)}
}

// record inserts the audit row on its own (database/sql under db, which takes auditInsert's $n
// parameters as they are).
func record(ctx context.Context, db *gorm.DB, cb Callback, orderID int64, sigOK bool, outcome Outcome, reason string) error {
	if _, err := db.Statement.ConnPool.ExecContext(ctx, auditInsert, auditArgs(cb, orderID, sigOK, outcome, reason)...); err != nil {
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
