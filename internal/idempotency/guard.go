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

// Work is the business step of a one-transaction route. It runs inside tx, before the key row is
// inserted, and gets the raw request body to decode. It returns the success status and the value that
// becomes the JSON response body. Any error rolls the transaction back, so nothing is stored and a
// corrected retry with the same key runs again.
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
// It needs nothing but the database. (An earlier version put a Redis "in flight" marker in front, to
// answer a concurrent duplicate at once; it cost a round trip on every request and its trickiest lines,
// for answers that waiting for the first transaction gives as well: docs/idempotency.md.)
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

// Run answers one request on an Idempotency-Key route: it validates the key (400
// idempotency_key_missing / idempotency_key_invalid), fingerprints the body, and runs execute. A key
// taken by another request answers from that request's record: the stored status and body replayed,
// 422 idempotency_key_reused for another fingerprint, 409 idempotency_key_in_use (Retry-After) while
// that request is still running past DB_LOCK_TIMEOUT.
func (g *Guard) Run(c echo.Context, userID int64, work Work) error {
	r, err := readKeyedRequest(c, g.metrics, userID)
	if err != nil {
		return err
	}
	status, body, taken, err := execute(c.Request().Context(), g.db, r, work, g.retryAfter)
	switch {
	case errors.Is(err, ErrKeyInUse):
		g.metrics.Count(r.route, OutcomeInFlight)
		return err
	case err != nil:
		return err
	case taken != nil:
		return Respond(c, g.metrics, r.route, *taken, r.fp, g.retryAfter)
	}
	g.metrics.Count(r.route, OutcomeExecuted)
	return c.Blob(status, echo.MIMEApplicationJSON, body)
}

// errKeyTaken rolls back a transaction whose key row could not be inserted: the key is another's.
var errKeyTaken = errors.New("idempotency key taken by another request")

// execute runs r's work unless its key is taken. It returns the work's status and JSON body, or the
// record of the request that holds the key (taken), or ErrKeyInUse (with Retry-After retryAfter) when
// that request is still running after DB_LOCK_TIMEOUT. One transaction, in as many round trips as the
// route without the key layer (keyTx sends BEGIN and COMMIT with the guard's statements):
//
//  1. BEGIN, the key's lock, and the key's committed record. A concurrent duplicate waits on the lock
//     for the first request's transaction, then reads what it committed. A record answers, and the
//     transaction rolls back: this is how a retry, or a duplicate that waited, is answered (before
//     its work could refuse it), and all it costs a new request.
//  2. The work, in the transaction.
//  3. The key row with its response (COMPLETED), and COMMIT. The unique index on (user_id,
//     idempotency_key) has the last word against a writer that does not take the lock (the pay
//     route's claim of the same key): if that row is committed, the INSERT fails, this transaction
//     rolls back, work and all, and that row answers; if it is not, the INSERT waits for it. A
//     request whose work fails stores nothing, so a corrected retry runs again.
func execute(ctx context.Context, db *gorm.DB, r keyedRequest, work Work, retryAfter time.Duration) (int, []byte, *Record, error) {
	var (
		status int
		body   []byte
		taken  *Record
	)
	err := withKeyTx(ctx, db, func(t *keyTx) error {
		var err error
		if taken, err = t.beginAndRead(ctx, r.scope, retryAfter); err != nil || taken != nil {
			return err
		}
		st, v, err := work(ctx, t.work, r.body)
		if err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode response: %w", err)
		}
		if err := insertCompleted(ctx, t, r, st, b, retryAfter); err != nil {
			return err
		}
		status, body = st, b
		return nil
	})
	if errors.Is(err, errKeyTaken) {
		if taken, err = Find(ctx, db, r.scope); err == nil && taken == nil {
			// The winner's row is gone already (the reaper, past retention): let the client retry.
			err = ErrKeyInUse.WithRetryAfter(retryAfter)
		}
		return 0, nil, taken, err
	}
	return status, body, taken, err
}

// insertCompleted stores the key row of r with its response and commits t. A committed row that holds
// the key fails the INSERT with a unique violation: errKeyTaken. A row of a request that is still
// running makes the INSERT wait for its transaction, at most DB_LOCK_TIMEOUT: then ErrKeyInUse. Its
// kind is KindCreateOrder: create order is the one route this guard keys.
func insertCompleted(ctx context.Context, t *keyTx, r keyedRequest, status int, body []byte, retryAfter time.Duration) error {
	err := t.insertAndCommit(ctx, `INSERT INTO idempotency_keys
			(user_id, idempotency_key, kind, method, path, fingerprint, state, response_status, response_body)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, r.scope.UserID, r.scope.Key, KindCreateOrder,
		r.method, r.path, r.fp, StateCompleted, status, body)
	switch err := postgres.TranslateError(err); {
	case errors.Is(err, postgres.ErrDuplicate):
		return errKeyTaken
	case errors.Is(err, postgres.ErrLockTimeout):
		return ErrKeyInUse.WithRetryAfter(retryAfter).Wrap(err)
	case err != nil:
		return fmt.Errorf("store idempotency key: %w", err)
	}
	return nil
}

// Replay answers a request from an existing record, counting the outcome on route: ErrKeyReused (422)
// if fp is not the record's fingerprint (whatever its state: the mismatch check comes first); the
// stored status and body, Replayed, if the record is COMPLETED or FAILED_PERMANENT; otherwise
// ErrKeyInUse (409) with Retry-After retryAfter.
func Replay(m *Metrics, route string, rec Record, fp string, retryAfter time.Duration) (Answer, error) {
	if err := Mismatch(m, route, rec, fp); err != nil {
		return Answer{}, err
	}
	if (rec.State == StateCompleted || rec.State == StateFailedPermanent) && rec.ResponseStatus != nil {
		m.Count(route, OutcomeReplayed)
		return Answer{Status: *rec.ResponseStatus, Body: rec.ResponseBody, Replayed: true}, nil
	}
	m.Count(route, OutcomeInFlight)
	return Answer{}, ErrKeyInUse.WithRetryAfter(retryAfter)
}

// Mismatch returns ErrKeyReused (422), counted on route, when rec was stored for another request than
// fp's (IETF idempotency-key draft §2.7: a key reused with a different payload), else nil.
func Mismatch(m *Metrics, route string, rec Record, fp string) error {
	if rec.Fingerprint != fp {
		m.Count(route, OutcomeMismatch)
		return ErrKeyReused
	}
	return nil
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
		var dup DuplicateNameError
		if errors.As(err, &dup) {
			return r, problem.ErrMalformedBody.WithDetail(dup.Error()).Wrap(err)
		}
		return r, problem.ErrMalformedBody.Wrap(err)
	}
	r.scope = Scope{UserID: userID, Key: key}
	return r, nil
}
