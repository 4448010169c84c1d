package httpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/httpserver"
)

// Until Open, the gate is alive but not ready and says what it waits for; after Open the application
// answers everything.
func TestStartingGate(t *testing.T) {
	t.Parallel()
	g := httpserver.NewStarting(prometheus.NewRegistry())
	g.Waiting("postgres", errors.New(`database "x" does not exist`))
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	assert.Equal(t, http.StatusOK, get("/healthz").Code)
	rec := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	var r httpserver.Readiness
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
	assert.Equal(t, "starting", r.Status)
	assert.Equal(t, `waiting: database "x" does not exist`, r.Checks["postgres"])
	rec = get("/v1/orders")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Contains(t, rec.Body.String(), "waiting for postgres")
	assert.Equal(t, http.StatusOK, get("/metrics").Code)
	// Every answer carries a request id, as the application's do: a new one, or the client's own.
	assert.Len(t, get("/readyz").Header().Get("X-Request-ID"), 26)
	own := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	req.Header.Set("X-Request-ID", "client-42")
	g.ServeHTTP(own, req)
	assert.Equal(t, "client-42", own.Header().Get("X-Request-ID"))

	g.Open(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	assert.Equal(t, http.StatusTeapot, get("/readyz").Code)
	assert.Equal(t, http.StatusTeapot, get("/v1/orders").Code)
}

// The ready line logs Early.Addr, the address bound: with port 0 the kernel picks the port, and the
// configured address named port 0 (a helper's finding, 2026-12-06).
func TestServeEarlyReportsTheAddressItBound(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	e, err := httpserver.ServeEarly(ctx, stop, httpserver.Config{Addr: "127.0.0.1:0", ReadHeaderTimeout: time.Second,
		WriteTimeout: time.Second, ShutdownTimeout: time.Second}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), "test")
	require.NoError(t, err)
	t.Cleanup(func() { stop(); _ = e.Wait() })
	_, port, err := net.SplitHostPort(e.Addr().String())
	require.NoError(t, err)
	assert.NotEqual(t, "0", port)
	resp, err := http.Get("http://" + e.Addr().String() + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
