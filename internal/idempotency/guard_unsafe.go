package idempotency

// LAB ONLY — three ways teams get ladder step 1 wrong, each the Guard of guard.go with one piece of it
// missing. Mounted only with ORDERS_LAB=true, under /lab/unsafe/v1 (internal/ordersapp/lab_idempotency.go).
//
//   - CheckThenInsert (lab scenario S2, double submit): "look the key up; if it is absent, create the
//     order, then remember the key", each statement on its own. N identical requests arriving together
//     all find no key before any of them has stored one, so every one creates an order. Guard makes
//     the same check and the same insert, and its insert runs in the work's transaction: a second
//     insert can only conflict, and roll the second order back with it. (Guard also takes the key's
//     lock first, so that a duplicate waits for the first answer instead of conflicting at the end.)
//   - CommitKeyFirst (S3): the key row is committed on its own, then the work runs in another
//     transaction. When the work fails (not enough stock) nothing rolls the key row back: it stays
//     PROCESSING, and every retry of the key is refused with 409 "in use" for ever: the reaper never
//     deletes PROCESSING rows, and nothing else moves it on. Guard inserts the key inside the work's transaction, so a failure removes both.
//   - IgnoreFingerprint (S10): the key is the whole identity of the request. A second request with the
//     same key but another body gets the first request's stored answer (a 201 for an order it did not
//     ask for), and nobody notices. Guard compares fingerprints before replaying: 422.
//

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
)

// unsafeRetryAfter is the Retry-After of the unsafe variants' 409 answers.
const unsafeRetryAfter = time.Second

// newUnsafe checks what every unsafe variant needs before it is mounted: a database and the guard's
// metrics (the lab counts their decisions beside the guarded ones).
func newUnsafe(db *gorm.DB, m *Metrics) error {
	if db == nil || m == nil {
		return errors.New("idempotency: an unsafe lab runner needs a db and metrics")
	}
	return nil
}

// CheckThenInsert is the S2 variant: check, work, then insert, each in its own statement.
type CheckThenInsert struct {
	db      *gorm.DB
	metrics *Metrics
}

// NewCheckThenInsert returns the S2 variant. LAB ONLY.
func NewCheckThenInsert(db *gorm.DB, m *Metrics) (*CheckThenInsert, error) {
	if err := newUnsafe(db, m); err != nil {
		return nil, err
	}
	return &CheckThenInsert{db: db, metrics: m}, nil
}

