package ordersapp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/config"
	"idemshop/internal/platform/postgres"
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

	// PostgreSQL down is unavailable: 503. The probe dials DATABASE_URL on a connection of its own.
	noDB := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) {
		c.Postgres.URL = "postgres://postgres@" + testenv.FreeAddr(t) + "/idemshop?sslmode=disable&connect_timeout=1"
	}})
	r = noDB.call(http.MethodGet, "/readyz", "", "", nil)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	ready.Checks = nil
	require.NoError(t, json.Unmarshal(r.Body, &ready))
	assert.Equal(t, "unavailable", ready.Status)
	assert.Contains(t, ready.Checks["postgres"], "down: ")
}

// A pool whose every connection is busy is not a database that is down: the probe has a connection of
// its own, and /readyz says ok while the requests wait for the pool. Through the pool it waited in the
// queue and read "down" (an overload tester's finding, 2026-12-07: 4 of 40 probes at 300 pays a second
// on DB_MAX_CONNS=2, PostgreSQL up all along).
func TestReadinessDoesNotWaitForABusyPool(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	pool, err := postgres.Open(context.Background(), env.DatabaseURL, postgres.Options{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(pool) })
	rp := newReplica(t, env, replicaOpts{db: pool, cfg: func(c *config.Orders) {
		c.ReadyProbeTimeout = 500 * time.Millisecond
	}})
	busy := pool.Begin() // the pool's one connection, held
	require.NoError(t, busy.Error)
	t.Cleanup(func() { busy.Rollback() })

	r := rp.call(http.MethodGet, "/readyz", "", "", nil)
	var ready struct {
		Checks map[string]string `json:"checks"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &ready), "%s", r.Body)
	assert.Equal(t, "ok", ready.Checks["postgres"], "%s", r.Body)
	assert.NotEqual(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	var probes int64
	require.NoError(t, busy.Raw(`SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE '% readyz'`).Row().Scan(&probes))
	assert.EqualValues(t, 1, probes, "the probe's own connection, named for it")
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
