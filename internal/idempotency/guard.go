package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/problem"
)

// Work is the business step of a one-transaction route. It runs inside tx, after the key row has been
// inserted, and gets the raw request body to decode. It returns the success status and the value that
// becomes the JSON response body. Any error rolls back the key row together with the work, so nothing is
// stored and a corrected retry with the same key runs again.
type Work func(ctx context.Context, tx *gorm.DB, body []byte) (status int, response any, err error)

// Runner runs a one-transaction route's work. Guard is the real one; a baseline without the key layer
// implements it too, so that benchmarks compare the same handler chain.
type Runner interface {
	Run(c echo.Context, userID int64, work Work) error
}

// GuardOptions configures NewGuard.
type GuardOptions struct {
	// RetryAfter is sent with 409 in-flight answers. Default 1 s.
	RetryAfter time.Duration
}

// Guard is ladder step 1: request key + unique index + one transaction. It implements the whole
// Idempotency-Key semantics table of docs/design.md for routes whose effect fits in one local transaction.
//
// It needs nothing but the database. A concurrent duplicate waits on the unique index until the first
// request's transaction ends, then answers from what it committed: the same answer a later retry gets.
// (An earlier version put a Redis "in flight" marker in front, to answer 409 or 422 at once; it cost a
// round trip on every request and its trickiest lines, for answers that waiting gives as well.)
type Guard struct {
	db         *gorm.DB
	metrics    *Metrics
	retryAfter time.Duration
}

// NewGuard returns a Guard over db. metrics must not be nil.
func NewGuard(db *gorm.DB, metrics *Metrics, o GuardOptions) (*Guard, error) {
	if db == nil || metrics == nil {
		return nil, errors.New("idempotency: NewGuard needs a db and metrics")
	}
	g := &Guard{db: db, metrics: metrics, retryAfter: o.RetryAfter}
	if g.retryAfter <= 0 {
		g.retryAfter = time.Second
	}
	return g, nil
}

// Run answers one request on an Idempotency-Key route:
//
//  1. validate the key (400 idempotency_key_missing / idempotency_key_invalid) and fingerprint the body;
//  2. in ONE transaction: insert the key row, run work, store the response; commit. The key row's
//     unique index decides between requests with the same (user, key):
//     - a committed row: conflict; answer from it (replay, or 422 for another body), change nothing;
//     - a row still being written by a running request: the INSERT waits for that transaction. If it
//     commits, as above; if it rolls back, this request wins and runs. A wait longer than
//     DB_LOCK_TIMEOUT answers 409 in flight (Retry-After): the running request's body is not visible
//     before its commit, so a different body that arrives then learns its 422 on the retry.
func (g *Guard) Run(c echo.Context, userID int64, work Work) error {
	ctx := c.Request().Context()
	r, err := readKeyedRequest(c, g.metrics, userID)
	if err != nil {
		return err
	}
	route, s, fp := r.route, r.scope, r.fp

	var (
		status   int
		respBody []byte
		conflict bool
		existing *Record
	)
	err = g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		id, err := insertClaim(tx, s, r.method, r.path, fp)
		if err != nil {
			return err
		}
		if id == 0 {
			// The key is taken by a committed request: answer from its record, change nothing.
			conflict = true
			existing, err = Find(ctx, tx, s)
			return err
		}
		// Same transaction as the claim: the work and its stored response commit together, or neither.
		status, respBody, err = workAndStore(ctx, tx, id, r.body, work)
		return err
	})
	switch {
	case errors.Is(err, postgres.ErrLockTimeout):
		g.metrics.Count(route, OutcomeInFlight)
		return ErrKeyInUse.WithRetryAfter(g.retryAfter).Wrap(err)
	case err != nil:
		return err
	case conflict && existing == nil:
		// The row vanished between the conflict and the read (the reaper): tell the client to retry.
		g.metrics.Count(route, OutcomeInFlight)
		return ErrKeyInUse.WithRetryAfter(g.retryAfter)
	case conflict:
		return Respond(c, g.metrics, route, *existing, fp, g.retryAfter)
	}
	g.metrics.Count(route, OutcomeExecuted)
	return c.Blob(status, echo.MIMEApplicationJSON, respBody)
}

// insertClaim inserts the PROCESSING row for s and returns its id, or 0 when a committed row already
// holds the key. ON CONFLICT DO NOTHING instead of catching 23505 keeps the transaction usable. Its
// kind is KindCreateOrder: create order is the one route this guard keys.
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

// Replay answers a request from an existing record, counting the outcome on route: ErrKeyReused (422)
// if fp is not the record's fingerprint (whatever its state: the mismatch check comes first); the
// stored status and body, Replayed, if the record is COMPLETED or FAILED_PERMANENT; otherwise
// ErrKeyInUse (409) with Retry-After retryAfter.
func Replay(m *Metrics, route string, rec Record, fp string, retryAfter time.Duration) (Answer, error) {
	if rec.Fingerprint != fp {
		m.Count(route, OutcomeMismatch)
		return Answer{}, ErrKeyReused
	}
	if (rec.State == StateCompleted || rec.State == StateFailedPermanent) && rec.ResponseStatus != nil {
		m.Count(route, OutcomeReplayed)
		return Answer{Status: *rec.ResponseStatus, Body: rec.ResponseBody, Replayed: true}, nil
	}
	m.Count(route, OutcomeInFlight)
	return Answer{}, ErrKeyInUse.WithRetryAfter(retryAfter)
}

// Respond answers a request from an existing record on c: Replay, then Answer.Write.
func Respond(c echo.Context, m *Metrics, route string, rec Record, fp string, retryAfter time.Duration) error {
	a, err := Replay(m, route, rec, fp, retryAfter)
	if err != nil {
		return err
	}
	return a.Write(c)
}

// keyedRequest is what every Idempotency-Key route reads first: the key, the body and its fingerprint.
type keyedRequest struct {
	route, method, path string
	scope               Scope
	body                []byte
	fp                  string
}

// readKeyedRequest validates the Idempotency-Key (counting an invalid one), reads the body and
// fingerprints it.
func readKeyedRequest(c echo.Context, m *Metrics, userID int64) (keyedRequest, error) {
	req := c.Request()
	r := keyedRequest{route: c.Path(), method: req.Method, path: req.URL.Path}
	key, err := KeyFromHeader(req.Header)
	if err != nil {
		m.Count(r.route, OutcomeInvalid)
		return r, err
	}
	if r.body, err = httpproblem.ReadBody(req.Body); err != nil {
		return r, fmt.Errorf("read request body: %w", err)
	}
	if r.fp, err = Fingerprint(req.Method, req.URL.Path, r.body); err != nil {
		return r, problem.ErrMalformedBody.Wrap(err)
	}
	r.scope = Scope{UserID: userID, Key: key}
	return r, nil
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