// Run looks the key up, runs work, then stores the key with the response: Guard's steps, with the
// insert outside the work's transaction.
func (u *CheckThenInsert) Run(c echo.Context, userID int64, work Work) error {
	r, err := readKeyedRequest(c, u.metrics, userID)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	// 1. The check. It reads only what is committed, and nothing is committed until step 3: every
	//    concurrent duplicate passes it. (Guard makes it too, but only as a fast path for retries: its
	//    INSERT, inside the work's transaction, is the check that counts.)
	rec, err := Find(ctx, u.db, r.scope)
	if err != nil {
		return err
	}
	if rec != nil {
		return Respond(c, u.metrics, r.route, *rec, r.fp, unsafeRetryAfter)
	}
	// 2. The work, in a transaction of its own: the order commits here, whatever happens next.
	var (
		status int
		v      any
	)
	err = u.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		status, v, err = work(ctx, tx, r.body)
		return err
	})
	if err != nil {
		return err
	}
	respBody, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	// 3. The insert. For all but one of the concurrent duplicates the unique index refuses it now, too
	//    late: their orders are committed, and their clients get a 500 for an order that exists.
	err = u.db.WithContext(ctx).Exec(`INSERT INTO idempotency_keys
			(user_id, idempotency_key, kind, method, path, fingerprint, state, response_status, response_body)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.scope.UserID, r.scope.Key, KindCreateOrder, r.method, r.path, r.fp, StateCompleted, status, respBody).Error
	if err != nil {
		return fmt.Errorf("store idempotency key: %w", postgres.TranslateError(err))
	}
	u.metrics.Count(r.route, OutcomeExecuted)
	return c.Blob(status, echo.MIMEApplicationJSON, respBody)
}

// CommitKeyFirst is the S3 variant: the key row commits before, and apart from, the work.
type CommitKeyFirst struct {
	db      *gorm.DB
	metrics *Metrics
}

// NewCommitKeyFirst returns the S3 variant. LAB ONLY.
func NewCommitKeyFirst(db *gorm.DB, m *Metrics) (*CommitKeyFirst, error) {
	if err := newUnsafe(db, m); err != nil {
		return nil, err
	}
	return &CommitKeyFirst{db: db, metrics: m}, nil
}

// Run claims the key in its own commit, then runs work and stores the response in a second transaction.
func (u *CommitKeyFirst) Run(c echo.Context, userID int64, work Work) error {
	r, err := readKeyedRequest(c, u.metrics, userID)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	// The claim runs on u.db, not on the work's tx: it commits on its own, right now, before the work
	// has succeeded. Guard writes its key row in the work's transaction, so a failure removes both.
	id, err := insertClaim(u.db.WithContext(ctx), r.scope, r.method, r.path, r.fp)
	if err != nil {
		return err
	}
	if id == 0 {
		// A PROCESSING row left by a failed attempt answers 409 here, for every retry, for ever.
		rec, err := Find(ctx, u.db, r.scope)
		if err != nil {
			return err
		}
		if rec == nil {
			return ErrKeyInUse.WithRetryAfter(unsafeRetryAfter)
		}
		return Respond(c, u.metrics, r.route, *rec, r.fp, unsafeRetryAfter)
	}
	var (
		status   int
		respBody []byte
	)
	err = u.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		status, respBody, err = workAndStore(ctx, tx, id, r.body, work)
		return err
	})
	if err != nil {
		// This rollback takes the work back, but not the key row: it was committed before.
		return err
	}
	u.metrics.Count(r.route, OutcomeExecuted)
	return c.Blob(status, echo.MIMEApplicationJSON, respBody)
}

// IgnoreFingerprint is the S10 variant: Guard's execute, but the stored answer is replayed to any
// request that carries the key.
type IgnoreFingerprint struct {
	db      *gorm.DB
	metrics *Metrics
}

// NewIgnoreFingerprint returns the S10 variant. LAB ONLY.
func NewIgnoreFingerprint(db *gorm.DB, m *Metrics) (*IgnoreFingerprint, error) {
	if err := newUnsafe(db, m); err != nil {
		return nil, err
	}
	return &IgnoreFingerprint{db: db, metrics: m}, nil
}

// Run is Guard.Run, answering a taken key from its record without comparing fingerprints.
func (u *IgnoreFingerprint) Run(c echo.Context, userID int64, work Work) error {
	r, err := readKeyedRequest(c, u.metrics, userID)
	if err != nil {
		return err
	}
	status, body, taken, err := execute(c.Request().Context(), u.db, r, work, unsafeRetryAfter)
	switch {
	case err != nil:
		return err
	case taken != nil:
		// The missing guard: the record's own fingerprint is passed where Guard passes this request's,
		// so the mismatch check always passes and the first request's answer is replayed to this one.
		return Respond(c, u.metrics, r.route, *taken, taken.Fingerprint, unsafeRetryAfter)
	}
	u.metrics.Count(r.route, OutcomeExecuted)
	return c.Blob(status, echo.MIMEApplicationJSON, body)
}

// insertClaim inserts a PROCESSING row for s and returns its id, or 0 when a committed row already
// holds the key. Only the S3 twin claims before the work; Guard inserts the key row after it, with the
// response (insertCompleted).
func insertClaim(tx *gorm.DB, s Scope, method, path, fp string) (int64, error) {
	var id int64
	err := tx.Raw(`INSERT INTO idempotency_keys (user_id, idempotency_key, kind, method, path, fingerprint, state)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (user_id, idempotency_key) DO NOTHING
		RETURNING id`, s.UserID, s.Key, KindCreateOrder, method, path, fp, StateProcessing).Scan(&id).Error
	if err != nil {
		return 0, fmt.Errorf("claim idempotency key: %w", postgres.TranslateError(err))
	}
	return id, nil
}

// workAndStore runs work in tx and stores its response on key row id (state COMPLETED), in the same
// transaction: the response is stored if and only if the work commits.
func workAndStore(ctx context.Context, tx *gorm.DB, id int64, body []byte, work Work) (int, []byte, error) {
	st, v, err := work(ctx, tx, body)
	if err != nil {
		return 0, nil, err
	}
	respBody, err := json.Marshal(v)
	if err != nil {
		return 0, nil, fmt.Errorf("encode response: %w", err)
	}
	err = tx.Exec(`UPDATE idempotency_keys
		SET state = ?, response_status = ?, response_body = ?, updated_at = now()
		WHERE id = ?`, StateCompleted, st, respBody, id).Error
	if err != nil {
		return 0, nil, fmt.Errorf("store idempotent response: %w", err)
	}
	return st, respBody, nil
}
