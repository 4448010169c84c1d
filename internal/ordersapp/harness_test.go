package ordersapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/idempotency"
	"idemshop/internal/ordersapp"
	"idemshop/internal/payclient"
	"idemshop/internal/paymock"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/fault"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/testenv"
)

// replica is one orders instance (real Echo, real middleware, real services) behind an httptest server.
type replica struct {
	t   testing.TB
	srv *httptest.Server
	reg *prometheus.Registry
	app *ordersapp.App
}

type replicaOpts struct {
	db     *gorm.DB           // nil: the env's
	redis  *redis.Client      // nil: the env's
	runner idempotency.Runner // nil: the real Guard
	logger *slog.Logger       // nil: discard
	fault  fault.Hook         // pay flow crash-window hook
	cfg    func(*config.Orders)
}

func testConfig(env *testenv.Env) config.Orders {
	cfg := config.DefaultOrders()
	cfg.Postgres.URL = env.DatabaseURL
	cfg.Redis.URL = env.RedisURL
	cfg.Redis.KeyPrefix = env.Prefix
	cfg.AMQPURL = env.AMQPURL
	return cfg
}

func newReplica(t testing.TB, env *testenv.Env, o replicaOpts) *replica {
	t.Helper()
	// Listen first, so the replica knows its own callback URL before it is built.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg := testConfig(env)
	cfg.CallbackURL = "http://" + ln.Addr().String() + "/v1/payments/callback"
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	db, rdb := env.DB, env.Redis
	if o.db != nil {
		db = o.db
	}
	if o.redis != nil {
		rdb = o.redis
	}
	reg := prometheus.NewRegistry()
	logger := o.logger
	if logger == nil {
		// Keep the server's ERROR lines, and show them if the test fails: a 500 then says why.
		errs := &testenv.Output{}
		logger = slog.New(slog.NewTextHandler(errs, &slog.HandlerOptions{Level: slog.LevelError}))
		t.Cleanup(func() {
			if t.Failed() && errs.String() != "" {
				t.Logf("server errors:\n%s", errs.String())
			}
		})
	}
	app, err := ordersapp.New(ordersapp.Deps{Config: cfg, Logger: logger,
		DB: db, Redis: rdb, Registry: reg, Runner: o.runner, PayFault: o.fault})
	require.NoError(t, err)
	srv := &httptest.Server{Listener: ln, Config: httpserver.NewServer(app.Echo, cfg.HTTP.Server(""))}
	srv.Start()
	t.Cleanup(srv.Close)
	return &replica{t: t, srv: srv, reg: reg, app: app}
}

