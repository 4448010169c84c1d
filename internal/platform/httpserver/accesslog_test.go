package httpserver_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/httpserver"
)

// The access log shows the API's traffic at INFO; the successful polls of /healthz, /readyz and /metrics
// (probes, Prometheus, the lab page every second) only at DEBUG, and a failed one at INFO again.
func TestAccessLogKeepsPollsAtDebug(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := httpserver.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), prometheus.NewRegistry(), 1<<10)
	e.GET("/healthz", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/readyz", func(c echo.Context) error { return c.NoContent(http.StatusServiceUnavailable) })
	e.GET("/v1/products", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	for _, path := range []string{"/healthz", "/readyz", "/v1/products"} {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	log := buf.String()
	assert.NotContains(t, log, "path=/healthz", "a successful poll is not at INFO")
	assert.Contains(t, log, "path=/readyz status=503", "a failed one is")
	assert.Contains(t, log, "path=/v1/products status=200")
	assert.Equal(t, 2, strings.Count(log, `msg="http request"`))
}

// HEAD on a GET route is answered as GET would be, headers and status alike, without the body (RFC
// 9110 §9.3.2); the access log says HEAD. A HEAD where no GET is routed answers as that GET would.
func TestHeadIsAnsweredAsGetWithoutTheBody(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	e := httpserver.New(slog.New(slog.NewTextHandler(&lockedWriter{&buf, &mu}, nil)), prometheus.NewRegistry(), 1<<10)
	e.GET("/v1/things/:id", func(c echo.Context) error {
		c.Response().Header().Set("X-Thing", c.Param("id"))
		return c.JSON(http.StatusOK, map[string]string{"id": c.Param("id")})
	})
	e.POST("/v1/things", func(c echo.Context) error { return c.NoContent(http.StatusCreated) })
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	do := func(method, path string) (*http.Response, string) {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}
	get, body := do(http.MethodGet, "/v1/things/7")
	require.Equal(t, http.StatusOK, get.StatusCode)
	require.JSONEq(t, `{"id":"7"}`, body)

	head, body := do(http.MethodHead, "/v1/things/7")
	assert.Equal(t, http.StatusOK, head.StatusCode)
	assert.Equal(t, "7", head.Header.Get("X-Thing"))
	assert.Equal(t, get.Header.Get("Content-Type"), head.Header.Get("Content-Type"))
	assert.Empty(t, body)

	missing, _ := do(http.MethodHead, "/v1/nothing")
	assert.Equal(t, http.StatusNotFound, missing.StatusCode)
	postOnly, _ := do(http.MethodHead, "/v1/things")
	wantPostOnly, _ := do(http.MethodGet, "/v1/things")
	assert.Equal(t, wantPostOnly.StatusCode, postOnly.StatusCode)

	// Where the router lists the methods of a path (405, OPTIONS), HEAD is among them if GET is.
	wrong, _ := do(http.MethodDelete, "/v1/things/7")
	assert.Equal(t, http.StatusMethodNotAllowed, wrong.StatusCode)
	assert.ElementsMatch(t, []string{"OPTIONS", "GET", "HEAD"}, strings.Split(wrong.Header.Get("Allow"), ", "))
	options, _ := do(http.MethodOptions, "/v1/things/7")
	assert.ElementsMatch(t, []string{"OPTIONS", "GET", "HEAD"}, strings.Split(options.Header.Get("Allow"), ", "))
	postOnlyAllow, _ := do(http.MethodDelete, "/v1/things")
	assert.ElementsMatch(t, []string{"OPTIONS", "POST"}, strings.Split(postOnlyAllow.Header.Get("Allow"), ", "))

	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, buf.String(), "method=HEAD path=/v1/things/7 status=200")
}

// lockedWriter serializes the server goroutines' log writes into one buffer.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// What a client can choose does not become a metric label: made-up methods are counted as OTHER, and
// unrouted paths under one route label, so /metrics stays the same size however many a client sends.
// X-Request-ID sent twice is not one id: the answer carries a fresh one.
func TestClientsCannotGrowTheMetricsOrChooseTwoRequestIDs(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := httpserver.New(slog.New(slog.DiscardHandler), reg, 1<<10)
	e.GET("/v1/things/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	series := func() (n int, labels string) {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "idemshop_http_request_duration_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				n++
				for _, l := range m.GetLabel() {
					labels += l.GetName() + "=" + l.GetValue() + " "
				}
			}
		}
		return n, labels
	}
	for i := range 5 {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(strings.Repeat("Q", 100+i), "/v1/things/1", nil))
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/nowhere-"+strings.Repeat("x", i), nil))
	}
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/things/2", nil))
	n, labels := series()
	assert.Equal(t, 3, n, "one series each: the made-up methods, the unrouted paths, the GET: %s", labels)
	assert.Contains(t, labels, "method=OTHER")
	assert.NotContains(t, labels, "QQQ")
	assert.NotContains(t, labels, "nowhere")

	req := httptest.NewRequest(http.MethodGet, "/v1/things/1", nil)
	req.Header.Add("X-Request-ID", "one")
	req.Header.Add("X-Request-ID", "two")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	id := rec.Header().Values("X-Request-ID")
	require.Len(t, id, 1)
	assert.NotContains(t, []string{"one", "two"}, id[0], "a fresh id")
	assert.NotEmpty(t, id[0])
	req = httptest.NewRequest(http.MethodGet, "/v1/things/1", nil)
	req.Header.Set("X-Request-ID", "one")
	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	assert.Equal(t, "one", rec.Header().Get("X-Request-ID"), "one id sent is kept")
}

// A body sent with a content coding is refused with 415 before a handler reads it (RFC 9110 §8.4),
// with Accept-Encoding naming the one read; identity, and a request without a body, pass. A gzip
// callback was refused for its JSON syntax, and a plain body labelled br was taken as it was.
func TestABodyWithAContentCodingIsRefused(t *testing.T) {
	t.Parallel()
	e := httpserver.New(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), 1<<10)
	var handled int
	e.POST("/v1/things", func(c echo.Context) error {
		handled++
		return c.NoContent(http.StatusCreated)
	})
	e.GET("/v1/things", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	send := func(method, body string, codings ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "/v1/things", strings.NewReader(body))
		for _, c := range codings {
			req.Header.Add("Content-Encoding", c)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}
	for _, codings := range [][]string{{"gzip"}, {"br"}, {"identity, gzip"}, {"identity", "deflate"}, {"x-made-up"}} {
		rec := send(http.MethodPost, `{}`, codings...)
		assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code, "%v", codings)
		assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		assert.Contains(t, rec.Body.String(), `"code":"unsupported_content_encoding"`)
		assert.Equal(t, "identity", rec.Header().Get("Accept-Encoding"))
	}
	assert.Zero(t, handled, "no handler read a coded body")
	assert.Equal(t, http.StatusCreated, send(http.MethodPost, `{}`).Code)
	assert.Equal(t, http.StatusCreated, send(http.MethodPost, `{}`, "identity").Code)
	assert.Equal(t, http.StatusCreated, send(http.MethodPost, `{}`, "IDENTITY", "").Code)
	assert.Equal(t, http.StatusOK, send(http.MethodGet, "", "gzip").Code, "no body, nothing coded")
	assert.Equal(t, 3, handled)
}
