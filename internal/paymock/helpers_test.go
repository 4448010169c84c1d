package paymock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"idemshop/internal/paymock"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/httpserver"
)

var testSecret = []byte("test-webhook-secret")

const testBodyLimit = 64 << 10

// harness is a platform behind a real loopback HTTP server, built the way cmd/payments-mock builds it.
type harness struct {
	p    *paymock.Platform
	e    *echo.Echo
	srv  *httptest.Server
	http *http.Client
}

// patience bounds the waits of these tests: for a delivery to end, a request to be answered, the platform
// to close. It is a deadline for a failing run, never a duration a test relies on, so it is far longer
// than any of these takes on a loaded machine.
const patience = time.Minute

// testConfig has short schedules so that the whole retry ladder takes well under a second. A callback
// attempt is given patience: the receivers answer at once, and an attempt cut short by a slow machine
// would change the outcomes the tests count.
func testConfig() paymock.Config {
	return paymock.Config{
		Secret:             testSecret,
		AutoApproveDelay:   0,
		RetrySchedule:      []time.Duration{20 * time.Millisecond, 40 * time.Millisecond},
		CallbackTimeout:    patience,
		CreateTimeoutDelay: 2 * time.Second,
		DeliveryLogLimit:   1000,
		Chaos:              paymock.Chaos{Duplicates: 1, Parallel: true, Seed: 1},
	}
}

func newHarness(t *testing.T, mutate func(*paymock.Config)) *harness {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := prometheus.NewRegistry()
	p, err := paymock.New(cfg, logger, reg)
	require.NoError(t, err)
	e := httpserver.New(logger, reg, testBodyLimit)
	httpserver.MountOps(e, reg, time.Second)
	p.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		require.NoError(t, p.Close(ctx))
	})
	t.Cleanup(srv.Close) // runs first: no request is in flight when the platform closes
	return &harness{p: p, e: e, srv: srv, http: &http.Client{Timeout: patience}}
}

// call sends a request with a raw body (empty = none) and returns the status and body.
func (h *harness) call(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

// callJSON is call with a status check and a decode of the answer into out.
func (h *harness) callJSON(t *testing.T, method, path, body string, wantStatus int, out any) {
	t.Helper()
	status, raw := h.call(t, method, path, body)
	require.Equal(t, wantStatus, status, "%s %s: %s", method, path, raw)
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), "%s", raw)
	}
}

func (h *harness) create(t *testing.T, orderNo string, amount int64, notifyURL string) paymock.Payment {
	t.Helper()
	var p paymock.Payment
	h.callJSON(t, http.MethodPost, "/v1/payments", createBody(orderNo, amount, notifyURL), http.StatusCreated, &p)
	return p
}

func createBody(orderNo string, amount int64, notifyURL string) string {
	return `{"merchant_order_no":"` + orderNo + `","amount_cents":` + strconv.FormatInt(amount, 10) +
		`,"currency":"EUR","notify_url":"` + notifyURL + `"}`
}

func (h *harness) approve(t *testing.T, id string) paymock.Payment {
	t.Helper()
	var p paymock.Payment
	h.callJSON(t, http.MethodPost, "/v1/payments/"+id+"/approve", "", http.StatusOK, &p)
	return p
}

func (h *harness) setChaos(t *testing.T, patch string) paymock.Chaos {
	t.Helper()
	var c paymock.Chaos
	h.callJSON(t, http.MethodPut, "/admin/chaos", patch, http.StatusOK, &c)
	return c
}

// deliveries reads the delivery log through the admin API.
func (h *harness) deliveries(t *testing.T, query string) []paymock.Attempt {
	t.Helper()
	var out struct {
		Deliveries []paymock.Attempt `json:"deliveries"`
	}
	h.callJSON(t, http.MethodGet, "/admin/deliveries"+query, "", http.StatusOK, &out)
	return out.Deliveries
}

// requireProblem asserts an RFC 9457 answer with the given status and code.
func requireProblem(t *testing.T, status int, raw []byte, wantStatus int, wantCode string) {
	t.Helper()
	require.Equal(t, wantStatus, status, "%s", raw)
	var pb httpproblem.Body
	require.NoError(t, json.Unmarshal(raw, &pb), "%s", raw)
	require.Equal(t, wantCode, pb.Code, "%s", raw)
	require.NotEmpty(t, pb.Detail)
}

// received is one callback as the test receiver saw it.
type received struct {
	Event      paymock.Event
	DeliveryID string
	Attempt    int
	SigErr     error // the paysig verdict on the raw body
}

// receiver is the notify_url of a test: it verifies each callback with paysig and answers with
// respond(n), n counting requests from 1.
type receiver struct {
	srv      *httptest.Server
	verifier paysig.Verifier
	respond  func(n int) (int, string)
	// barrier, when > 0, holds each request until that many are in flight together (or barrierWait
	// passes): only parallel senders can get past it quickly.
	barrier int

	mu          sync.Mutex
	got         []received
	inFlight    int
	maxInFlight int
	allIn       chan struct{}
	allInClosed bool
}

const ack = `{"result":"success"}`

// barrierWait is how long a receiver's barrier holds a request at most: long enough that parallel copies
// meet there however slowly they are sent, short of the callback timeout (patience), so that a sender
// that sends one copy at a time ends its attempt on the barrier, not on the timeout.
const barrierWait = 30 * time.Second

func newReceiver(t *testing.T, respond func(n int) (int, string)) *receiver {
	t.Helper()
	if respond == nil {
		respond = func(int) (int, string) { return http.StatusOK, ack }
	}
	r := &receiver{verifier: paysig.Verifier{Secret: testSecret}, respond: respond, allIn: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) url() string { return r.srv.URL + "/callback" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	rec := received{
		DeliveryID: req.Header.Get(paymock.HeaderDeliveryID),
		SigErr:     r.verifier.Verify(req.Header.Get(paysig.Header), raw),
	}
	rec.Attempt, _ = strconv.Atoi(req.Header.Get(paymock.HeaderAttempt))
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // the body must be exactly DESIGN.md's fields
	if err := dec.Decode(&rec.Event); err != nil {
		rec.SigErr = err
	}
	r.mu.Lock()
	r.got = append(r.got, rec)
	n := len(r.got)
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	if r.barrier > 0 && r.inFlight == r.barrier && !r.allInClosed {
		close(r.allIn)
		r.allInClosed = true
	}
	r.mu.Unlock()
	if r.barrier > 0 {
		select {
		case <-r.allIn:
		case <-time.After(barrierWait):
		}
	}
	status, body := r.respond(n)
	r.mu.Lock()
	r.inFlight--
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (r *receiver) all() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// maxConcurrent is the most callbacks the receiver held at the same time.
func (r *receiver) maxConcurrent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxInFlight
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, within, 5*time.Millisecond, append([]any{msg}, args...)...)
}

// staysAt polls n for the whole settle period and fails as soon as it moves off want. The period must
// exceed the longest retry wait, so a missed stop would show up.
func staysAt(t *testing.T, settle time.Duration, want int, n func() int, msg string) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) {
		require.Equal(t, want, n(), msg)
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, want, n(), msg)
}

// finalCount counts the deliveries that have ended (their last attempt is Final).
func finalCount(log []paymock.Attempt) int {
	n := 0
	for _, a := range log {
		if a.Final {
			n++
		}
	}
	return n
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func promRegistry() *prometheus.Registry { return prometheus.NewRegistry() }
