// Package refunds is the one home of refund_requests: a refund the shop owes is recorded in the
// transaction of the change that owes it (Request), sent to the platform later by the Executor, marked
// REQUESTED once the platform has it, and DONE when the platform's REFUNDED events add up to the order
// (CloseAll). Refunds are facts, beside the ladder (docs/design.md): each is recorded once, by its
// refund_no, and the platform is idempotent on the same number, so a crash anywhere still makes one refund.
package refunds

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"
)

// No is the refund number of an order's refund. One per order, so that recording it twice (a duplicate
// callback) and asking the platform twice (a crash between the call and MarkRequested) both stay one
// refund.
func No(orderID int64) string { return "order-" + strconv.FormatInt(orderID, 10) + "-refund" }

// Request records that order orderID owes a refund of amountCents of payment paymentID, inside the
// caller's transaction tx, so that it commits with the change that owes it. reason is free text for an
// operator ("out_of_stock", "success_after_failed"). Recording it again is a no-op.
func Request(ctx context.Context, tx *gorm.DB, orderID int64, paymentID string, amountCents int64, reason string) error {
	err := tx.WithContext(ctx).Exec(`INSERT INTO refund_requests (order_id, payment_id, refund_no, amount_cents, reason)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (refund_no) DO NOTHING`,
		orderID, paymentID, No(orderID), amountCents, reason).Error
	if err != nil {
		return fmt.Errorf("record refund request for order %d: %w", orderID, err)
	}
	return nil
}

// CloseAll marks every open refund request of order orderID DONE, inside tx: the platform's refunds
// have reached the order's amount, so the money is back whoever asked for it.
func CloseAll(ctx context.Context, tx *gorm.DB, orderID int64) error {
	if err := tx.WithContext(ctx).Exec(`UPDATE refund_requests SET status = 'DONE', updated_at = now()
		WHERE order_id = ? AND status <> 'DONE'`, orderID).Error; err != nil {
		return fmt.Errorf("close refund requests of order %d: %w", orderID, err)
	}
	return nil
}

// Cap lowers every PENDING refund request of order orderID to restCents, the part of the payment the
// platform has not refunded yet, inside the caller's transaction tx (the one that recorded a refund).
// The platform refuses a refund past what is left (refund_exceeds_payment), so a request still asking
// for what was owed when it was recorded, after a refund that came since (an operator's at the
// platform, a partial refund whose callback came late), would be refused for ever, and its order would
// stay REFUND_REQUIRED. A capped request is due at once and its waits start over: the refusals it had
// were of the larger amount (and one of that amount still on its way is not counted: Refused). A
// request already sent (REQUESTED) is the platform's to finish, and is left as it is.
func Cap(ctx context.Context, tx *gorm.DB, orderID, restCents int64) error {
	if err := tx.WithContext(ctx).Exec(`UPDATE refund_requests SET amount_cents = ?, refusals = 0, next_attempt_at = now(), updated_at = now()
		WHERE order_id = ? AND status = 'PENDING' AND amount_cents > ?`, restCents, orderID, restCents).Error; err != nil {
		return fmt.Errorf("cap refund requests of order %d at %d cents: %w", orderID, restCents, err)
	}
	return nil
}

// Pending is a refund request not yet sent to the platform. AmountCents is in the order's minor units;
// Refusals is how many times the platform refused it so far.
type Pending struct {
	ID          int64
	OrderID     int64
	PaymentID   string
	RefundNo    string
	AmountCents int64
	Refusals    int
}

// ListPending returns up to limit PENDING refund requests that are due, the one left alone longest
// first (updated_at, then id). A request the platform did not answer is postponed (Postpone): it stays
// owed, behind the others, so that a batch's worth of such requests at the head cannot keep the ones
// after them from ever being sent. A refused one (Refused) is also not due until its next attempt.
func ListPending(ctx context.Context, db *gorm.DB, limit int) ([]Pending, error) {
	var reqs []Pending
	err := db.WithContext(ctx).Raw(`SELECT id, order_id, payment_id, refund_no, amount_cents, refusals
		FROM refund_requests WHERE status = 'PENDING' AND next_attempt_at <= now()
		ORDER BY updated_at, id LIMIT ?`, limit).Scan(&reqs).Error
	if err != nil {
		return nil, fmt.Errorf("list refund requests: %w", err)
	}
	return reqs, nil
}

