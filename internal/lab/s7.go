package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"idemshop/internal/idempotency"
	"idemshop/internal/pay"
	"idemshop/internal/payclient"
)

// runS7: the platform commits the payment but its answer never reaches the shop (payments-mock's
// create_timeout chaos; orders' PAYMENTS_TIMEOUT is shorter than the mock's CREATE_TIMEOUT_DELAY, as
// with the defaults), so the caller sees a timeout, and the client retries.
// Unsafe: POST /lab/unsafe/v1/s7/orders/{id}/pay, which records nothing and sends a fresh reference per
// request: the retry is a second charge. Guarded: POST /v1/orders/{id}/pay with an Idempotency-Key: 503
// payment_outcome_unknown, the retry is refused (409 idempotency_key_in_use) while the record is
// PROCESSING under its lease, the sweeper finds the payment through the platform's query API, and the
// retry replays it: one charge. The platform is idempotent on merchant_order_no, so a shop that asks it
// again still ends with one payment there; the verdict counts what the platform was asked
// (GET /admin/creates), which a shop that ran the pay twice cannot hide.
//
// The retry goes out as soon as the first answer is in, well inside PAY_LEASE (PAYMENTS_TIMEOUT is
// shorter than the lease), and the lab reads the lease before sending it. Only a lease already over by
// then (a machine slower than the lease) lets a correct retry take the record over: then it may get 201
// with the one payment, answered from the order (its callback came) or from one more create request.
func runS7(ctx context.Context, env *Env) (u Unsafe, g Guarded, err error) {
	// The chaos must not outlive the scenario, whatever happens in it.
	defer func() {
		if cerr := env.CalmChaos(context.WithoutCancel(ctx)); err == nil && cerr != nil {
			err = cerr
		}
	}()
	platform, err := payclient.New(env.PaymentsURL, 10*time.Second)
	if err != nil {
		return u, g, err
	}
	for _, unsafe := range []bool{true, false} {
		f, err := env.NewFixture(ctx, SideName("S7", unsafe))
		if err != nil {
			return u, g, err
		}
		side := s7Guarded
		if unsafe {
			side = s7Unsafe
		}
		m, detail, err := side(ctx, env, f, platform)
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		if err != nil {
			return u, g, err
		}
		if unsafe {
			u.Measured, u.Detail = m, detail
			u.Reproduced = m["payments"] >= 2
		} else {
			g.Measured, g.Detail = m, detail
			g.OK = m["first_status"] == http.StatusServiceUnavailable && m["first_outcome_unknown"] == 1 &&
				s7RetryHeld(m) &&
				m["record_completed"] == 1 && m["final_status"] == http.StatusCreated && m["final_replayed"] == 1 &&
				m["payments"] == 1 && m["replay_is_the_payment"] == 1
		}
	}
	return u, g, nil
}

// s7LeaseMargin is how much of the first request's lease must be left when the lab sends the retry for
// the contract's 409 to be the only right answer: the retry still has to reach orders.
const s7LeaseMargin = 250 * time.Millisecond

// s7RetryHeld: while the lease runs, the retry is refused (409 idempotency_key_in_use) and the platform
// is asked once. A retry sent with less than s7LeaseMargin of the lease left may also have taken the
// record over (201 with the one payment, the platform asked at most once more, by that retry).
func s7RetryHeld(m map[string]int64) bool {
	refused := m["retry_status"] == http.StatusConflict && m["retry_in_use"] == 1 && m["create_requests"] == 1
	if m["lease_live_at_retry"] == 1 {
		return refused
	}
	return refused || (m["retry_status"] == http.StatusCreated && m["retry_is_the_payment"] == 1 &&
		m["create_requests"] >= 1 && m["create_requests"] <= 2)
}

// s7Order creates the fixture's order to pay.
func s7Order(ctx context.Context, f *Fixture) (Order, error) {
	product, err := f.Product(ctx, 10, 2500)
	if err != nil {
		return Order{}, err
	}
	o, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s7-%d", time.Now().UnixNano()), product, 1)
	if err != nil || r.Status != http.StatusCreated {
		return Order{}, notCreated("S7: create order", err, r)
	}
	return o, nil
}

// s7Timeouts turns the platform's create_timeout chaos on: every create commits, then never answers in
// time.
func s7Timeouts(ctx context.Context, env *Env) error {
	return env.SetChaos(ctx, map[string]any{"create_timeout_rate": 1, "error_rate": 0, "seed": env.Seed})
}

