package httpproblem_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
)

func TestResolveFindsWrappedErrors(t *testing.T) {
	t.Parallel()
	conflict := problem.New(problem.KindConflict, "busy", "try later")
	cases := []struct {
		name string
		err  error
		code string
	}{
		{"domain error wrapped twice", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", conflict)), "busy"},
		{"echo body limit wrapped", fmt.Errorf("read body: %w", echo.ErrStatusRequestEntityTooLarge), "body_too_large"},
		{"echo not found", echo.ErrNotFound, "not_found"},
		{"echo method", echo.ErrMethodNotAllowed, "method_not_allowed"},
		{"plain error", errors.New("boom"), "internal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.code, httpproblem.Resolve(tc.err).Code)
		})
	}
}

func TestHandlerWritesRFC9457(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = httpproblem.Handler(func(echo.Context) *slog.Logger { return slog.New(slog.DiscardHandler) })
	e.GET("/x", func(echo.Context) error {
		return fmt.Errorf("wrapped: %w", problem.New(problem.KindConflict, "busy", "try later").WithRetryAfter(1500*time.Millisecond))
	})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Equal(t, httpproblem.ContentType, rec.Header().Get("Content-Type"))
	assert.Equal(t, "2", rec.Header().Get("Retry-After"), "rounded up to whole seconds")
	var b httpproblem.Body
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
	assert.Equal(t, httpproblem.Body{Type: "about:blank", Title: "Conflict", Status: 409, Detail: "try later",
		Instance: "/x", Code: "busy"}, b)
}

// instance is a URI reference (RFC 9457 §3.1.5): the path as it was sent. Decoded, "%20" and "%00"
// became characters no URI holds, and "%2F" a path that names another resource.
func TestInstanceIsThePathAsSent(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = httpproblem.Handler(func(echo.Context) *slog.Logger { return slog.New(slog.DiscardHandler) })
	e.GET("/v1/orders/:id", func(echo.Context) error {
		return problem.New(problem.KindNotFound, "order_not_found", "no such order")
	})
	for _, path := range []string{"/v1/orders/%201", "/v1/orders/%00", "/v1/orders/1%2F", "/v1/orders/7"} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusNotFound, rec.Code, path)
		var b httpproblem.Body
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
		assert.Equal(t, path, b.Instance)
	}
}

// Resolved against the request's URL (as a URI reference is), instance names the path that was sent:
// dot segments and a leading "//" (an authority, another host) are escaped, the query is left out.
func TestInstanceResolvesToThePathSent(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"/v1/orders/7":               "/v1/orders/7",
		"/v1/x/../orders/2":          "/v1/x/%2E%2E/orders/2",
		"/v1/./orders/2":             "/v1/%2E/orders/2",
		"/v1/orders/..":              "/v1/orders/%2E%2E",
		"/v1/orders/..x/.y":          "/v1/orders/..x/.y",
		"//evil.example/v1/orders/9": "/%2Fevil.example/v1/orders/9",
		"///x":                       "/%2F/x",
		"/v1/orders/9?token=secret":  "/v1/orders/9",
		"/v1/orders/%2E%2E/%2F/%20":  "/v1/orders/%2E%2E/%2F/%20",
	} {
		u, err := url.ParseRequestURI(raw)
		require.NoError(t, err, raw)
		got := httpproblem.Instance(u)
		assert.Equal(t, want, got, raw)
		base, err := url.Parse("http://127.0.0.1:8080" + raw)
		require.NoError(t, err)
		ref, err := url.Parse(got)
		require.NoError(t, err)
		resolved := base.ResolveReference(ref)
		assert.Equal(t, "127.0.0.1:8080", resolved.Host, raw)
		assert.Equal(t, got, resolved.EscapedPath(), "%s resolves to itself", raw)
	}
}

// A request whose client hung up ends in context.Canceled: logged at INFO with 499, not as a 500 at
// ERROR (a newcomer counted 132 of them in a database stall). A deadline is not a hang-up: it goes on
// to the translation (a 503 for a database timeout).
// A client that sends its whole request and then closes its sending side (a half-close) still reads,
// but Go's net/http cancels the request when the connection reads EOF: the handler stops, and the client
// reads a 499 with a problem body saying so. It read a bare "HTTP/1.1 499 status code 499" until
// 2026-12-07 (a newcomer's finding).
func TestAClientThatHalfClosesReadsA499Problem(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = httpproblem.Handler(func(echo.Context) *slog.Logger { return slog.New(slog.DiscardHandler) })
	e.POST("/v1/orders", func(c echo.Context) error {
		if _, err := io.ReadAll(c.Request().Body); err != nil {
			return err
		}
		<-c.Request().Context().Done() // the work, stopped by the half-close
		return fmt.Errorf("create order: %w", c.Request().Context().Err())
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(time.Minute)))
	body := `{"product_id":1,"quantity":1}`
	_, err = fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, httpproblem.StatusClientClosedRequest, resp.StatusCode)
	assert.Equal(t, httpproblem.ContentType, resp.Header.Get("Content-Type"))
	var p httpproblem.Body
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	assert.Equal(t, httpproblem.ClientClosedCode, p.Code)
	assert.Equal(t, "/v1/orders", p.Instance)
}

func TestAClientThatHungUpIs499NotAServerError(t *testing.T) {
	t.Parallel()
	logs := &strings.Builder{}
	lg := slog.New(slog.NewTextHandler(logs, nil))
	e := echo.New()
	e.HTTPErrorHandler = httpproblem.Handler(func(echo.Context) *slog.Logger { return lg })
	e.GET("/x", func(c echo.Context) error {
		<-c.Request().Context().Done()
		return fmt.Errorf("look up token: %w", c.Request().Context().Err())
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx))
	assert.Equal(t, httpproblem.StatusClientClosedRequest, rec.Code)
	assert.Equal(t, httpproblem.ContentType, rec.Header().Get("Content-Type"))
	var p httpproblem.Body
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	assert.Equal(t, httpproblem.Body{Type: "about:blank", Title: "Client Closed Request", Status: httpproblem.StatusClientClosedRequest,
		Detail: p.Detail, Instance: "/x", Code: httpproblem.ClientClosedCode}, p)
	assert.Contains(t, p.Detail, "the same Idempotency-Key")
	assert.Contains(t, logs.String(), "level=INFO msg=\"request abandoned: the client went away\"")
	assert.NotContains(t, logs.String(), "level=ERROR")

	logs.Reset()
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx))
	assert.Equal(t, http.StatusInternalServerError, rec.Code, "untranslated here: orders translates it to 503")
	assert.NotContains(t, logs.String(), "client went away")
}
