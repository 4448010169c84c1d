package rewards

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"idemshop/internal/platform/pgtext"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/points"
)

// Repository holds the rewards SQL.
type Repository struct {
	db *gorm.DB
}

// NewRepository returns a Repository over db.
func NewRepository(db *gorm.DB) (*Repository, error) {
	if db == nil {
		return nil, errors.New("rewards: NewRepository needs a db")
	}
	return &Repository{db: db}, nil
}

// Catalogue lists the rewards, cheapest first.
func (r *Repository) Catalogue(ctx context.Context) ([]Reward, error) {
	rs := []Reward{}
	err := r.db.WithContext(ctx).Raw(`SELECT id, name, cost_points FROM rewards ORDER BY cost_points, id`).
		Scan(&rs).Error
	if err != nil {
		return nil, fmt.Errorf("list rewards: %w", err)
	}
	return rs, nil
}

// maxRewardID bounds a reward id from a request (bytes); the catalogue's ids are far shorter.
const maxRewardID = 64

// Reward returns reward id, or ErrUnknownReward. id comes from the request: it is cleaned first
// (pgtext), so that a NUL or broken UTF-8 is an unknown reward (400), not a failed statement (500).
func (r *Repository) Reward(ctx context.Context, id string) (Reward, error) {
	var rw Reward
	res := r.db.WithContext(ctx).Raw(`SELECT id, name, cost_points FROM rewards WHERE id = ?`,
		pgtext.Clean(id, maxRewardID)).Scan(&rw)
	if res.Error != nil {
		return Reward{}, fmt.Errorf("read reward %q: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return Reward{}, ErrUnknownReward
	}
	return rw, nil
}

// Coupons returns userID's newest limit coupons.
func (r *Repository) Coupons(ctx context.Context, userID int64, limit int) ([]Coupon, error) {
	cs := []Coupon{}
	err := r.db.WithContext(ctx).Raw(`SELECT id, reward, code, created_at FROM coupons
		WHERE user_id = ? ORDER BY id DESC LIMIT ?`, userID, limit).Scan(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("list coupons: %w", err)
	}
	return cs, nil
}

// newCode makes a coupon code like "COUPON-10-ABCD...": 80 random bits, so codes are not guessable and
// a collision (which the UNIQUE on code would refuse) does not happen in practice.
func newCode(reward string) (string, error) {
	b := make([]byte, 10)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("coupon code: %w", err)
	}
	return strings.ToUpper(reward) + "-" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b), nil
}

// Redeem spends reward.CostPoints of userID's points on a coupon paid with form token tokenID, in ONE
// transaction. It returns the result and whether it already existed: when the token had paid for a
// coupon before (an earlier submit committed, then crashed before telling Redis), the stored coupon is
// returned and nothing is written again.
//
// Errors: ErrInsufficientPoints (nothing written), points.ErrAccountLocked (another transaction of this
// user held the account row too long), or a wrapped database error (postgres.ErrLockTimeout alone: a
// lock wait elsewhere).
func (r *Repository) Redeem(ctx context.Context, userID int64, tokenID string, reward Reward) (Result, bool, error) {
	code, err := newCode(reward.ID)
	if err != nil {
		return Result{}, false, err
	}
	res := Result{Coupon: CouponJSON{Code: code, Reward: reward.ID}}
	err = r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// The debit and its ledger row (biz_id unique per token: a second transaction for the same token
		// fails there and rolls back its debit with it) commit with the coupon below, or not at all.
		balance, err := points.Debit(ctx, tx, userID, BizIDRedeem(tokenID), reward.CostPoints, "redeem "+reward.ID)
		if errors.Is(err, points.ErrInsufficientBalance) {
			return ErrInsufficientPoints
		}
		if err != nil {
			return err
		}
		res.Balance = balance
		// The coupon is unique on the token id: the database's last guard, one coupon per form token.
		err = tx.Raw(`INSERT INTO coupons (user_id, reward, code, form_token_id, balance_after)
			VALUES (?, ?, ?, ?, ?) RETURNING id`, userID, reward.ID, code, tokenID, res.Balance).
			Row().Scan(&res.Coupon.ID)
		if err != nil {
			return fmt.Errorf("insert coupon: %w", postgres.TranslateError(err))
		}
		return nil
	})
	if err == nil {
		return res, false, nil
	}
	// A duplicate says another transaction for this token committed first. Too few points can say the
	// same: that transaction spent the points we were about to spend. Both rolled back our work, so ask
	// the database (now that the winner is visible) whether the token already paid for a coupon.
	if errors.Is(err, postgres.ErrDuplicate) || errors.Is(err, ErrInsufficientPoints) {
		prior, found, lerr := r.ByToken(ctx, tokenID)
		if lerr != nil {
			return Result{}, false, errors.Join(err, lerr)
		}
		if found {
			return prior, true, nil
		}
	}
	return Result{}, false, err
}

// ByToken returns the result of the coupon form token tokenID paid for, if any. It rebuilds exactly the
// first answer: the coupon's own fields and the balance that redeem left.
func (r *Repository) ByToken(ctx context.Context, tokenID string) (Result, bool, error) {
	var row struct {
		ID           int64
		Code         string
		Reward       string
		BalanceAfter int64
	}
	res := r.db.WithContext(ctx).Raw(`SELECT id, code, reward, balance_after FROM coupons WHERE form_token_id = ?`,
		tokenID).Scan(&row)
	if res.Error != nil {
		return Result{}, false, fmt.Errorf("read coupon of form token: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return Result{}, false, nil
	}
	return Result{Coupon: CouponJSON{ID: row.ID, Code: row.Code, Reward: row.Reward}, Balance: row.BalanceAfter},
		true, nil
}
