// Package problem defines the typed errors that every layer returns: a Kind, a stable code and a detail,
// free of any transport.
//
// Domain packages return *Error values (or wrap them with %w); they choose a Kind, never an HTTP status.
// The HTTP half is internal/platform/httpproblem: its Echo error handler finds them with errors.As and
// picks the status from the Kind (RFC 9457 "Problem Details for HTTP APIs"), so a wrapped error still
// maps right and the mapping lives in one table.
package problem

import (
	"errors"
	"fmt"
	"time"
)

// Kind classifies an error independently of the transport.
type Kind int

// The kinds, with the HTTP status each maps to in httpproblem.StatusOf.
const (
	KindInternal         Kind = iota // 500
	KindInvalid                      // 400: the request is malformed or fails validation
	KindUnauthorized                 // 401: missing or unknown credentials
	KindNotFound                     // 404
	KindConflict                     // 409: the resource is busy or in the wrong state
	KindUnprocessable                // 422: well-formed but semantically refused (e.g. a reused idempotency key)
	KindTooLarge                     // 413: body over the configured limit
	KindUnavailable                  // 503: a dependency is down; retry later
	KindMethodNotAllowed             // 405
	KindForbidden                    // 403: authenticated or not, this caller may not use this route
	KindUnsupportedMedia             // 415: a body in a form the route does not read (a content coding)
)

// Error is a domain error with a stable, machine-readable Code (the RFC 9457 "code" extension member that
// clients switch on) and a human-readable Detail. RetryAfter, when set, becomes a Retry-After header in
// whole seconds (rounded up).
type Error struct {
	Kind       Kind
	Code       string
	Detail     string
	RetryAfter time.Duration
	// Err is the cause, kept for logs and errors.Is; it is never shown to the client.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Detail, e.Err)
	}
	return e.Code + ": " + e.Detail
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error of the given kind.
func New(kind Kind, code, detail string) *Error {
	return &Error{Kind: kind, Code: code, Detail: detail}
}

// Newf is New with a formatted detail.
func Newf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// WithRetryAfter returns a copy of e that asks the client to retry after d.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	c := *e
	c.RetryAfter = d
	return &c
}

// WithDetail returns a copy of e with another detail (same kind and code).
func (e *Error) WithDetail(d string) *Error {
	c := *e
	c.Detail = d
	return &c
}

// Wrap returns a copy of e with cause as its underlying error.
func (e *Error) Wrap(cause error) *Error {
	c := *e
	c.Err = cause
	return &c
}

// Is makes errors.Is(err, target) true when both carry the same Code, so sentinel *Error values work
// even after WithRetryAfter or Wrap made copies.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Stable codes shared by several packages. Packages that own a concept define their own codes next to it
// (idempotency_key_reused lives in internal/idempotency).
var (
	ErrInternal     = New(KindInternal, "internal", "an unexpected error occurred; it has been logged")
	ErrUnauthorized = New(KindUnauthorized, "unauthorized", "missing or unknown bearer token")
	ErrNotFound     = New(KindNotFound, "not_found", "no such resource")
	ErrTooLarge     = New(KindTooLarge, "body_too_large", "request body exceeds the configured limit")
	ErrUnavailable  = New(KindUnavailable, "unavailable", "a dependency is unavailable; retry later")
)

// ErrContentEncoding is a request body sent with a content coding (gzip, br, ...): bodies are read as
// sent, and a coding is refused (RFC 9110 §8.4), not taken for JSON.
var ErrContentEncoding = New(KindUnsupportedMedia, "unsupported_content_encoding",
	"request bodies are read as sent: send this one without Content-Encoding (or with identity)")

// ErrMalformedBody is a request body that is not the JSON the route expects (syntax, unknown field,
// wrong type, trailing data).
var ErrMalformedBody = New(KindInvalid, "malformed_body", "request body is not valid JSON for this route")
