package lab

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"gorm.io/gorm"

	"idemshop/internal/formtoken"
	"idemshop/internal/invariants"
	"idemshop/internal/rewards"
)

// runS4: the redeem form is submitted with too few points (a natural business failure, 409
// insufficient_points), the user earns points, and submits the same form again. Unsafe: POST
// /lab/unsafe/v1/rewards/redeem deleted the token before the redeem ran (formtoken's ConsumeFirst), so
// the resubmit gets 400 form_token_invalid: the user can never submit that form. Guarded: POST
// /v1/rewards/redeem moved the token back to ISSUED after the failure, so the resubmit redeems once,
// and a further resubmit replays that answer.
func runS4(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	const credit, cost = 25, 10 // coupon-10 costs 10 points
	var u Unsafe
	var g Guarded
	um, gm, err := twinSides(ctx, env, "S4", func(ctx context.Context, f *Fixture, unsafe bool) (map[string]int64, error) {
		path := "/v1/rewards/redeem"
		if unsafe {
			path = "/lab/unsafe/v1/rewards/redeem"
		}
		return s4Side(ctx, f, path, credit)
	})
	if err != nil {
		return u, g, err
	}
	u.Measured, g.Measured = um, gm
	u.Reproduced = um["first_insufficient_points"] == 1 && um["resubmit_token_invalid"] == 1 &&
		um["second_resubmit_status"] == http.StatusBadRequest && um["coupons"] == 0 && um["debits"] == 0
	u.Detail = fmt.Sprintf("409 insufficient_points; token left in Redis: %d; +%d points; resubmit %d form_token_invalid, again %d; %d coupons, balance %d",
		um["token_kept"], credit, um["resubmit_status"], um["second_resubmit_status"], um["coupons"], um["balance"])
	g.OK = gm["first_insufficient_points"] == 1 && gm["token_kept"] == 1 && gm["resubmit_status"] == http.StatusCreated &&
		gm["replayed"] == 1 && gm["coupons"] == 1 && gm["debits"] == 1 && gm["balance"] == credit-cost
	g.Detail = fmt.Sprintf("409 insufficient_points; token left in Redis: %d; +%d points; resubmit %d, again %d replayed: %t; %d coupon, %d debit, balance %d",
		gm["token_kept"], credit, gm["resubmit_status"], gm["second_resubmit_status"], gm["replayed"] == 1,
		gm["coupons"], gm["debits"], gm["balance"])
	return u, g, nil
}

func s4Side(ctx context.Context, f *Fixture, path string, credit int64) (map[string]int64, error) {
	r, err := f.Do(ctx, http.MethodPost, "/v1/form-tokens", []byte(`{"form":"`+rewards.FormName+`"}`))
	if err != nil || r.Status != http.StatusCreated {
		return nil, fmt.Errorf("issue form token: %v %d %s", err, r.Status, r.Body)
	}
	var tok struct{ Token string }
	if err := r.JSON(&tok); err != nil {
		return nil, fmt.Errorf("decode form token: %w", err)
	}
	submit := func() (Response, error) {
		return f.Do(ctx, http.MethodPost, path, []byte(`{"reward":"coupon-10"}`), rewards.FormTokenHeader, tok.Token)
	}

	m := map[string]int64{}
	first, err := submit()
	if err != nil {
		return nil, fmt.Errorf("first submit: %w", err)
	}
	m["first_status"] = int64(first.Status)
	m["first_insufficient_points"] = b2i(first.Status == http.StatusConflict && first.Code() == rewards.ErrInsufficientPoints.Code)
	if m["token_kept"], err = s4TokenExists(ctx, f.env, tok.Token); err != nil {
		return nil, err
	}

	// The user earns points (as an order.paid credit would give them); then submits the same form again.
	err = f.env.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`INSERT INTO points_ledger (user_id, biz_id, delta, reason) VALUES (?, ?, ?, 'lab credit')`,
			f.UserID, fmt.Sprintf("lab-s4-credit:%d", f.UserID), credit).Error; err != nil {
			return err
		}
		return tx.Exec(`INSERT INTO points_accounts (user_id, balance) VALUES (?, ?)
			ON CONFLICT (user_id) DO UPDATE SET balance = points_accounts.balance + EXCLUDED.balance, updated_at = now()`,
			f.UserID, credit).Error
	})
	if err != nil {
		return nil, fmt.Errorf("credit points: %w", err)
	}

	resubmit, err := submit()
	if err != nil {
		return nil, fmt.Errorf("resubmit: %w", err)
	}
	m["resubmit_status"] = int64(resubmit.Status)
	m["resubmit_token_invalid"] = b2i(resubmit.Status == http.StatusBadRequest && resubmit.Code() == formtoken.ErrTokenInvalid.Code)
	again, err := submit()
	if err != nil {
		return nil, fmt.Errorf("second resubmit: %w", err)
	}
	m["second_resubmit_status"] = int64(again.Status)
	m["replayed"] = b2i(resubmit.Status == http.StatusCreated && again.Status == http.StatusCreated &&
		again.Header.Get("Idempotent-Replayed") == "true" && bytes.Equal(again.Body, resubmit.Body))

	if m["coupons"], err = countRows(ctx, f.env, `SELECT count(*) FROM coupons WHERE user_id = ?`, f.UserID); err != nil {
		return nil, err
	}
	if m["debits"], err = countRows(ctx, f.env, `SELECT count(*) FROM points_ledger WHERE user_id = ? AND delta < 0`, f.UserID); err != nil {
		return nil, err
	}
	if m["balance"], err = invariants.Balance(ctx, f.env.DB, f.UserID); err != nil {
		return nil, err
	}
	return m, nil
}

// s4TokenExists reports (1 or 0) whether token id is still in Redis, under the key the shop's store
// uses. The store is built only to name that key.
func s4TokenExists(ctx context.Context, env *Env, id string) (int64, error) {
	store, err := formtoken.New(env.Redis, formtoken.Options{KeyPrefix: env.RedisPrefix, TTL: time.Minute, Lease: time.Second})
	if err != nil {
		return 0, err
	}
	n, err := env.Redis.Exists(ctx, store.TokenKey(id)).Result()
	if err != nil {
		return 0, fmt.Errorf("read form token: %w", err)
	}
	return n, nil
}
