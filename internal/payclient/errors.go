package payclient

import (
	"errors"
	"fmt"
	"net/http"
)

// The error classes of every call, as HTTP sees them. What matters to a caller that moves money is
// whether the platform definitely did nothing (ErrRefused: it answered 4xx) or whether the outcome is
// unknown (ErrServer, ErrTimeout, ErrConnection, ErrProtocol): the request may have been applied, so the
// caller must ask the query API before it retries or gives up. OutcomeUnknown says which, for HTTP in
// general. A platform's own contract can say more: this one stores nothing when it answers 503, 408 or
// 429 ("not now", docs/payments-mock.md), and the pay flow relies on that (pay.isRetryable: such a
// payment is FAILED_RETRYABLE and a retry calls again without a query); any other 5xx stays unknown.
var (
	// ErrRefused: a 4xx answer. The request was refused as sent; *StatusError has the status and code.
	ErrRefused = errors.New("payclient: refused by the platform")
	// ErrServer: a 5xx answer (including chaos 503, which this platform answers before storing anything,
	// and the gateway 504, which may come after it stored the payment).
	ErrServer = errors.New("payclient: platform error")
	// ErrTimeout: no answer within the client's timeout or the context's deadline.
	ErrTimeout = errors.New("payclient: timeout")
	// ErrConnection: the request could not be sent or the connection broke before an answer.
	ErrConnection = errors.New("payclient: connection error")
	// ErrNotSent: the request provably never left (the dial failed: refused, unreachable, no such
	// host). It also matches ErrConnection. Only this kind of connection error proves that nothing
	// happened; a connection that breaks after the dial may break after the request was written.
	ErrNotSent = errors.New("payclient: request not sent")
	// ErrProtocol: an answer that is not what the API promises (a 2xx with an undecodable body).
	ErrProtocol = errors.New("payclient: unexpected answer")
)

// StatusError is an HTTP error answer. Code and Detail come from the RFC 9457 problem body when there
// is one (a gateway's plain-text 504 has none). It matches ErrRefused (4xx) or ErrServer (5xx) with
// errors.Is.
type StatusError struct {
	Status int
	Code   string
	Detail string
}

func (e *StatusError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("payclient: HTTP %d", e.Status)
	}
	return fmt.Sprintf("payclient: HTTP %d %s: %s", e.Status, e.Code, e.Detail)
}

// Is makes errors.Is(err, ErrRefused) and errors.Is(err, ErrServer) work on a *StatusError.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrRefused:
		return e.Status >= 400 && e.Status < 500
	case ErrServer:
		return e.Status >= 500
	}
	return false
}

// Refused reports whether err is a definite refusal (4xx), and returns its status and code.
func Refused(err error) (status int, code string, ok bool) {
	var se *StatusError
	if errors.As(err, &se) && errors.Is(se, ErrRefused) {
		return se.Status, se.Code, true
	}
	return 0, "", false
}

// OutcomeUnknown reports whether the request may or may not have been applied: a 5xx, a timeout, a
// broken connection or a garbled answer. A caller must then find out through the query API
// (FindByMerchantOrderNo) rather than assume either way.
func OutcomeUnknown(err error) bool {
	return errors.Is(err, ErrServer) || errors.Is(err, ErrTimeout) ||
		errors.Is(err, ErrConnection) || errors.Is(err, ErrProtocol)
}

// IsNotFound reports whether err is a 404 (unknown payment).
func IsNotFound(err error) bool {
	status, _, ok := Refused(err)
	return ok && status == 404
}

// IsRefusal reports whether err is a refusal of the request as sent: a 4xx other than 408 and 429.
// Those two are 4xx too, but they mean "not now", not "no", so a caller retries them.
func IsRefusal(err error) bool {
	st, _, ok := Refused(err)
	return ok && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests
}
