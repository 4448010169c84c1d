package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/payclient"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/config"
	"idemshop/internal/testenv"
)

// TestServeEndToEnd runs the wired binary in-process: a payment is auto-approved, its callback arrives
// signed with the default demo secret, the ops routes answer, and cancelling the context (what SIGTERM
// does) shuts everything down.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	cfg := config.DefaultPaymentsMock()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.AutoApproveDelay = 10 * time.Millisecond
	cfg.ChaosSeed = "11"
	cfg.ChaosDuplicates = 2
	require.NoError(t, cfg.Validate())
	t.Logf("chaos seed %s", cfg.ChaosSeed)

	var mu sync.Mutex
	var verdicts []error
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		v := paysig.Verifier{Secret: []byte("idemshop-demo-webhook-secret")}
		mu.Lock()
		verdicts = append(verdicts, v.Verify(r.Header.Get(paysig.Header), raw))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"result":"success"}`)
	}))
	t.Cleanup(rcv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := started(ctx, t, cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))

	c, err := payclient.New(base, 5*time.Second)
	require.NoError(t, err)
	_, created, err := c.CreatePayment(ctx, payclient.CreatePaymentRequest{
		MerchantOrderNo: "1", AmountCents: 1999, Currency: "EUR", NotifyURL: rcv.URL + "/v1/payments/callback"})
	require.NoError(t, err)
	assert.True(t, created)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(verdicts) == 2
	}, 5*time.Second, 5*time.Millisecond, "two signed copies (CHAOS_DUPLICATES=2)")
	mu.Lock()
	for _, v := range verdicts {
		assert.NoError(t, v)
	}
	mu.Unlock()

	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		status, _ := get(path)
		assert.Equal(t, http.StatusOK, status, path)
	}
	// The receiver counts a callback before its ack reaches the platform: poll for the counter.
	require.Eventually(t, func() bool {
		_, m := get("/metrics")
		return strings.Contains(m, `idemshop_paymock_callbacks_sent_total{outcome="success"} 2`)
	}, 5*time.Second, 5*time.Millisecond, "both attempts counted as success")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the context ended")
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	cfg := config.DefaultPaymentsMock()
	cfg.ChaosSeed = "minus-one"
	cfg.ChaosDuplicates = 0
	cfg.ChaosErrorRate = 2
	cfg.ChaosResetRate = -0.1
	cfg.ChaosDelaySuccessMS = 60001
	cfg.CallbackRetrySchedule = append(cfg.CallbackRetrySchedule, -time.Second)
	cfg.IDTag = "Not_A-Tag"
	err := cfg.Validate()
	require.Error(t, err)
	for _, name := range []string{"CHAOS_SEED", "CHAOS_DUPLICATES", "CHAOS_ERROR_RATE", "CHAOS_RESET_RATE",
		"CHAOS_DELAY_SUCCESS_MS", "CALLBACK_RETRY_SCHEDULE", "ID_TAG"} {
		assert.True(t, strings.Contains(err.Error(), name), "%s missing from %v", name, err)
	}
	def := config.DefaultPaymentsMock()
	assert.Equal(t, ":8081", def.HTTPAddr)
	assert.Equal(t, 200*time.Millisecond, def.AutoApproveDelay)
	assert.Equal(t, 7, len(def.CallbackRetrySchedule))
	assert.Zero(t, def.ChaosResetRate)
	assert.Zero(t, def.ChaosDelaySuccessMS)
	assert.NoError(t, def.Validate())
}

// TestChaosEnvReachesThePlatform reads CHAOS_RESET_RATE and CHAOS_DELAY_SUCCESS_MS from the environment
// and checks them where they end up: GET /admin/chaos of the running binary. Not parallel: t.Setenv.
func TestChaosEnvReachesThePlatform(t *testing.T) {
	// Unparsable, then out of range; one variable at a time, so each error is that variable's.
	for _, bad := range [][2]string{
		{"CHAOS_RESET_RATE", "often"}, {"CHAOS_RESET_RATE", "1.5"},
		{"CHAOS_DELAY_SUCCESS_MS", "1s"}, {"CHAOS_DELAY_SUCCESS_MS", "-1"}, {"CHAOS_DELAY_SUCCESS_MS", "60001"},
	} {
		t.Setenv(bad[0], bad[1])
		_, err := config.LoadPaymentsMock()
		require.Error(t, err, "%s=%s", bad[0], bad[1])
		assert.Contains(t, err.Error(), bad[0])
		require.NoError(t, os.Unsetenv(bad[0])) // t.Setenv restores the original value at the end
	}

	t.Setenv("ADMIN_TOKEN", "") // loopback access, whatever the shell has
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("CHAOS_SEED", "5")
	t.Setenv("CHAOS_RESET_RATE", "0.25")
	t.Setenv("CHAOS_DELAY_SUCCESS_MS", "1500")
	cfg, err := config.LoadPaymentsMock()
	require.NoError(t, err)
	assert.Equal(t, 0.25, cfg.ChaosResetRate)
	assert.Equal(t, int64(1500), cfg.ChaosDelaySuccessMS)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := started(ctx, t, cfg, slog.New(slog.DiscardHandler))
	resp, err := http.Get(base + "/admin/chaos")
	require.NoError(t, err)
	var got struct {
		ResetRate      float64 `json:"reset_rate"`
		DelaySuccessMS int64   `json:"delay_success_ms"`
		Seed           uint64  `json:"seed"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	assert.Equal(t, 0.25, got.ResetRate)
	assert.Equal(t, int64(1500), got.DelaySuccessMS)
	assert.Equal(t, uint64(5), got.Seed)

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the context ended")
	}
}

