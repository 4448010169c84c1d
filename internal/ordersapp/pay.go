package ordersapp

import (
	"github.com/labstack/echo/v4"

	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/orders"
	"idemshop/internal/payclient"
	"idemshop/internal/payments"
)

// mountPay adds POST /v1/orders/{id}/pay and returns the sweeper that resolves its stuck records.
func mountPay(v1 *echo.Group, d Deps, repo *orders.Repository, m *idempotency.Metrics) (*payments.Sweeper, error) {
	cfg := d.Config
	store, err := idempotency.NewStore(d.DB, m)
	if err != nil {
		return nil, err
	}
	locker, err := lock.New(d.Redis, cfg.Redis.KeyPrefix)
	if err != nil {
		return nil, err
	}
	client, err := payclient.New(cfg.PaymentsURL, cfg.PaymentsTimeout)
	if err != nil {
		return nil, err
	}
	faults := d.PayFaults
	if cfg.Lab && cfg.PayFault != "" {
		if faults, err = payments.CrashFaults(cfg.PayFault); err != nil {
			return nil, err
		}
		d.Logger.Warn("LAB MODE: the pay flow will crash this process on purpose", "pay_fault", cfg.PayFault)
	}
	payer, err := payments.NewPayer(d.DB, repo, store, m, locker, client,
		payments.PayConfig{CallbackURL: cfg.CallbackURL, PaymentsURL: cfg.PaymentsURL, Lease: cfg.PayLease}, faults)
	if err != nil {
		return nil, err
	}
	h, err := payments.NewPayHandler(payer, m)
	if err != nil {
		return nil, err
	}
	h.Mount(v1)
	return payments.NewSweeper(payer, d.Logger, d.Registry, cfg.SweepMaxAttempts, cfg.SweepBatch)
}
