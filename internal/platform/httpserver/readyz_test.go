package httpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/httpserver"
)

// /readyz probes its dependencies at once, each within the probe timeout, so that it answers within
// that timeout however many of them stop answering. Each probe here answers only once all three have
// started: probed one after the other, the first waits out its timeout alone and reads "down", and the
// answer takes three timeouts.
func TestReadyzProbesItsDependenciesAtOnce(t *testing.T) {
	t.Parallel()
	const n = 3
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	probe := func(ctx context.Context) error {
		started.Done()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return errors.New("the other probes did not start meanwhile")
		}
	}
	e := httpserver.New(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), 1<<20)
	httpserver.MountOps(e, prometheus.NewRegistry(), time.Second,
		httpserver.Check{Name: "postgres", Critical: true, Probe: probe},
		httpserver.Check{Name: "redis", Probe: probe},
		httpserver.Check{Name: "rabbitmq", Probe: probe},
	)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var r httpserver.Readiness
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
	assert.Equal(t, httpserver.Readiness{Status: "ok",
		Checks: map[string]string{"postgres": "ok", "redis": "ok", "rabbitmq": "ok"}}, r)
}

// A probe that fails still reads as its check's state: a critical one makes the answer 503, another
// one "degraded".
func TestReadyzReportsEachCheck(t *testing.T) {
	t.Parallel()
	down := func(context.Context) error { return errors.New("refused") }
	up := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name       string
		pg, redis  func(context.Context) error
		wantCode   int
		wantStatus string
	}{
		{"all up", up, up, http.StatusOK, "ok"},
		{"redis down", up, down, http.StatusOK, "degraded"},
		{"postgres down", down, up, http.StatusServiceUnavailable, "unavailable"},
		{"both down", down, down, http.StatusServiceUnavailable, "unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := httpserver.New(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), 1<<20)
			httpserver.MountOps(e, prometheus.NewRegistry(), time.Second,
				httpserver.Check{Name: "postgres", Critical: true, Probe: tc.pg},
				httpserver.Check{Name: "redis", Probe: tc.redis})
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			assert.Equal(t, tc.wantCode, rec.Code)
			var r httpserver.Readiness
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
			assert.Equal(t, tc.wantStatus, r.Status)
			assert.Len(t, r.Checks, 2)
		})
	}
}
