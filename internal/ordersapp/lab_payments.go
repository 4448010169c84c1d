package ordersapp

import (
	"fmt"
	"time"

	"idemshop/internal/callback"
	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/pay"
	"idemshop/internal/payclient"
)

// labStockLockWait is how long an S5 callback queues for the flash-sale lock. Long enough that every
// callback of a sale gets the lock in the end: the failure S5 shows is the lease running out under its
// holder, not a waiter giving up and going ahead without it.
const labStockLockWait = 10 * time.Second

// mountLabPayments mounts the unsafe twins of the stock decrement and the pay flow (S5, S7). S8's
// late write has routes of its own (lab_s8.go).
//
//   - POST /lab/unsafe/s5/payments/callback: check-then-write stock under a fenceless Redis lease of
//     LAB_STOCK_LOCK_TTL per product;
//   - POST /lab/unsafe/v1/s7/orders/{id}/pay: platform call first, nothing recorded, a fresh platform
//     reference per request.
func mountLabPayments(p labParts) error {
	cfg := p.d.Config
	locker, err := lock.New(p.d.Redis, cfg.Redis.KeyPrefix)
	if err != nil {
		return fmt.Errorf("lab S5: %w", err)
	}
	flashSale, err := callback.NewFlashSaleLock(locker, p.d.DB, p.repo, cfg.LabStockLockTTL, labStockLockWait)
	if err != nil {
		return fmt.Errorf("lab S5: %w", err)
	}
	if err := mountLabCallback(p, "/lab/unsafe/s5/payments/callback", callback.CheckThenWriteStock, flashSale); err != nil {
		return fmt.Errorf("lab S5: %w", err)
	}

	// A payer of its own, built from the same parts as the guarded one; PayUnsafe uses only its
	// orders repository and platform client.
	store, err := idempotency.NewStore(p.d.DB, p.idemMetrics)
	if err != nil {
		return fmt.Errorf("lab S7: %w", err)
	}
	client, err := payclient.New(cfg.PaymentsURL, cfg.PaymentsTimeout)
	if err != nil {
		return fmt.Errorf("lab S7: %w", err)
	}
	payer, err := pay.NewPayer(p.d.DB, p.repo, store, p.idemMetrics, nil, client, p.settler,
		pay.Config{CallbackURL: cfg.CallbackURL, PaymentsURL: cfg.PaymentsURL, Lease: cfg.PayLease},
		nil)
	if err != nil {
		return fmt.Errorf("lab S7: %w", err)
	}
	p.v1.POST("/s7/orders/:id/pay", pay.ServeUnsafe(payer))
	return nil
}
