package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Store keeps the records of routes whose effect crosses the transaction boundary (ladder steps 2-4):
// the pay flow calls the payment platform between claiming its record and recording the result, so
// the record must be visible, and resumable, while the call is in flight.
//
//	           Claim                   Finish(COMPLETED)
//	(none) ─────────────► PROCESSING ─────────────────────► COMPLETED         (replayed)
//	                        │  ▲  │   Finish(FAILED_PERMANENT)
//	                        │  │  └─────────────────────────► FAILED_PERMANENT  (replayed)
//	    Finish(FAILED_RETRYABLE) │
//	                        ▼  │ Claim (takeover: retry or sweeper)
//	                FAILED_RETRYABLE, or PROCESSING past locked_until
//
// locked_until is the claimer's lease while PROCESSING; on a FAILED_RETRYABLE record the platform said it
// has no payment for, when the reconciler may ask about it again (FinishRetryable); NULL otherwise.
//
// Every write after the claim carries the claimer's fencing token and only applies while the row's
// fence is not higher (WHERE fence <= $token): a holder that was paused past its lease, and replaced,
// can never overwrite the newer holder's result.
type Store struct {
	db      *gorm.DB
	metrics *Metrics
}

// NewStore returns a Store over db.
func NewStore(db *gorm.DB, m *Metrics) (*Store, error) {
	if db == nil || m == nil {
		return nil, errors.New("idempotency: NewStore needs a db and metrics")
	}
	return &Store{db: db, metrics: m}, nil
}

// ErrFenced is returned by Finish when a holder with a higher fencing token has taken the record over:
// this caller's result is stale and was not written.
var ErrFenced = errors.New("idempotency: write rejected by fencing token")

// FenceBehindError is Claim's error when the record could be taken over (FAILED_RETRYABLE, or
// PROCESSING past its lease) but holds a fencing token as large as the caller's, or larger: the
// token source is behind the database (Redis lost its counter, or the database issued tokens while
// Redis was down). The caller raises its counter past Stored (lock.Locker.RaiseFence) and takes a new
// token; nothing was written.
type FenceBehindError struct{ Token, Stored int64 }

func (e *FenceBehindError) Error() string {
	return fmt.Sprintf("idempotency: fencing token %d is not above the record's %d", e.Token, e.Stored)
}

// Claim is the outcome of Store.Claim. When Claimed, Record is this caller's (state PROCESSING, with
// its Fence); otherwise Record is the current record, for the caller to answer from.
type Claim struct {
	Claimed bool
	Record  Record
}

