// Package httpproblem is the HTTP half of the problem errors: the one place that maps an error's kind to
// an HTTP status and writes it as an RFC 9457 problem document (Handler, Echo's error handler). The
// patterns' packages return *problem.Error values and never import Echo for it.
package httpproblem

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"idemshop/internal/platform/problem"
)

// ContentType is the media type of RFC 9457 problem responses.
const ContentType = "application/problem+json"

// Body is the RFC 9457 problem document. Type is "about:blank" (RFC 9457 §4.2.1), so Title is the
// HTTP status phrase; Code is the stable extension member clients should switch on.
type Body struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	Code     string `json:"code"`
}

// StatusOf is the single mapping from error kinds to HTTP statuses.
func StatusOf(k problem.Kind) int {
	switch k {
	case problem.KindInvalid:
		return http.StatusBadRequest
	case problem.KindUnauthorized:
		return http.StatusUnauthorized
	case problem.KindNotFound:
		return http.StatusNotFound
	case problem.KindConflict:
		return http.StatusConflict
	case problem.KindUnprocessable:
		return http.StatusUnprocessableEntity
	case problem.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case problem.KindUnavailable:
		return http.StatusServiceUnavailable
	case problem.KindMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case problem.KindForbidden:
		return http.StatusForbidden
	case problem.KindUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	default:
		return http.StatusInternalServerError
	}
}

// fromEcho turns Echo's own errors (unknown route, wrong method, body limit) into *problem.Error values.
func fromEcho(he *echo.HTTPError) *problem.Error {
	switch he.Code {
	case http.StatusNotFound:
		return problem.ErrNotFound.Wrap(he)
	case http.StatusMethodNotAllowed:
		return &problem.Error{Kind: problem.KindMethodNotAllowed, Code: "method_not_allowed", Detail: "method not allowed on this route", Err: he}
	case http.StatusRequestEntityTooLarge:
		return problem.ErrTooLarge.Wrap(he)
	case http.StatusUnauthorized:
		return problem.ErrUnauthorized.Wrap(he)
	case http.StatusBadRequest:
		return &problem.Error{Kind: problem.KindInvalid, Code: "bad_request", Detail: http.StatusText(he.Code), Err: he}
	case http.StatusServiceUnavailable:
		return problem.ErrUnavailable.Wrap(he)
	}
	return problem.ErrInternal.Wrap(he)
}

// Resolve finds the *problem.Error in err's chain, or classifies err as internal. An *echo.HTTPError found before
// any *problem.Error is translated, so a body-limit error wrapped by a handler still becomes 413.
func Resolve(err error) *problem.Error {
	var pe *problem.Error
	if errors.As(err, &pe) {
		return pe
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return fromEcho(he)
	}
	return problem.ErrInternal.Wrap(err)
}

// Document is pe's RFC 9457 document (instance may be empty), as Write sends it and as a stored answer
// (a pay record's refusal) replays it.
func Document(pe *problem.Error, instance string) ([]byte, error) {
	status := StatusOf(pe.Kind)
	return json.Marshal(Body{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: pe.Detail, Instance: instance, Code: pe.Code})
}

// Instance is the instance member of a problem with the request to u: the request's path as it was
// sent, without the query (which may carry a secret). It is a URI reference (RFC 9457 §3.1.5), which a
// client resolves against the request's URL, so what would resolve to another resource is escaped: a
// "." or ".." segment (resolved away: "/v1/x/../orders/2" names /v1/orders/2) and a leading "//" (an
// authority: "//evil.example/x" names another host). The path is not decoded either: a decoded "%20"
// or "%00" is no URI, and a decoded "%2F" names another resource.
func Instance(u *url.URL) string {
	p := u.EscapedPath()
	if strings.Contains(p, "/.") {
		segs := strings.Split(p, "/")
		for i, seg := range segs {
			switch seg {
			case ".":
				segs[i] = "%2E"
			case "..":
				segs[i] = "%2E%2E"
			}
		}
		p = strings.Join(segs, "/")
	}
	if strings.HasPrefix(p, "//") {
		p = "/%2F" + p[2:]
	}
	return p
}

