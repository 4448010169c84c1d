package ordersapp

import (
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/callback"
	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/orders"
	"idemshop/internal/pay"
	"idemshop/internal/payclient"
	"idemshop/internal/platform/fault"
	"idemshop/internal/refunds"
	"idemshop/internal/sweeper"
)

// mountPay adds POST /v1/orders/{id}/pay and returns the sweeper that resolves its stuck records and the
// reconciler that compares orders with the platform. settler is the callback service.
func mountPay(v1 *echo.Group, d Deps, repo *orders.Repository, m *idempotency.Metrics, settler *callback.Service) (*sweeper.Sweeper, *sweeper.Reconciler, error) {
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
	hook := d.PayFault
	if cfg.Lab && cfg.PayFault != "" { // config refuses PAY_FAULT without ORDERS_LAB
		if hook, err = fault.Kill("PAY_FAULT", fault.Point(cfg.PayFault), pay.Points, d.Logger); err != nil {
			return nil, nil, err
		}
	}
	payer, err := pay.NewPayer(d.DB, repo, store, m, locker, client, settler,
		pay.Config{CallbackURL: cfg.CallbackURL, PaymentsURL: cfg.PaymentsURL, Lease: cfg.PayLease}, hook)
	if err != nil {
		return nil, nil, err
	}
	h, err := pay.NewHandler(payer, m)
	if err != nil {
		return nil, nil, err
	}
	h.Mount(v1)
	refunder, err := refunds.NewExecutor(d.DB, client, d.Logger, d.Registry, cfg.SweepBatch,
		refunds.RetryPolicy{Min: cfg.RefundRetryMin, Max: cfg.RefundRetryMax}, cfg.SweepMaxAttempts)
	if err != nil {
		return nil, nil, err
	}
	sw, err := sweeper.NewSweeper(payer, store, client, refunder, d.Logger, d.Registry, cfg.SweepMaxAttempts, cfg.SweepBatch)
	if err != nil {
		return nil, nil, err
	}
	reconciler, err := sweeper.NewReconciler(sw, settler, repo, locker, sweeper.ReconcileConfig{
		Grace: cfg.ReconcileGrace, Recheck: cfg.ReconcileRecheck, Lookback: cfg.ReconcileLookback, Batch: cfg.ReconcileBatch,
		RefundDriftAfter: cfg.ReconcileRefundDriftAfter, PointsAfter: cfg.ReconcilePointsAfter,
	}, d.Logger, d.Registry)
	if err != nil {
		return nil, nil, err
	}
	return sw, reconciler, nil
}
