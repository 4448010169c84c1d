package payclient_test

import (
	"context"
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

	"idemshop/internal/payclient"
	"idemshop/internal/paymock"
	"idemshop/internal/platform/httpserver"
)

// platform starts a real payments-mock on loopback and returns its URL.
func platform(t *testing.T, chaos paymock.Chaos, createTimeoutDelay time.Duration) string {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	p, err := paymock.New(paymock.Config{
		Secret: []byte("s"), RetrySchedule: []time.Duration{10 * time.Millisecond}, CallbackTimeout: time.Second,
		CreateTimeoutDelay: createTimeoutDelay, DeliveryLogLimit: 100, Chaos: chaos,
	}, logger, reg)
	require.NoError(t, err)
	e := httpserver.New(logger, reg, 1<<20)
	p.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return srv.URL
}

// patient is the client timeout of calls that must be answered: far longer than a loaded machine takes
// to answer on loopback, so that no such call ends as a timeout instead.
const patient = time.Minute

func newClient(t *testing.T, url string, timeout time.Duration) *payclient.Client {
	t.Helper()
	c, err := payclient.New(url, timeout)
	require.NoError(t, err)
	return c
}

var calm = paymock.Chaos{Duplicates: 1, Seed: 1}

func TestClientAgainstThePlatform(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, platform(t, calm, time.Second), patient)
	req := payclient.CreatePaymentRequest{MerchantOrderNo: "42", AmountCents: 1999, Currency: "EUR", NotifyURL: "http://127.0.0.1:9/cb"}

	p, created, err := c.CreatePayment(ctx, req)
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, "PENDING", p.Status)
	again, created, err := c.CreatePayment(ctx, req)
	require.NoError(t, err)
	assert.False(t, created, "the same order: replayed")
	assert.Equal(t, p, again)

	req.AmountCents = 2000
	_, _, err = c.CreatePayment(ctx, req)
	status, code, refused := payclient.Refused(err)
	assert.True(t, refused, "%v", err)
	assert.Equal(t, http.StatusConflict, status)
	assert.Equal(t, "merchant_order_no_conflict", code)
	assert.False(t, payclient.OutcomeUnknown(err))

	got, err := c.GetPayment(ctx, p.ID)
	require.NoError(t, err)
	assert.Equal(t, p, got)
	_, err = c.GetPayment(ctx, "pay_404")
	assert.True(t, payclient.IsNotFound(err), "%v", err)

	found, ok, err := c.FindByMerchantOrderNo(ctx, "42")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, p.ID, found.ID)
	_, ok, err = c.FindByMerchantOrderNo(ctx, "43")
	require.NoError(t, err)
	assert.False(t, ok, "a definite no")

	approved, err := c.Approve(ctx, p.ID)
	require.NoError(t, err)
	assert.Equal(t, "SUCCESS", approved.Status)
	_, err = c.Decline(ctx, p.ID)
	_, code, refused = payclient.Refused(err)
	assert.True(t, refused)
	assert.Equal(t, "payment_not_pending", code)

	r, created, err := c.Refund(ctx, payclient.RefundRequest{PaymentID: p.ID, RefundNo: "r1", AmountCents: 999})
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, int64(999), r.AmountCents)
	r2, created, err := c.Refund(ctx, payclient.RefundRequest{PaymentID: p.ID, RefundNo: "r1", AmountCents: 999})
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, r, r2)
	_, _, err = c.Refund(ctx, payclient.RefundRequest{PaymentID: p.ID, RefundNo: "r2", AmountCents: 1001})
	status, code, _ = payclient.Refused(err)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "refund_exceeds_payment", code)

	d, _, err := c.CreatePayment(ctx, payclient.CreatePaymentRequest{MerchantOrderNo: "44", AmountCents: 100, Currency: "EUR", NotifyURL: "http://127.0.0.1:9/cb"})
	require.NoError(t, err)
	declined, err := c.Decline(ctx, d.ID)
	require.NoError(t, err)
	assert.Equal(t, "FAILED", declined.Status)
}

