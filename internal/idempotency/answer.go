package idempotency

import (
	"github.com/labstack/echo/v4"

	"idemshop/internal/platform/httpproblem"
)

// Answer is a keyed route's response, free of transport: the HTTP status, the body (JSON; a problem
// document when Status >= 400), and whether it is replayed from an existing record rather than fresh.
// Refusals that are not stored (409 in flight, 422 mismatch, 503) are errors, never Answers: they go
// through httpproblem.Handler like every other error.
type Answer struct {
	Status   int
	Body     []byte
	Replayed bool
}

// Write sends a on c: a problem document's content type for Status >= 400, JSON otherwise, and
// Idempotent-Replayed: true when a is a replay.
func (a Answer) Write(c echo.Context) error {
	if a.Replayed {
		c.Response().Header().Set(ReplayedHeader, "true")
	}
	ct := echo.MIMEApplicationJSON
	if a.Status >= 400 {
		ct = httpproblem.ContentType
	}
	return c.Blob(a.Status, ct, a.Body)
}

// KeyedRequest is what an Idempotency-Key route reads before its work: the route (the metrics label),
// the request's method and concrete path, the key's scope, the raw body and its fingerprint.
type KeyedRequest struct {
	Route, Method, Path string
	Scope               Scope
	Body                []byte
	Fingerprint         string
}

// ReadKeyedRequest validates the Idempotency-Key (counting an invalid one on the route), reads the
// body and fingerprints it: the one reader of every keyed route. Errors: ErrKeyMissing or ErrKeyInvalid
// (400), problem.ErrMalformedBody (400), or a read error.
func ReadKeyedRequest(c echo.Context, m *Metrics, userID int64) (KeyedRequest, error) {
	r, err := readKeyedRequest(c, m, userID)
	if err != nil {
		return KeyedRequest{}, err
	}
	return KeyedRequest{Route: r.route, Method: r.method, Path: r.path, Scope: r.scope, Body: r.body, Fingerprint: r.fp}, nil
}
