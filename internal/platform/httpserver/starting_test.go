package httpserver_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

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

	g.Open(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	assert.Equal(t, http.StatusTeapot, get("/readyz").Code)
	assert.Equal(t, http.StatusTeapot, get("/v1/orders").Code)
}