// Challenge is the WWW-Authenticate value sent with every 401 (RFC 9110 §11.6.1: a 401 must carry
// one): the shop's credentials are bearer tokens (RFC 6750), the session cookie holding one too.
const Challenge = `Bearer realm="idemshop"`

// Write renders pe as an RFC 9457 response.
func Write(c echo.Context, pe *problem.Error) error {
	status := StatusOf(pe.Kind)
	if pe.RetryAfter > 0 {
		secs := int(math.Ceil(pe.RetryAfter.Seconds()))
		c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	}
	if pe.Kind == problem.KindUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", Challenge)
	}
	body, err := Document(pe, Instance(c.Request().URL))
	if err != nil {
		return err
	}
	return c.Blob(status, ContentType, body)
}

// StatusClientClosedRequest is the status of a request whose client closed its connection before the
// answer (nginx's 499; no HTTP status says it). A client that closed only its sending side after the
// request (a half-close) is one too: Go's net/http cancels a request whose connection reads EOF. That
// client still reads, and gets this status with a problem body (ClientClosedCode).
const StatusClientClosedRequest = 499

// ClientClosedCode is the problem code of a 499.
const ClientClosedCode = "client_closed_request"

// clientClosedDetail is the 499's detail: the request stopped where it stood, so what it did is what a
// retry with its key finds.
const clientClosedDetail = "the connection was closed (its sending side at least) before the answer, so the request was abandoned where it stood; " +
	"send it again with the same Idempotency-Key, and keep the connection open until the answer"

// ResolveTranslated is err's problem: its own (Resolve) first, so that a problem that wraps a database
// error (a 409 for a locked account) stays itself; then, for an error that resolves to an internal
// error only, each translate in turn (e.g. postgres.TranslateError: a lock timeout or a lost connection
// is a 503). The error handler and a route that renders its own error page (the redeem form) resolve
// alike.
func ResolveTranslated(err error, translate ...func(error) error) *problem.Error {
	pe := Resolve(err)
	for _, tr := range translate {
		if pe.Kind != problem.KindInternal {
			break
		}
		pe = Resolve(tr(err))
	}
	return pe
}

// Log writes the line the error handler writes for err, resolved to pe: ERROR for an internal error
// (with its cause), WARN for a dependency's "not now", DEBUG for a refused request.
func Log(lg *slog.Logger, pe *problem.Error, err error) {
	switch pe.Kind {
	case problem.KindInternal:
		lg.Error("request failed", "err", err)
	case problem.KindUnavailable:
		lg.Warn("request failed for now", "code", pe.Code, "err", err)
	default:
		lg.Debug("request refused", "code", pe.Code, "err", err)
	}
}

// Handler returns the Echo HTTPErrorHandler: every error a handler or middleware returns ends here.
// Internal errors are logged with their cause; the client sees only the stable code. translate (e.g.
// postgres.TranslateError) classifies an error nothing else did: a lock timeout deep in a handler is
// then a 503 with Retry-After, not a 500. Transient conditions are logged at WARN, not ERROR; a client
// that hung up, at INFO, with 499.
func Handler(logger func(echo.Context) *slog.Logger, translate ...func(error) error) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		pe := ResolveTranslated(err, translate...)
		lg := logger(c)
		if errors.Is(err, context.Canceled) && errors.Is(context.Cause(c.Request().Context()), context.Canceled) {
			// The client hung up: nobody reads an answer, and it is no server error. 499 is the
			// status proxies log for it (nginx's "client closed request"); the access log and the
			// request metric see it, the error log does not.
			lg.Info("request abandoned: the client went away", "err", err)
			// A client that only half-closed still reads: a bare 499 left it with "status code 499"
			// and no word of what happened (a newcomer's finding, 2026-12-07).
			body, jerr := json.Marshal(Body{Type: "about:blank", Title: "Client Closed Request", Status: StatusClientClosedRequest,
				Detail: clientClosedDetail, Instance: Instance(c.Request().URL), Code: ClientClosedCode})
			if jerr == nil {
				_ = c.Blob(StatusClientClosedRequest, ContentType, body) // nobody may read it: no error to log
			}
			return
		}
		Log(lg, pe, err)
		if werr := Write(c, pe); werr != nil {
			lg.Error("write problem response", "err", werr)
		}
	}
}
