// Command payments-mock is the flaky payment platform the shop is tested against: payments, refunds,
// a query API and signed callbacks with chaos. Configuration comes from the environment; see
// docs/payments-mock.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"idemshop/internal/paymock"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/platform/logging"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "payments-mock:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 {
		// Refused, not ignored: `payments-mock --help` started serving.
		return fmt.Errorf("takes no arguments, got %q (its settings are environment variables: docs/payments-mock.md)",
			strings.Join(os.Args[1:], " "))
	}
	cfg, err := config.LoadPaymentsMock()
	if err != nil {
		return err
	}
	logger, err := logging.New(os.Stderr, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The address bound, not the one asked for: HTTP_ADDR=127.0.0.1:0 takes any free port.
	return serve(ctx, cfg, logger, func(addr net.Addr) { logger.Info("payments-mock listening", "addr", addr.String()) })
}

// serve runs the platform until ctx ends. ready, when non-nil, receives the bound address.
func serve(ctx context.Context, cfg config.PaymentsMock, logger *slog.Logger, ready func(net.Addr)) error {
	seed, ok, err := cfg.Seed()
	if err != nil {
		return err
	}
	if !ok {
		// Below 2^53 so the seed survives JSON tools that read numbers as doubles; logged so the run can
		// be reproduced with CHAOS_SEED.
		seed = rand.Uint64N(1 << 53)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	chaos := paymock.Chaos{
		Duplicates: cfg.ChaosDuplicates, Parallel: cfg.ChaosParallel, JitterMS: cfg.ChaosJitterMS,
		Reorder: cfg.ChaosReorder, AckLossRate: cfg.ChaosAckLossRate, CreateTimeoutRate: cfg.ChaosCreateTimeoutRate,
		ResetRate: cfg.ChaosResetRate, ErrorRate: cfg.ChaosErrorRate, DelaySuccessMS: cfg.ChaosDelaySuccessMS,
		Seed: seed,
	}
	idTag := cfg.IDTag
	if idTag == "" {
		// A platform started again must not hand out the ids of the one before (paymock.Config.IDTag).
		idTag = paymock.NewIDTag()
	}
	platform, err := paymock.New(paymock.Config{
		Secret: []byte(cfg.PaymentWebhookSecret), AutoApproveDelay: cfg.AutoApproveDelay,
		RetrySchedule: cfg.CallbackRetrySchedule, CallbackTimeout: cfg.CallbackTimeout,
		CreateTimeoutDelay: cfg.CreateTimeoutDelay, AdminToken: cfg.AdminToken,
		DeliveryLogLimit: cfg.DeliveryLogLimit, Chaos: chaos, IDTag: idTag,
	}, logger, reg)
	if err != nil {
		return err
	}
	e := httpserver.New(logger, reg, cfg.BodyLimitBytes)
	httpserver.MountOps(e, reg, time.Second) // no dependencies: ready when alive
	platform.Register(e)
	// At SIGTERM, before the drain: a create held by create_timeout would keep the drain waiting.
	defer context.AfterFunc(ctx, platform.EndHeldAnswers)()

	logger.Info("payments-mock starting", "addr", cfg.HTTPAddr, "chaos_seed", seed, "id_tag", idTag,
		"chaos", fmt.Sprintf("%+v", chaos), "auto_approve_delay", cfg.AutoApproveDelay,
		"retry_schedule", fmt.Sprint(cfg.CallbackRetrySchedule), "admin", adminMode(cfg.AdminToken))
	err = httpserver.Run(ctx, e, cfg.HTTP.Server(cfg.HTTPAddr), ready)
	if errors.Is(err, httpserver.ErrDrainCut) {
		logger.Warn("payments-mock: "+httpserver.ErrDrainCut.Error(), "shutdown_timeout", cfg.HTTP.ShutdownTimeout)
		err = nil
	}
	// The server no longer accepts requests. Pending retries are dropped; an attempt already on the wire
	// gets up to one callback timeout to finish.
	cctx, cancel := context.WithTimeout(context.Background(), cfg.CallbackTimeout)
	defer cancel()
	if cerr := platform.Close(cctx); cerr != nil {
		logger.Warn("callbacks cut short at shutdown", "err", cerr)
	}
	logger.Info("payments-mock stopped")
	return err
}

func adminMode(token string) string {
	if token == "" {
		return "loopback only"
	}
	return "bearer token"
}