// Postpone puts PENDING refund request id at the back of ListPending's order and counts one more send
// the platform left unanswered; it stays PENDING, to be sent again on a later sweep. unanswered is the
// count with this one (0 if the request is no longer PENDING).
func Postpone(ctx context.Context, db *gorm.DB, id int64, refundNo string) (unanswered int, err error) {
	if err := db.WithContext(ctx).Raw(`UPDATE refund_requests SET updated_at = clock_timestamp(), unanswered = unanswered + 1
			WHERE id = ? AND status = 'PENDING' RETURNING unanswered`, id).Scan(&unanswered).Error; err != nil {
		return 0, fmt.Errorf("postpone refund %s: %w", refundNo, err)
	}
	return unanswered, nil
}

// MarkUnansweredAlerted records that the unanswered sends of refund request id were alerted, and
// reports whether this call did: one caller gets true, whichever sweeper (replicas, `sweep --once`)
// and whatever its SWEEP_MAX_ATTEMPTS. A count compared for equality alone would skip a request whose
// count was past a threshold lowered since (a hands-on verifier's finding, 2026-12-07).
func MarkUnansweredAlerted(ctx context.Context, db *gorm.DB, id int64, refundNo string) (first bool, err error) {
	res := db.WithContext(ctx).Exec(`UPDATE refund_requests SET unanswered_alerted = true
			WHERE id = ? AND NOT unanswered_alerted`, id)
	if res.Error != nil {
		return false, fmt.Errorf("record the alert of unanswered refund %s: %w", refundNo, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// CountUnansweredAlerted counts the refund requests still owed (PENDING) whose unanswered sends were
// alerted (MarkUnansweredAlerted).
func CountUnansweredAlerted(ctx context.Context, db *gorm.DB) (int64, error) {
	var n int64
	if err := db.WithContext(ctx).Raw(`SELECT count(*) FROM refund_requests
		WHERE status = 'PENDING' AND unanswered_alerted`).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count unanswered refund requests: %w", err)
	}
	return n, nil
}

// Refused records that the platform refused PENDING refund request id once more: it stays owed, and
// is not due again before wait has passed (RetryPolicy.After), behind the others. seen and sentCents
// are the refusal count and the amount the caller read with the request (Pending.Refusals,
// Pending.AmountCents), and the row moves only if it still has both:
//   - when two sweepers (replicas, or `sweep --once` beside one) sent the same request in one round,
//     its refusal is counted, and alerted, once;
//   - when the request was capped while it was being sent (Cap: a refund recorded meanwhile), the
//     refusal was of the old amount, and the capped request stays due at once.
//
// recorded is false for the sweeper that came second, and for a refusal of an amount since capped.
func Refused(ctx context.Context, db *gorm.DB, id int64, refundNo string, seen int, sentCents int64, wait time.Duration) (recorded bool, err error) {
	res := db.WithContext(ctx).Exec(`UPDATE refund_requests SET refusals = refusals + 1,
			updated_at = clock_timestamp(), next_attempt_at = clock_timestamp() + make_interval(secs => ?)
			WHERE id = ? AND status = 'PENDING' AND refusals = ? AND amount_cents = ?`, wait.Seconds(), id, seen, sentCents)
	if res.Error != nil {
		return false, fmt.Errorf("record refusal of refund %s: %w", refundNo, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// RetryPolicy spaces out the requests of a refund the platform refused. A refusal is the platform
// saying no to the request as sent (an unknown payment, more than is left to refund); it rarely
// passes by itself, and each one is an ALERT, so asking again at every sweep (SWEEP_INTERVAL, 5 s)
// only repeats the alert. Still owed, it is asked again after Min, then twice as long after each
// further refusal, up to Max (REFUND_RETRY_MIN, REFUND_RETRY_MAX).
type RetryPolicy struct {
	Min, Max time.Duration
}

// After returns the wait after the n-th refusal (n >= 1): Min, 2·Min, 4·Min, ..., at most Max.
func (p RetryPolicy) After(n int) time.Duration {
	wait := p.Min
	for i := 1; i < n; i++ {
		if wait > p.Max/2 { // doubled, it would pass Max (or overflow, for a Max near the largest duration)
			return p.Max
		}
		wait *= 2
	}
	return min(wait, p.Max)
}

// MarkRequested records that the platform has refund request id (PENDING → REQUESTED), so that it is
// not sent again. A request already past PENDING is left as it is.
func MarkRequested(ctx context.Context, db *gorm.DB, id int64, refundNo string) error {
	if err := db.WithContext(ctx).Exec(`UPDATE refund_requests SET status = 'REQUESTED', updated_at = now()
			WHERE id = ? AND status = 'PENDING'`, id).Error; err != nil {
		return fmt.Errorf("mark refund %s requested: %w", refundNo, err)
	}
	return nil
}