// A payments-mock started again hands out none of the ids of the one before, even on the same seed:
// its ids are counters, and a shop whose database outlived the first one would take the new evt_7
// for the old one (a refund answered duplicate, or refused as event_id_reused) and refund the new
// pay_3 when it asked to refund the old. ID_TAG fixes the tag, so a run's ids can be reproduced.
func TestARestartedPlatformHandsOutNewIDs(t *testing.T) {
	t.Parallel()
	firstPayment := func(tag string) string {
		cfg := config.DefaultPaymentsMock()
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.AutoApproveDelay = 0
		cfg.ChaosSeed = "7"
		cfg.IDTag = tag
		require.NoError(t, cfg.Validate())
		ctx, cancel := context.WithCancel(context.Background())
		base, done := started(ctx, t, cfg, slog.New(slog.DiscardHandler))
		defer func() {
			cancel()
			require.NoError(t, <-done)
		}()
		c, err := payclient.New(base, 5*time.Second)
		require.NoError(t, err)
		p, _, err := c.CreatePayment(ctx, payclient.CreatePaymentRequest{MerchantOrderNo: "1", AmountCents: 1999, Currency: "EUR"})
		require.NoError(t, err)
		return p.ID
	}
	a, b := firstPayment(""), firstPayment("")
	assert.Regexp(t, `^pay_[0-9a-f]{8}_1$`, a)
	assert.Regexp(t, `^pay_[0-9a-f]{8}_1$`, b)
	assert.NotEqual(t, a, b, "the same first call on the same seed, after a restart")
	assert.Equal(t, "pay_run42_1", firstPayment("run42"))
	assert.Equal(t, "pay_run42_1", firstPayment("run42"), "ID_TAG reproduces the ids")
}

// A shutdown does not wait for a create that create_timeout holds: the held answer (an hour here) ends
// with its 504 when the shutdown begins, and serve returns without overrunning SHUTDOWN_TIMEOUT (it
// returned the drain's deadline error, exit 1, after holding SIGTERM for the whole timeout).
func TestShutdownEndsAHeldCreate(t *testing.T) {
	t.Parallel()
	cfg := config.DefaultPaymentsMock()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.AutoApproveDelay = 0
	cfg.ChaosSeed = "3"
	cfg.ChaosCreateTimeoutRate = 1
	cfg.CreateTimeoutDelay = time.Hour
	cfg.ShutdownTimeout = time.Second
	require.NoError(t, cfg.Validate())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := started(ctx, t, cfg, slog.New(slog.DiscardHandler))
	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.Post(base+"/v1/payments", "application/json",
			strings.NewReader(`{"merchant_order_no":"1","amount_cents":1999,"currency":"EUR"}`))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- answer{status: resp.StatusCode, body: string(b)}
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(m), `idemshop_paymock_payment_creates_total{result="chaos_timeout"} 1`)
	}, 5*time.Second, 5*time.Millisecond, "the create is held")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "the drain did not wait for the held create")
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the context ended")
	}
	var a answer
	select {
	case a = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the held create was never answered")
	}
	require.NoError(t, a.err)
	assert.Equal(t, http.StatusGatewayTimeout, a.status)
	assert.Equal(t, "upstream request timeout\n", a.body)
}

// started runs serve with cfg in the background until ctx ends, and returns the base URL it listens on
// and the channel serve's result arrives on.
func started(ctx context.Context, t *testing.T, cfg config.PaymentsMock, logger *slog.Logger) (string, <-chan error) {
	t.Helper()
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logger, func(a net.Addr) { addrc <- a }) }()
	select {
	case a := <-addrc:
		return "http://" + a.String(), done
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("server did not start")
	}
	return "", done
}

// Arguments are refused, not ignored: `payments-mock --help` started it (a helper's finding, 2026-12-06).
func TestArgumentsAreRefused(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/payments-mock")
	out, err := exec.Command(bin, "--help").CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, string(out), `takes no arguments, got "--help"`)
}