// The platform commits, then holds its answer until the caller hangs up: the client's own timeout ends
// the call. That timeout (2 s) is long enough for the platform to have read and committed the request
// on a loaded machine, which takes milliseconds; a 200 ms one could end the call before that.
func TestClientCreateTimeoutIsUnknownButTheQueryAPIKnows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := platform(t, paymock.Chaos{Duplicates: 1, CreateTimeoutRate: 1, Seed: 1}, time.Hour)
	c := newClient(t, url, 2*time.Second)
	_, _, err := c.CreatePayment(ctx, payclient.CreatePaymentRequest{MerchantOrderNo: "7", AmountCents: 500, Currency: "EUR", NotifyURL: "http://127.0.0.1:9/cb"})
	assert.ErrorIs(t, err, payclient.ErrTimeout)
	assert.True(t, payclient.OutcomeUnknown(err))
	_, _, refused := payclient.Refused(err)
	assert.False(t, refused)

	p, found, err := c.FindByMerchantOrderNo(ctx, "7")
	require.NoError(t, err)
	require.True(t, found, "the payment was committed before the timeout")
	assert.Equal(t, int64(500), p.AmountCents)
}

func TestClientGatewayTimeoutIsAServerError(t *testing.T) {
	t.Parallel()
	url := platform(t, paymock.Chaos{Duplicates: 1, CreateTimeoutRate: 1, Seed: 1}, 10*time.Millisecond)
	c := newClient(t, url, patient)
	_, _, err := c.CreatePayment(context.Background(), payclient.CreatePaymentRequest{MerchantOrderNo: "8", AmountCents: 500, Currency: "EUR", NotifyURL: "http://127.0.0.1:9/cb"})
	assert.ErrorIs(t, err, payclient.ErrServer)
	var se *payclient.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusGatewayTimeout, se.Status)
	assert.Empty(t, se.Code, "a gateway's plain-text answer has no problem code")
	assert.True(t, payclient.OutcomeUnknown(err))
}

func TestClientErrorClasses(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    error
	}{
		{"503 problem", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"status":503,"code":"chaos_error","detail":"x"}`))
		}, payclient.ErrServer},
		{"422 problem", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(422)
			_, _ = w.Write([]byte(`{"status":422,"code":"nope","detail":"x"}`))
		}, payclient.ErrRefused},
		{"2xx garbage", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }, payclient.ErrProtocol},
		{"no answer in time", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}, payclient.ErrTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			// Only the handler that never answers meets the short timeout; the others answer at once and
			// get patient, so a slow machine cannot turn their answer into a timeout.
			timeout := patient
			if errors.Is(tc.want, payclient.ErrTimeout) {
				timeout = 200 * time.Millisecond
			}
			_, err := newClient(t, srv.URL, timeout).GetPayment(context.Background(), "pay_1")
			assert.ErrorIs(t, err, tc.want)
			assert.Equal(t, !errors.Is(tc.want, payclient.ErrRefused), payclient.OutcomeUnknown(err), "%v", err)
		})
	}

	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close()) // nothing listens there now
		_, err = newClient(t, "http://"+addr, patient).GetPayment(context.Background(), "pay_1")
		assert.ErrorIs(t, err, payclient.ErrConnection)
		assert.True(t, payclient.OutcomeUnknown(err))
	})

	t.Run("context deadline", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(cases[3].handler)
		t.Cleanup(srv.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := newClient(t, srv.URL, 10*time.Second).GetPayment(ctx, "pay_1")
		assert.ErrorIs(t, err, payclient.ErrTimeout)
	})
}

func TestNewRefusesBadArguments(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"", "127.0.0.1:8081", "ftp://x", "http://"} {
		_, err := payclient.New(url, time.Second)
		assert.Error(t, err, url)
	}
	_, err := payclient.New("http://127.0.0.1:8081", 0)
	assert.Error(t, err)
}
