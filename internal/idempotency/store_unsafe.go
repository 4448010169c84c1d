package idempotency

// LAB ONLY — the stale holder's late write (lab scenario S8): the record's final write without the
// fencing token. A holder that was paused past its lease (a GC pause, a stuck call) and replaced by a
// newer holder (a retry or the sweeper) wakes up and writes its old result over the newer one: a
// COMPLETED payment turns back into FAILED_RETRYABLE, the key answers a failure for a payment that was
// made, and the next retry runs the pay again. In a flow with no other check that retry pays twice;
// here the retry's reread of the order (hasItsPayment in internal/pay) and the platform's idempotency on
// merchant_order_no still stop a second charge: the fence is the first of three layers. Used only by the lab.
// Compare FinishUnfenced with Finish in store.go: the guard is `AND state = 'PROCESSING' AND fence <= $token`
// in the WHERE clause, so a write from an older token affects no row however late it arrives.

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// FinishUnfenced is Finish as written by a holder that trusts its lock: it carries no token, and
// overwrites whatever the record holds.
func (st *Store) FinishUnfenced(ctx context.Context, tx *gorm.DB, id int64, state State, status int, body []byte) error {
	if state == StateProcessing {
		return errors.New("idempotency: Finish needs a final state")
	}
	// No "AND state = 'PROCESSING' AND fence <= ?": the row is ours because we once held the lock.
	res := tx.WithContext(ctx).Exec(`UPDATE idempotency_keys
		SET state = ?, response_status = ?, response_body = ?, locked_until = NULL, updated_at = now()
		WHERE id = ?`,
		state, status, body, id)
	if res.Error != nil {
		return fmt.Errorf("unsafe: finish idempotency record %d: %w", id, res.Error)
	}
	return nil
}