func s7Unsafe(ctx context.Context, env *Env, f *Fixture, platform *payclient.Client) (map[string]int64, string, error) {
	o, err := s7Order(ctx, f)
	if err != nil {
		return nil, "", err
	}
	path := fmt.Sprintf("/lab/unsafe/v1/s7/orders/%d/pay", o.ID)
	if err := s7Timeouts(ctx, env); err != nil {
		return nil, "", err
	}
	// A client that sends a new request id on every call, and the unsafe route makes it the platform
	// reference.
	rid := func(attempt int) string { return fmt.Sprintf("s7-%d-a%d", time.Now().UnixNano(), attempt) }
	rids := []string{rid(1)}
	first, err := f.Do(ctx, http.MethodPost, path, nil, "X-Request-Id", rids[0])
	if err != nil {
		return nil, "", err
	}
	// The platform is back to normal; the client, told to try again, does.
	if err := env.CalmChaos(ctx); err != nil {
		return nil, "", err
	}
	rids = append(rids, rid(2))
	retry, err := f.Do(ctx, http.MethodPost, path, nil, "X-Request-Id", rids[1])
	if err != nil {
		return nil, "", err
	}

	m := map[string]int64{"first_status": int64(first.Status), "retry_status": int64(retry.Status)}
	var paymentIDs []string
	for _, id := range rids {
		p, found, err := platform.FindByMerchantOrderNo(ctx, pay.UnsafeReference(o.ID, id))
		if err != nil {
			return nil, "", err
		}
		if !found {
			continue
		}
		m["payments"]++
		paymentIDs = append(paymentIDs, p.ID)
		n, err := env.PlatformCreates(ctx, pay.UnsafeReference(o.ID, id))
		if err != nil {
			return nil, "", err
		}
		m["create_requests"] += n
		// The payer approves every payment page the shop sent them to.
		if p, err = s7Approve(ctx, platform, p.ID); err != nil {
			return nil, "", err
		}
		if p.Status == "SUCCESS" {
			m["charged_cents"] += p.AmountCents
		}
	}
	if err := s7DropRejectedCallbacks(ctx, env, paymentIDs); err != nil {
		return nil, "", err
	}
	detail := fmt.Sprintf("timeout (HTTP %d), retry HTTP %d: %d create requests, %d payments at the platform, %d cents charged for a %d-cent order",
		first.Status, retry.Status, m["create_requests"], m["payments"], m["charged_cents"], o.AmountCents)
	return m, detail, nil
}

// s7DropRejectedCallbacks: the platform notifies the shop of every unsafe payment, and the shop's
// callback route rejects them (merchant_order_no "<order>-<request id>" is not an order id), recording
// them with no order, where the fixture's cleanup cannot find them. Wait a little for them, bounded,
// then delete them (unless env.Keep: then they stay, found by their payment ids).
func s7DropRejectedCallbacks(ctx context.Context, env *Env, paymentIDs []string) error {
	if len(paymentIDs) == 0 {
		return nil
	}
	count := func() (int64, error) {
		var n int64
		err := env.DB.WithContext(ctx).Raw(`SELECT count(DISTINCT payment_id) FROM payment_callbacks
			WHERE order_id IS NULL AND payment_id IN ?`, paymentIDs).Scan(&n).Error
		return n, err
	}
	if _, err := Eventually(ctx, min(env.Quiet, 10*time.Second), func() (bool, error) {
		n, err := count()
		return n >= int64(len(paymentIDs)), err
	}); err != nil || env.Keep {
		return err
	}
	return env.DB.WithContext(ctx).Exec(`DELETE FROM payment_callbacks WHERE order_id IS NULL AND payment_id IN ?`,
		paymentIDs).Error
}