// Claim takes the record for s: it inserts a PROCESSING record, or takes over one with the same
// fingerprint that is FAILED_RETRYABLE or PROCESSING past its lease. lease is how long the claimer is
// presumed alive (locked_until = now + lease). sub is written on a new record, for the workers that
// find it later (Stuck, Unfinished, CountUnfinished).
//
// fence is the fencing token from the Redis lock; a takeover needs the stored fence to be lower, so
// tokens only ever grow in the row. fence = 0 means Redis is unavailable: the database issues the token
// instead (fence + 1, or 1 for a new record), under the same conditions, so correctness never depends
// on Redis. A token the row refuses although the record could be taken over is *FenceBehindError: the
// Redis counter is behind (a database-issued token ran ahead of it, or Redis lost it), and the caller
// raises it.
func (st *Store) Claim(ctx context.Context, s Scope, sub Subject, method, path, fp string, fence int64, lease time.Duration) (Claim, error) {
	db := st.db.WithContext(ctx)
	// The lease is computed, and later compared, on the database's clock alone: an application clock
	// that runs ahead or behind must not make a live holder look dead, or a dead one alive.
	secs := lease.Seconds()
	var rec Record
	res := db.Raw(`INSERT INTO idempotency_keys
			(user_id, idempotency_key, kind, order_id, method, path, fingerprint, state, fence, locked_until)
		VALUES (?, ?, NULLIF(?, ''), NULLIF(?, 0), ?, ?, ?, ?, GREATEST(?, 1), now() + make_interval(secs => ?))
		ON CONFLICT (user_id, idempotency_key) DO NOTHING
		RETURNING *`, s.UserID, s.Key, sub.Kind, sub.OrderID, method, path, fp, StateProcessing, fence, secs).Scan(&rec)
	if res.Error != nil {
		return Claim{}, fmt.Errorf("claim idempotency record: %w", res.Error)
	}
	if res.RowsAffected == 1 {
		return Claim{Claimed: true, Record: rec}, nil
	}
	// The record exists. Take it over only if nobody can still be working on it, and only with a
	// token newer than the last one that wrote it.
	res = db.Raw(`UPDATE idempotency_keys
		SET state = ?, fence = CASE WHEN ? = 0 THEN fence + 1 ELSE ? END, locked_until = now() + make_interval(secs => ?),
		    attempts = attempts + 1, updated_at = now()
		WHERE user_id = ? AND idempotency_key = ? AND fingerprint = ?
		  AND (state = ? OR (state = ? AND locked_until < now()))
		  AND (? = 0 OR fence < ?)
		RETURNING *`,
		StateProcessing, fence, fence, secs, s.UserID, s.Key, fp,
		StateFailedRetryable, StateProcessing, fence, fence).Scan(&rec)
	if res.Error != nil {
		return Claim{}, fmt.Errorf("take over idempotency record: %w", res.Error)
	}
	if res.RowsAffected == 1 {
		return Claim{Claimed: true, Record: rec}, nil
	}
	if fence > 0 {
		// Refused by the fence alone? Then the token source is behind the row, and says so.
		var stored []int64
		err := db.Raw(`SELECT fence FROM idempotency_keys
			WHERE user_id = ? AND idempotency_key = ? AND fingerprint = ?
			  AND (state = ? OR (state = ? AND locked_until < now())) AND fence >= ?`,
			s.UserID, s.Key, fp, StateFailedRetryable, StateProcessing, fence).Scan(&stored).Error
		if err != nil {
			return Claim{}, fmt.Errorf("take over idempotency record: %w", err)
		}
		if len(stored) == 1 {
			return Claim{}, &FenceBehindError{Token: fence, Stored: stored[0]}
		}
	}
	cur, err := Find(ctx, st.db, s)
	if err != nil {
		return Claim{}, err
	}
	if cur == nil { // reaped between the two statements: extremely unlikely; the caller retries
		return Claim{}, fmt.Errorf("idempotency record %d/%q vanished during claim", s.UserID, s.Key)
	}
	return Claim{Record: *cur}, nil
}

// Finish records the outcome of claimed record id inside tx, if and only if the stored fence is still
// at most fence. state is COMPLETED, FAILED_PERMANENT (both replayed to retries) or FAILED_RETRYABLE
// (a retry runs again); status and body are the HTTP answer to store. It returns ErrFenced, and counts
// it in idemshop_idempotency_fence_rejections_total, when a newer holder owns the record.
func (st *Store) Finish(ctx context.Context, tx *gorm.DB, id, fence int64, state State, status int, body []byte) error {
	if state == StateProcessing {
		return errors.New("idempotency: Finish needs a final state")
	}
	return st.finish(ctx, tx, id, fence, state, status, body, nil)
}

// FinishRetryable is Finish with FAILED_RETRYABLE for a platform that said it has no payment: the
// reconciler asks it again not before askAgain from now (0: after its grace, as for any
// FAILED_RETRYABLE record). The time is kept in locked_until, which a FAILED_RETRYABLE record has no
// other use for: a client's retry claims the record at once whatever it says (Claim). Without it, a
// record its client abandoned was claimed, asked about and given back every RECONCILE_GRACE (1 min)
// for the whole retention (a helper's finding, 2026-12-06).
func (st *Store) FinishRetryable(ctx context.Context, tx *gorm.DB, id, fence int64, status int, body []byte, askAgain time.Duration) error {
	var secs any // NULL: locked_until NULL
	if askAgain > 0 {
		secs = askAgain.Seconds()
	}
	return st.finish(ctx, tx, id, fence, StateFailedRetryable, status, body, secs)
}

