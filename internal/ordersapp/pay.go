package ordersapp

import (
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/orders"
	"idemshop/internal/payclient"
	"idemshop/internal/payments"
)

// mountPay adds POST /v1/orders/{id}/pay and returns the sweeper that resolves its stuck records and the
// reconciler that compares orders with the platform. settler is the callback service.
func mountPay(v1 *echo.Group, d Deps, repo *orders.Repository, m *idempotency.Metrics, settler *payments.Service) (*payments.Sweeper, *payments.Reconciler, error) {
	cfg := d.Config
	store, err := idempotency.NewStore(d.DB, m)
	if err != nil {
		return nil, nil, err
	}
	// A fence counter may expire (bounded Redis) only after every record it fenced has been reaped.
	locker, err := lock.New(d.Redis, cfg.Redis.KeyPrefix, lock.FenceTTL(cfg.IdempotencyRetention+cfg.ReaperInterval+time.Hour))
	if err != nil {
		return nil, nil, err
	}
	client, err := payclient.New(cfg.PaymentsURL, cfg.PaymentsTimeout)
	if err != nil {
		return nil, nil, err
	}
	faults := d.PayFaults
	if cfg.Lab && cfg.PayFault != "" {
		if faults, err = payments.CrashFaults(cfg.PayFault); err != nil {
			return nil, nil, err
		}
		d.Logger.Warn("LAB MODE: the pay flow will crash this process on purpose", "pay_fault", cfg.PayFault)
	}
	payer, err := payments.NewPayer(d.DB, repo, store, m, locker, client, settler,
		payments.PayConfig{CallbackURL: cfg.CallbackURL, PaymentsURL: cfg.PaymentsURL, Lease: cfg.PayLease}, faults)
	if err != nil {
		return nil, nil, err
	}
	h, err := payments.NewPayHandler(payer, m)
	if err != nil {
		return nil, nil, err
	}
	h.Mount(v1)
	sweeper, err := payments.NewSweeper(payer, d.Logger, d.Registry, cfg.SweepMaxAttempts, cfg.SweepBatch)
	if err != nil {
		return nil, nil, err
	}
	reconciler, err := payments.NewReconciler(sweeper, settler, payments.ReconcileConfig{
		Grace: cfg.ReconcileGrace, Recheck: cfg.ReconcileRecheck, Lookback: cfg.ReconcileLookback, Batch: cfg.ReconcileBatch,
	}, d.Logger, d.Registry)
	if err != nil {
		return nil, nil, err
	}
	return sweeper, reconciler, nil
}
