package orders

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// Repository holds the orders SQL.
type Repository struct {
	db *gorm.DB
}

// NewRepository returns a Repository over db.
func NewRepository(db *gorm.DB) (*Repository, error) {
	if db == nil {
		return nil, errors.New("orders: NewRepository needs a db")
	}
	return &Repository{db: db}, nil
}

// Products lists the catalogue, by id.
func (r *Repository) Products(ctx context.Context) ([]Product, error) {
	ps := []Product{}
	if err := r.db.WithContext(ctx).Table("products").Order("id").Find(&ps).Error; err != nil {
		return nil, fmt.Errorf("list products: %w", err)
	}
	return ps, nil
}

// Create inserts a PENDING order for userID inside tx, the caller's transaction (the one that also holds
// the idempotency key row). Stock is checked, not deducted: it is deducted once, when payment succeeds.
// Errors: ErrUnknownProduct, ErrInsufficientStock, or a wrapped database error.
func (r *Repository) Create(ctx context.Context, tx *gorm.DB, userID int64, req CreateRequest) (Order, error) {
	var p Product
	res := tx.WithContext(ctx).Table("products").Where("id = ?", req.ProductID).Limit(1).Find(&p)
	if res.Error != nil {
		return Order{}, fmt.Errorf("read product %d: %w", req.ProductID, res.Error)
	}
	if res.RowsAffected == 0 {
		return Order{}, ErrUnknownProduct
	}
	if p.Stock < int64(req.Quantity) {
		return Order{}, ErrInsufficientStock
	}
	amount, err := Amount(p.PriceCents, req.Quantity)
	if err != nil {
		return Order{}, err
	}
	o := Order{UserID: userID, Status: StatusPending, ProductID: p.ID, Quantity: req.Quantity,
		AmountCents: amount, Currency: p.Currency}
	err = tx.WithContext(ctx).Raw(`INSERT INTO orders (user_id, product_id, quantity, amount_cents, currency, status)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id, created_at, updated_at`,
		o.UserID, o.ProductID, o.Quantity, o.AmountCents, o.Currency, o.Status).
		Row().Scan(&o.ID, &o.CreatedAt, &o.UpdatedAt)
	if err != nil {
		return Order{}, fmt.Errorf("insert order: %w", err)
	}
	return o, nil
}

// Get returns userID's order id. Another user's order is ErrOrderNotFound, exactly like a missing one,
// so ids cannot be probed.
func (r *Repository) Get(ctx context.Context, userID, id int64) (Order, error) {
	var o Order
	res := r.db.WithContext(ctx).Table("orders").Where("id = ? AND user_id = ?", id, userID).Limit(1).Find(&o)
	if res.Error != nil {
		return Order{}, fmt.Errorf("read order %d: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return Order{}, ErrOrderNotFound
	}
	return o, nil
}