// finish is Finish, with locked_until set askAgainSecs seconds from now (NULL when it is nil).
func (st *Store) finish(ctx context.Context, tx *gorm.DB, id, fence int64, state State, status int, body []byte, askAgainSecs any) error {
	res := tx.WithContext(ctx).Exec(`UPDATE idempotency_keys
		SET state = ?, response_status = ?, response_body = ?, updated_at = now(),
		    locked_until = now() + make_interval(secs => ?)
		WHERE id = ? AND state = ? AND fence <= ?`,
		state, status, body, askAgainSecs, id, StateProcessing, fence)
	if res.Error != nil {
		return fmt.Errorf("finish idempotency record %d: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		st.metrics.fenceRejections.Inc()
		return ErrFenced
	}
	return nil
}

// Stuck returns up to limit PROCESSING records of kind whose lease has
// run out (their holder crashed, or is still waiting on an answer that may never come), and that the
// sweeper has asked about unanswered fewer than maxSweeps times.
func (st *Store) Stuck(ctx context.Context, kind string, maxSweeps, limit int) ([]Record, error) {
	var recs []Record
	err := st.db.WithContext(ctx).
		Where("state = ? AND locked_until < now() AND kind = ? AND sweeps < ?", StateProcessing, kind, maxSweeps).
		Order("locked_until").Limit(limit).Find(&recs).Error
	if err != nil {
		return nil, fmt.Errorf("find stuck idempotency records: %w", err)
	}
	return recs, nil
}

// Unfinished returns up to limit records of kind that are FAILED_RETRYABLE, or
// PROCESSING past their lease, and untouched for at least grace: what the reconciler settles with the
// platform whatever the sweeper's bound (a FAILED_RETRYABLE payment may exist after all: the platform
// may have committed before its connection broke). A FAILED_RETRYABLE record the platform last said it
// has no payment for waits until its locked_until (FinishRetryable).
func (st *Store) Unfinished(ctx context.Context, kind string, grace time.Duration, limit int) ([]Record, error) {
	var recs []Record
	err := st.db.WithContext(ctx).
		Where(`kind = ? AND updated_at < now() - make_interval(secs => ?)
			AND state IN (?, ?) AND (locked_until IS NULL OR locked_until < now())`,
			kind, grace.Seconds(), StateFailedRetryable, StateProcessing).
		Order("updated_at").Limit(limit).Find(&recs).Error
	if err != nil {
		return nil, fmt.Errorf("find unfinished idempotency records: %w", err)
	}
	return recs, nil
}

// NoteUnanswered counts one question about record id that the downstream left unanswered (the
// sweeper's bound), with the asker's fence, and returns the new count. A newer holder's record is left
// alone (0, ErrFenced), and the refusal counted in idemshop_idempotency_fence_rejections_total.
func (st *Store) NoteUnanswered(ctx context.Context, id, fence int64) (int, error) {
	var n []int
	err := st.db.WithContext(ctx).Raw(`UPDATE idempotency_keys SET sweeps = sweeps + 1
		WHERE id = ? AND fence <= ? RETURNING sweeps`, id, fence).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count unanswered sweep of record %d: %w", id, err)
	}
	if len(n) == 0 {
		st.metrics.fenceRejections.Inc() // a refused write, as finish counts one
		return 0, ErrFenced
	}
	return n[0], nil
}

// CountUnfinished returns how many records of kind are PROCESSING and FAILED_RETRYABLE. Only those:
// the WHERE clause is the predicate of the partial index idempotency_keys_kind_state_idx, so the count
// reads the unfinished records alone. Counting the finished ones too read every key of the retention
// window on every call (a sequential scan: at 5M keys, a sweep every 5 s raised the create route's p99
// by half; docs/performance.md).
func (st *Store) CountUnfinished(ctx context.Context, kind string) (map[State]int64, error) {
	var rows []struct {
		State State
		N     int64
	}
	err := st.db.WithContext(ctx).Raw(`SELECT state, count(*) AS n FROM idempotency_keys
		WHERE kind = ? AND state IN ('PROCESSING', 'FAILED_RETRYABLE') GROUP BY state`, kind).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("count idempotency records: %w", err)
	}
	out := map[State]int64{}
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, nil
}
