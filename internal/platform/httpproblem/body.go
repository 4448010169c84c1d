package httpproblem

import (
	"errors"
	"io"

	"github.com/labstack/echo/v4"

	"idemshop/internal/platform/problem"
)

// ErrBodyUnreadable is a request body that ended early or stalled past the server's read timeout: the
// client's fault, not the server's, so 400 rather than 500.
var ErrBodyUnreadable = problem.New(problem.KindInvalid, "body_unreadable", "the request body could not be read completely")

// ReadBody reads a whole request body. The body limit's 413 passes through unchanged; any other read
// failure (a truncated body, a client that stalls) is ErrBodyUnreadable.
func ReadBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(r)
	if err == nil {
		return b, nil
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return nil, err
	}
	return nil, ErrBodyUnreadable.Wrap(err)
}
