package orders

// LAB ONLY — oversell in a flash sale (lab scenario S5): the stock check is a read, then a write, and
// only a Redis lock keeps two buyers apart between them. When the lock's lease runs out while its holder
// is still between the SELECT and the UPDATE (a slow database step, a queue on the hot product row),
// the next holder reads the same stock, both pass the check, and both deduct: stock goes below zero.
// Compare DecrementStockUnsafe with DecrementStock in repository.go: the guard is `AND stock >= ?` in
// the UPDATE itself, which needs no lock at all.

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// DecrementStockUnsafe is DecrementStock written as check-then-write. It is only correct while its
// caller's lock really excludes every other caller for the whole transaction, which a lease cannot
// promise.
func (r *Repository) DecrementStockUnsafe(ctx context.Context, tx *gorm.DB, productID int64, quantity int) (bool, error) {
	var stock int64
	if err := tx.WithContext(ctx).Raw(`SELECT stock FROM products WHERE id = ?`, productID).Scan(&stock).Error; err != nil {
		return false, fmt.Errorf("unsafe: read stock of product %d: %w", productID, err)
	}
	if stock < int64(quantity) {
		return false, nil
	}
	// No "AND stock >= ?": the check above is trusted, though another transaction may have taken the
	// same units since.
	if err := tx.WithContext(ctx).Exec(`UPDATE products SET stock = stock - ? WHERE id = ?`,
		quantity, productID).Error; err != nil {
		return false, fmt.Errorf("unsafe: decrement stock of product %d: %w", productID, err)
	}
	return true, nil
}
