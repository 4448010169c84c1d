// Package rewards lets a user spend points on coupons through the one-time redeem form.
//
// The guard has two layers. The form token (internal/formtoken, Redis) keeps concurrent submits of one
// form apart and remembers the answer for replay. The database is the source of truth: one transaction
// debits the points with a conditional UPDATE (balance >= cost), writes the ledger row whose biz_id is
// derived from the token, and inserts the coupon whose form_token_id is UNIQUE. Whatever Redis does,
// one token can pay for one coupon only. The flow and its crash windows are in docs/redeem.md.
package rewards

import (
	"time"

	"idemshop/internal/platform/problem"
)

// FormName is the form the redeem tokens are issued for (POST /v1/form-tokens {"form":"redeem"}).
const FormName = "redeem"

// Reward is one entry of the catalogue.
type Reward struct {
	ID         string
	Name       string
	CostPoints int64
}

// Coupon is a redeemed reward, as the storefront lists it.
type Coupon struct {
	ID        int64
	Reward    string
	Code      string
	CreatedAt time.Time
}

// CouponJSON is the coupon inside the redeem answer.
type CouponJSON struct {
	ID     int64  `json:"id"`
	Code   string `json:"code"`
	Reward string `json:"reward"`
}

// Result is the body of 201 POST /v1/rewards/redeem: {"coupon":{"id","code","reward"},"balance"}. The
// balance is the one this redeem left, so a replay shows the same number as the first answer.
type Result struct {
	Coupon  CouponJSON `json:"coupon"`
	Balance int64      `json:"balance"`
}

// BizIDRedeem is the ledger's business key of the debit paid with form token tokenID. The unique index
// on points_ledger.biz_id makes one token debit at most once, like order-paid:<id> credits at most once.
func BizIDRedeem(tokenID string) string { return "redeem:" + tokenID }

// Problem codes of the redeem route.
var (
	// ErrInsufficientPoints: the balance is below the reward's cost. The token goes back to ISSUED, so
	// the same form can be submitted again once points were earned.
	ErrInsufficientPoints = problem.New(problem.KindConflict, "insufficient_points",
		"not enough points for this reward; the form stays usable")
	// ErrUnknownReward: the reward is not in the catalogue.
	ErrUnknownReward = problem.New(problem.KindInvalid, "unknown_reward", "no reward with that id")
)
