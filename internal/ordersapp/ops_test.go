package ordersapp_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/testenv"
)

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)

	up := newReplica(t, env, replicaOpts{cfg: relayOnlyWoken(env)})
	h := up.call(http.MethodGet, "/healthz", "", "", nil)
	assert.Equal(t, http.StatusOK, h.Status)
	var ready struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	// Until its relay has drained the outbox once, orders cannot say that events get through: degraded.
	r := up.call(http.MethodGet, "/readyz", "", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.NoError(t, json.Unmarshal(r.Body, &ready))
	assert.Equal(t, "degraded", ready.Status)
	assert.Equal(t, map[string]string{"postgres": "ok", "redis": "ok", "rabbitmq": "ok",
		"outbox": "down: relay has not drained the outbox yet"}, ready.Checks)

	runRelay(t, up)
	r = up.call(http.MethodGet, "/readyz", "", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	ready.Checks = nil
	require.NoError(t, json.Unmarshal(r.Body, &ready))
	assert.Equal(t, "ok", ready.Status)
	assert.Equal(t, map[string]string{"postgres": "ok", "redis": "ok", "rabbitmq": "ok", "outbox": "ok"}, ready.Checks)

	// Redis is an efficiency layer: down means degraded (still 200), and orders still work.
	noRedis := newReplica(t, env, replicaOpts{redis: deadRedis(t)})
	r = noRedis.call(http.MethodGet, "/readyz", "", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.NoError(t, json.Unmarshal(r.Body, &ready))
	assert.Equal(t, "degraded", ready.Status)
	assert.Contains(t, ready.Checks["redis"], "down")
	assert.Equal(t, http.StatusCreated, noRedis.createOrder(alice, "no-redis-1", mugOrder).Status)

	// PostgreSQL down is unavailable: 503.
	deadDB := testenv.OpenDB(t, env.DatabaseURL, 0)
	noDB := newReplica(t, env, replicaOpts{db: deadDB})
	sqlDB, err := deadDB.DB()
	require.NoError(t, err)
	require.NoError(t, sqlDB.Close())
	r = noDB.call(http.MethodGet, "/readyz", "", "", nil)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
}

func TestMetricsAndUnknownRoutes(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	require.Equal(t, http.StatusCreated, rp.createOrder(alice, "m-1", mugOrder).Status)

	m := rp.call(http.MethodGet, "/metrics", "", "", nil)
	require.Equal(t, http.StatusOK, m.Status)
	assert.Contains(t, string(m.Body), `idemshop_idempotency_requests_total{outcome="executed",route="/v1/orders"} 1`)
	assert.Contains(t, string(m.Body), `idemshop_http_request_duration_seconds_bucket`)

	nf := rp.call(http.MethodGet, "/nope", "", "", nil)
	assert.Equal(t, http.StatusNotFound, nf.Status)
	assert.Equal(t, "not_found", nf.problem(t).Code)
	assert.NotEmpty(t, nf.Header.Get("X-Request-Id"), "every response carries its request id")
}

func TestRequestIDFromClientIsBounded(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	ok := rp.call(http.MethodGet, "/healthz", "", "", nil, "X-Request-ID", "client-id-42")
	assert.Equal(t, "client-id-42", ok.Header.Get("X-Request-Id"), "a sane id is kept")
	long := strings.Repeat("x", 6000)
	r := rp.call(http.MethodGet, "/healthz", "", "", nil, "X-Request-ID", long)
	got := r.Header.Get("X-Request-Id")
	assert.NotEqual(t, long, got, "an oversized id is replaced")
	assert.NotEmpty(t, got)
	assert.LessOrEqual(t, len(got), 128)
}