func s7Guarded(ctx context.Context, env *Env, f *Fixture, platform *payclient.Client) (map[string]int64, string, error) {
	o, err := s7Order(ctx, f)
	if err != nil {
		return nil, "", err
	}
	path := fmt.Sprintf("/v1/orders/%d/pay", o.ID)
	key := fmt.Sprintf("s7-pay-%d", time.Now().UnixNano())
	if err := s7Timeouts(ctx, env); err != nil {
		return nil, "", err
	}
	first, err := f.Do(ctx, http.MethodPost, path, nil, "Idempotency-Key", key)
	if err != nil {
		return nil, "", err
	}
	if err := env.CalmChaos(ctx); err != nil {
		return nil, "", err
	}
	// The client's immediate retry, with the same key: the record is PROCESSING under its lease.
	var live bool
	if err := env.DB.WithContext(ctx).Raw(`SELECT COALESCE(bool_or(locked_until > now() + make_interval(secs => ?)), false)
		FROM idempotency_keys WHERE user_id = ? AND idempotency_key = ? AND state = ?`,
		s7LeaseMargin.Seconds(), f.UserID, key, idempotency.StateProcessing).Scan(&live).Error; err != nil {
		return nil, "", err
	}
	retry, err := f.Do(ctx, http.MethodPost, path, nil, "Idempotency-Key", key)
	if err != nil {
		return nil, "", err
	}
	m := map[string]int64{"first_status": int64(first.Status), "retry_status": int64(retry.Status),
		"first_outcome_unknown": asCount(first.Code() == pay.ErrOutcomeUnknown.Code),
		"lease_live_at_retry":   asCount(live), "retry_in_use": asCount(retry.Code() == idempotency.ErrKeyInUse.Code)}
	var retried struct {
		PaymentID string `json:"payment_id"`
	}
	_ = retry.JSON(&retried)

	// The sweeper (every SWEEP_INTERVAL, once PAY_LEASE has run out) asks the platform and completes it.
	scope := idempotency.Scope{UserID: f.UserID, Key: key}
	var rec *idempotency.Record
	done, err := Eventually(ctx, env.Quiet, func() (bool, error) {
		var err error
		rec, err = idempotency.Find(ctx, env.DB, scope)
		return err == nil && rec != nil && rec.State == idempotency.StateCompleted, err
	})
	if err != nil {
		return nil, "", err
	}
	if rec == nil {
		return nil, "", errors.New("S7: the pay record is missing")
	}
	m["record_completed"] = asCount(done)
	m["record_takeovers"] = int64(rec.Attempts)

	final, err := f.Do(ctx, http.MethodPost, path, nil, "Idempotency-Key", key)
	if err != nil {
		return nil, "", err
	}
	m["final_status"] = int64(final.Status)
	m["final_replayed"] = asCount(final.Header.Get("Idempotent-Replayed") == "true")
	var replay struct {
		PaymentID string `json:"payment_id"`
	}
	_ = final.JSON(&replay)

	p, found, err := platform.FindByMerchantOrderNo(ctx, strconv.FormatInt(o.ID, 10))
	if err != nil {
		return nil, "", err
	}
	// Every create request the platform got for this order, whatever it answered: one payment comes
	// back however many times the shop asked.
	if m["create_requests"], err = env.PlatformCreates(ctx, strconv.FormatInt(o.ID, 10)); err != nil {
		return nil, "", err
	}
	if found {
		m["payments"] = 1
		m["replay_is_the_payment"] = asCount(replay.PaymentID == p.ID)
		m["retry_is_the_payment"] = asCount(retried.PaymentID == p.ID)
		if p, err = s7Approve(ctx, platform, p.ID); err != nil {
			return nil, "", err
		}
		if p.Status == "SUCCESS" {
			m["charged_cents"] = p.AmountCents
		}
		// Its callback pays the order, which credits points: let that finish before the fixture goes.
		if err := s7AwaitPaid(ctx, env, o.ID); err != nil {
			return nil, "", err
		}
	}
	lease := "lease running: 409 due"
	if !live {
		lease = "lease over"
	}
	detail := fmt.Sprintf("timeout (HTTP %d %s), retry HTTP %d %s (%s), record %s after %d takeover(s), retry HTTP %d replayed: %d payment at the platform, asked %d time(s) to create one",
		first.Status, first.Code(), retry.Status, retry.Code(), lease, rec.State, rec.Attempts, final.Status, m["payments"], m["create_requests"])
	return m, detail, nil
}

// s7Approve is the payer approving the payment (auto-approve may have done it already, and then the
// platform refuses the second approval: the payment is read back either way).
func s7Approve(ctx context.Context, platform *payclient.Client, id string) (payclient.Payment, error) {
	if _, err := platform.Approve(ctx, id); err != nil {
		if _, _, refused := payclient.Refused(err); !refused {
			return payclient.Payment{}, fmt.Errorf("S7: approve %s: %w", id, err)
		}
	}
	return platform.GetPayment(ctx, id)
}

// s7AwaitPaid waits, bounded by env.Quiet, until the order's success callback has come and its points
// are credited.
func s7AwaitPaid(ctx context.Context, env *Env, orderID int64) error {
	_, err := Eventually(ctx, env.Quiet, func() (bool, error) {
		var st string
		if err := env.DB.WithContext(ctx).Raw(`SELECT status FROM orders WHERE id = ?`, orderID).Scan(&st).Error; err != nil {
			return false, err
		}
		return st == "PAID", nil
	})
	if err != nil {
		return err
	}
	return payAwaitPoints(ctx, env, []int64{orderID})
}

// asCount is 1 for true, 0 for false: a flag as a measured number.
func asCount(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
