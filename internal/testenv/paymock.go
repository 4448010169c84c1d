package testenv

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/paymock"
	"idemshop/internal/platform/httpserver"
)

// PaymentsMock is payments-mock running in the test process behind a loopback server, with the same
// Echo chain as the binary and a registry of its own (tests read its metrics).
type PaymentsMock struct {
	*paymock.Platform
	Server   *httptest.Server
	Registry *prometheus.Registry
}

// StartPaymentsMock starts payments-mock with cfg and stops it when t ends.
func StartPaymentsMock(t testing.TB, cfg paymock.Config) *PaymentsMock {
	t.Helper()
	t.Logf("payments-mock chaos seed %d", cfg.Chaos.Seed)
	logger := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	p, err := paymock.New(cfg, logger, reg)
	if err != nil {
		t.Fatalf("testenv: payments-mock: %v", err)
	}
	e := httpserver.New(logger, reg, 1<<20)
	p.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		srv.Close() // first: no request in flight when the platform closes
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return &PaymentsMock{Platform: p, Server: srv, Registry: reg}
}