// deadRedis is a client for a port nothing listens on: Redis is down.
func deadRedis(t testing.TB) *redis.Client {
	t.Helper()
	rdb, err := redisx.Open("redis://127.0.0.1:1/0", 100*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) problem(t testing.TB) httpproblem.Body {
	t.Helper()
	require.Equal(t, httpproblem.ContentType, r.Header.Get("Content-Type"), "body: %s", r.Body)
	var p httpproblem.Body
	require.NoError(t, json.Unmarshal(r.Body, &p))
	require.Equal(t, r.Status, p.Status)
	return p
}

// call sends one request. token and key are omitted when empty; headers may add more. It is safe to
// call from helper goroutines: a transport failure is reported with Errorf (FailNow there would only end
// the goroutine and hang the test) and returns a zero response.
func (rp *replica) call(method, path, token, key string, body []byte, headers ...string) response {
	rp.t.Helper()
	req, err := http.NewRequest(method, rp.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		rp.t.Errorf("build request: %v", err)
		return response{}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := rp.srv.Client().Do(req)
	if err != nil {
		rp.t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rp.t.Errorf("read %s %s: %v", method, path, err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func (rp *replica) createOrder(token, key, body string) response {
	rp.t.Helper()
	return rp.call(http.MethodPost, "/v1/orders", token, key, []byte(body))
}

// sendInBackground sends req on rp's client and returns the error of the exchange once it ends: a test
// hangs up by cancelling req's context.
func (rp *replica) sendInBackground(req *http.Request) <-chan error {
	sent := make(chan error, 1)
	go func() {
		resp, err := rp.srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	return sent
}

// count returns SELECT count(*) FROM table [WHERE ...].
func count(t testing.TB, db *gorm.DB, table string, where ...any) int64 {
	t.Helper()
	var n int64
	q := db.Table(table)
	if len(where) > 0 {
		q = q.Where(where[0], where[1:]...)
	}
	require.NoError(t, q.Count(&n).Error)
	return n
}

// patience bounds a wait for something that normally takes milliseconds (a request to block, a hook to be
// reached, a callback to arrive). It is a deadline for a failure, never a duration a test relies on, so it
// is far longer than any such wait can take on a loaded machine.
const patience = time.Minute

// queued is the env of a test whose requests queue on one row: parallel callbacks of one order or one
// product, parallel claims of one key. Each waits its turn for as long as its statement may run (30 s)
// instead of DB_LOCK_TIMEOUT (2 s), which a queue of a few transactions can outlast on a loaded machine,
// turning an answer the test expects into a 503. DB_LOCK_TIMEOUT's own answer is tested where it is the
// subject: TestCreateOrderOnALockedProductIs503, the in-flight tests and the callback storm.
var queued = testenv.Options{LockTimeout: patience}

// patientDB is a pool on the test's database without lock or statement timeouts to speak of: a request
// the test holds on a row lock (holdProduct) stays blocked until the test releases it, however slowly
// the test gets there. The env's own pool gives up after DB_LOCK_TIMEOUT and 30 s.
func patientDB(t testing.TB, env *testenv.Env) *gorm.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), env.DatabaseURL, postgres.Options{LockTimeout: time.Hour, MaxConns: 6})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(db) })
	return db
}

// eventually polls cond every 10 ms until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// idemCount reads idemshop_idempotency_requests_total{route,outcome} from the replica's registry.
func idemCount(t testing.TB, rp *replica, route, outcome string) float64 {
	t.Helper()
	mfs, err := rp.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "idemshop_idempotency_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["route"] == route && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// mockPlatform is payments-mock in-process, behind a loopback server, with its own registry.
type mockPlatform struct {
	*paymock.Platform
	srv    *httptest.Server
	reg    *prometheus.Registry
	client *payclient.Client
}

// newMock starts payments-mock with short retry schedules; mutate adjusts its config.
func newMock(t testing.TB, mutate func(*paymock.Config)) *mockPlatform {
	t.Helper()
	cfg := paymock.Config{
		Secret:             demoSecret,
		AutoApproveDelay:   0,
		RetrySchedule:      []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond},
		CallbackTimeout:    5 * time.Second,
		CreateTimeoutDelay: time.Second,
		DeliveryLogLimit:   10000,
		Chaos:              paymock.Chaos{Duplicates: 1, Parallel: true, Seed: 1},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	m := testenv.StartPaymentsMock(t, cfg)
	p, srv, reg := m.Platform, m.Server, m.Registry
	client, err := payclient.New(srv.URL, 5*time.Second)
	require.NoError(t, err)
	return &mockPlatform{Platform: p, srv: srv, reg: reg, client: client}
}

// creates counts POST /v1/payments requests the platform has received.
func (m *mockPlatform) creates(t testing.TB) uint64 {
	t.Helper()
	return platformCalls(t, m, http.MethodPost, "/v1/payments")
}

// setChaos changes the platform's chaos through its admin API.
func (m *mockPlatform) setChaos(t testing.TB, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, m.srv.URL+"/admin/chaos", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// metricValue reads a counter or gauge (the sum over label sets matching labels) from reg.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, mt := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range mt.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, want := range labels {
				if have[k] != want {
					continue next
				}
			}
			v += mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
		}
	}
	return v
}

// recv waits for a helper goroutine's response, failing (not hanging) after patience.
func recv(t testing.TB, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(patience):
		t.Fatal("a request never returned")
		return response{}
	}
}
