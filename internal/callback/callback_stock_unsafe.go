package callback

// LAB ONLY — oversell in a flash sale (lab scenario S5): the naive team guarded the stock check with a
// Redis lock per product and wrote the check as a read, then a write. The lock is a lease with a short
// TTL and no fencing token. In a flash sale every callback queues on the same product, the database step
// gets slower, the lease runs out while its holder is still between its SELECT and its UPDATE, the next
// waiter walks in and reads the same stock, and both deduct: stock goes below zero. Mounted only with
// ORDERS_LAB=true, at POST /lab/unsafe/s5/payments/callback. Compare applyStockUnsafe with apply in
// callback.go: the state guard is the same; the stock step is DecrementStockUnsafe (orders/stock_unsafe.go)
// instead of the conditional UPDATE of DecrementStock, which needs no lock.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"

	"idemshop/internal/lock"
	"idemshop/internal/orders"
)

// FlashSaleLockName is the Redis lock of a product's stock in the S5 unsafe variant.
func FlashSaleLockName(productID int64) string {
	return "lab:stock:product:" + strconv.FormatInt(productID, 10)
}

// CheckThenWriteStock is the S5 applier: Guarded with the stock step written as check-then-write. The
// assembly gives its service a FlashSaleLock (production takes no lock).
var CheckThenWriteStock = Applier{name: "s5-check-then-write-stock", apply: (*Service).applyStockUnsafe, resendFastPath: true}

// FlashSaleLock is the lock the naive team trusted with the stock: one lease per product, taken before
// the callback transaction and released after its commit. While the lease lasts it does exclude other
// callbacks; nothing tells its holder when it has stopped lasting.
type FlashSaleLock struct {
	locker *lock.Locker
	db     *gorm.DB
	orders *orders.Repository
	ttl    time.Duration
	wait   time.Duration
}

// NewFlashSaleLock returns S5's lock: a fenceless lease of ttl per product, queueing up to wait.
func NewFlashSaleLock(locker *lock.Locker, db *gorm.DB, repo *orders.Repository, ttl, wait time.Duration) (*FlashSaleLock, error) {
	if locker == nil || db == nil || repo == nil || ttl < time.Millisecond || wait < 0 {
		return nil, errors.New("callback: NewFlashSaleLock needs a locker, a db, an orders repository, ttl >= 1ms and wait >= 0")
	}
	return &FlashSaleLock{locker: locker, db: db, orders: repo, ttl: ttl, wait: wait}, nil
}

// Lock takes the product's lease for the order's product (the OrderLock interface hands in the order).
func (l *FlashSaleLock) Lock(ctx context.Context, orderID int64) (func(), error) {
	o, err := l.orders.Lookup(ctx, l.db, orderID)
	if err != nil {
		return nil, err
	}
	lease, err := l.locker.AcquireWait(ctx, FlashSaleLockName(o.ProductID), l.ttl, l.wait)
	if err != nil {
		return nil, err
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = l.locker.Release(rctx, lease) // ErrLost: the lease ran out under us, which is the bug shown
	}, nil
}

// applyStockUnsafe is apply with the stock step written as check-then-write
// (orders.Repository.DecrementStockUnsafe): correct only while the flash-sale lock still excludes
// everybody else, and it may not.
//
// Lab only: this transaction waits on a held product row for as long as it is held (up to the
// session's statement_timeout), not DB_LOCK_TIMEOUT. S5's slow step holds the row until enough holders
// have queued behind it, one lease at a time, at the lab's pace; a holder must not give up (503) while
// the queue forms, however slow the machine is.
func (s *Service) applyStockUnsafe(ctx context.Context, tx *gorm.DB, cb Callback, o orders.Order) (Outcome, string, error) {
	if err := tx.WithContext(ctx).Exec(`SET LOCAL lock_timeout = 0`).Error; err != nil {
		return "", "", fmt.Errorf("unsafe: lift lock_timeout: %w", err)
	}
	return s.applyWithStock(ctx, tx, cb, o, s.orders.DecrementStockUnsafe)
}
