package httpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
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

// A connection still open at SHUTDOWN_TIMEOUT is closed, and Serve says so with ErrDrainCut: one
// that had sent half its headers, and one whose request was still in its work (its context ends).
// Until 2026-12-06 they held the process to the bound, which then exited 1 with the connections open
// (a helper's finding).
func TestServeClosesWhatIsStillOpenAtTheShutdownTimeout(t *testing.T) {
	t.Parallel()
	inWork, ended := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inWork)
		<-r.Context().Done()
		close(ended)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- httpserver.Serve(ctx, ln, h, httpserver.Config{ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute,
			WriteTimeout: time.Minute, IdleTimeout: time.Minute, ShutdownTimeout: 200 * time.Millisecond})
	}()
	half, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = half.Close() })
	_, err = half.Write([]byte("POST /v1/orders HTTP/1.1\r\nHost: x\r\n")) // and nothing more
	require.NoError(t, err)
	working, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = working.Close() })
	_, err = working.Write([]byte("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	select {
	case <-inWork:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached its handler")
	}

	stop()
	select {
	case err := <-served:
		assert.ErrorIs(t, err, httpserver.ErrDrainCut)
		assert.ErrorContains(t, err, "(2 connections)", "the half-sent request and the one in its work")
	case <-time.After(5 * time.Second): // 200 ms, and slack
		t.Fatal("Serve did not return after its shutdown timeout")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the request in its work was not ended")
	}
	for name, c := range map[string]net.Conn{"half-sent": half, "in its work": working} {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := io.Copy(io.Discard, c)
		assert.NoError(t, err, "%s: closed by the server (EOF), not timed out", name)
	}
}
