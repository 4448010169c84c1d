package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
)

// s8Lease is the holders' lease (the Redis lock TTL and the record's locked_until): short, so that the
// takeover comes quickly; the scenario waits for its end by polling, never by sleeping.
const s8Lease = 300 * time.Millisecond

// runS8 plays ladder step 4 on the record store the pay flow uses. Holder A claims a pay
// record with fencing token t and is paused (its platform call hangs). Its lease runs out; B (a retry,
// or the sweeper) takes the record over with token t+1 and is still working (PROCESSING under t+1) when
// A wakes up and writes its stale result, FAILED_RETRYABLE, through the orders process (its lab route
// POST /lab[/unsafe]/v1/s8/records/{id}/finish, internal/ordersapp/lab_s8.go). Then B finishes
// COMPLETED. A writes while the record is still PROCESSING so that the fence alone decides: written
// after B's finish, A would also be refused by "state = PROCESSING", and a shop without the fence
// would pass (mutant pay-finish-fence). Unsafe: idempotency.Store.FinishUnfenced overwrites B's claim,
// and B's own fenced finish then finds the record no longer PROCESSING: B's payment is forgotten.
// Guarded: idempotency.Store.Finish carries A's token, the database refuses it (ErrFenced, 409
// "fenced"), orders counts it in idemshop_idempotency_fence_rejections_total, and B's finish lands.
// The "state = PROCESSING" condition alone is not what S8 shows (TestFinishNeverRewritesAFinalRecord).
func runS8(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	var u Unsafe
	var g Guarded
	for _, unsafe := range []bool{true, false} {
		f, err := env.NewFixture(ctx, SideName("S8", unsafe))
		if err != nil {
			return u, g, err
		}
		m, err := s8Side(ctx, env, f, unsafe)
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		if err != nil {
			return u, g, err
		}
		stored := "B's COMPLETED 201"
		if m["stored_is_a"] == 1 {
			stored = "A's FAILED_RETRYABLE 503: the key forgets B's payment, and the next retry runs the pay again"
		} else if m["stored_is_b"] == 0 {
			stored = "neither A's nor B's result"
		}
		late := "refused"
		if m["late_write_rejected"] == 0 {
			late = "accepted"
		}
		fence := "refused by the fence"
		if m["late_write_rejected"] == 0 {
			fence = "accepted: no fence stopped it"
		}
		if unsafe {
			u.Measured = m
			u.Reproduced = m["stored_is_a"] == 1 && m["late_write_rejected"] == 0
			u.Detail = fmt.Sprintf("A (fence %d) wrote while B (fence %d) held the record: A's write %s, B's finish %s; record holds %s",
				m["fence_a"], m["fence_b"], late, s8Finished(m), stored)
		} else {
			g.Measured = m
			// A wrote while the record was PROCESSING under B's token, so only "fence <= token" could
			// refuse it.
			g.OK = m["late_write_rejected"] == 1 && m["processing_at_late_write"] == 1 &&
				m["b_finished"] == 1 && m["stored_is_b"] == 1 && m["fence_b"] > m["fence_a"]
			g.Detail = fmt.Sprintf("A's late write (fence %d < %d, record PROCESSING under B) %s; B's finish %s; record holds %s",
				m["fence_a"], m["fence_b"], fence, s8Finished(m), stored)
		}
	}
	return u, g, nil
}

// s8Finished says how B's finish went.
func s8Finished(m map[string]int64) string {
	if m["b_finished"] == 1 {
		return "written"
	}
	return "refused (the record was no longer PROCESSING)"
}

func s8Side(ctx context.Context, env *Env, f *Fixture, unsafe bool) (map[string]int64, error) {
	product, err := f.Product(ctx, 10, 1500)
	if err != nil {
		return nil, err
	}
	o, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s8-%d", time.Now().UnixNano()), product, 1)
	if err != nil || r.Status != http.StatusCreated {
		return nil, notCreated("S8: create order", err, r)
	}
	// A registry of the scenario's own: only the store's metrics are needed, and not on anyone's /metrics.
	store, err := idempotency.NewStore(env.DB, idempotency.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		return nil, err
	}
	locker, err := lock.New(env.Redis, env.RedisPrefix)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("lab:s8:order:%d", o.ID)
	defer func() {
		_ = env.Redis.Del(context.WithoutCancel(ctx), locker.LockKey(name), locker.FenceKey(name)).Err()
	}()
	// A pay-like record of a kind of its own, so that the real sweeper, which finds pay records by
	// kind, leaves this one to the lab.
	path := fmt.Sprintf("/lab/s8/orders/%d/pay", o.ID)
	subject := idempotency.Subject{Kind: "lab_s8", OrderID: o.ID}
	fp, err := idempotency.Fingerprint(http.MethodPost, path, nil)
	if err != nil {
		return nil, err
	}
	scope := idempotency.Scope{UserID: f.UserID, Key: fmt.Sprintf("s8-pay-%d", o.ID)}

	// A claims the record with its token, then pauses: it writes nothing until the end.
	leaseA, err := locker.Acquire(ctx, name, s8Lease)
	if err != nil {
		return nil, fmt.Errorf("S8: A's lock: %w", err)
	}
	a, err := store.Claim(ctx, scope, subject, http.MethodPost, path, fp, leaseA.Fence, s8Lease)
	if err != nil || !a.Claimed {
		return nil, fmt.Errorf("S8: A's claim: claimed=%v: %v", a.Claimed, err)
	}

	// A's lease runs out in both places: the Redis lock and the record's locked_until.
	over, err := Eventually(ctx, env.Quiet, func() (bool, error) {
		n, err := env.Redis.Exists(ctx, locker.LockKey(name)).Result()
		if err != nil || n != 0 {
			return false, err
		}
		var expired bool
		err = env.DB.WithContext(ctx).Raw(`SELECT locked_until < now() FROM idempotency_keys WHERE id = ?`,
			a.Record.ID).Scan(&expired).Error
		return expired, err
	})
	if err != nil {
		return nil, err
	}
	if !over {
		return nil, fmt.Errorf("S8: A's lease did not run out within %s", env.Quiet)
	}

	// B takes over with the next token and asks the platform: it is still at work when A wakes up.
	leaseB, err := locker.Acquire(ctx, name, s8Lease)
	if err != nil {
		return nil, fmt.Errorf("S8: B's lock: %w", err)
	}
	b, err := store.Claim(ctx, scope, subject, http.MethodPost, path, fp, leaseB.Fence, s8Lease)
	if err != nil || !b.Claimed {
		return nil, fmt.Errorf("S8: B's takeover: claimed=%v: %v", b.Claimed, err)
	}
	// A wakes up: its platform call failed, so it records "retry". Its lock is long gone; it does not know.
	bodyA, _ := json.Marshal(map[string]any{"type": "about:blank", "title": "Service Unavailable", "status": 503,
		"code": "payment_unavailable", "detail": "the payment platform is unavailable; retry with the same Idempotency-Key"})
	// It writes through the orders process, as a pay flow there would: the guarded route calls
	// Store.Finish with A's token on the shop's metrics (a refusal counts in orders' /metrics), the
	// unsafe one Store.FinishUnfenced.
	route := "/lab/v1/s8/records/%d/finish"
	if unsafe {
		route = "/lab/unsafe/v1/s8/records/%d/finish"
	}
	late, _ := json.Marshal(map[string]any{"fence": a.Record.Fence, "state": idempotency.StateFailedRetryable,
		"status": http.StatusServiceUnavailable, "body": json.RawMessage(bodyA)})
	var before struct {
		State string
		Fence int64
	}
	if err := env.DB.WithContext(ctx).Raw(`SELECT state, fence FROM idempotency_keys WHERE id = ?`, a.Record.ID).
		Scan(&before).Error; err != nil {
		return nil, err
	}
	lr, err := f.Do(ctx, http.MethodPost, fmt.Sprintf(route, a.Record.ID), late)
	if err != nil {
		return nil, fmt.Errorf("S8: A's late write: %w", err)
	}
	rejected := lr.Status == http.StatusConflict && lr.Code() == "fenced"
	if lr.Status != http.StatusNoContent && !rejected {
		return nil, fmt.Errorf("S8: A's late write: HTTP %d %s", lr.Status, lr.Body)
	}

	// B found the payment and completes the record, with its own token, as the pay flow does.
	bodyB, _ := json.Marshal(map[string]any{"order_id": o.ID, "payment_id": fmt.Sprintf("lab_pay_s8_%d", o.ID),
		"status": "PAYING", "pay_url": ""})
	bFinished := true
	if err := store.Finish(ctx, env.DB, b.Record.ID, b.Record.Fence, idempotency.StateCompleted, http.StatusCreated, bodyB); errors.Is(err, idempotency.ErrFenced) {
		bFinished = false // A's write took the record out of PROCESSING
	} else if err != nil {
		return nil, fmt.Errorf("S8: B's finish: %w", err)
	}
	_ = locker.Release(ctx, leaseB)

	rec, err := idempotency.Find(ctx, env.DB, scope)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, errors.New("S8: the record is missing")
	}
	return map[string]int64{
		"fence_a":             a.Record.Fence,
		"fence_b":             b.Record.Fence,
		"late_write_rejected": asCount(rejected),
		"stored_is_a":         asCount(rec.State == idempotency.StateFailedRetryable && string(rec.ResponseBody) == string(bodyA)),
		"stored_is_b":         asCount(rec.State == idempotency.StateCompleted && string(rec.ResponseBody) == string(bodyB)),
		"stored_fence":        rec.Fence,
		"b_finished":          asCount(bFinished),
		// The record as A's write found it: B's claim, so that only the fence could refuse A.
		"processing_at_late_write": asCount(before.State == string(idempotency.StateProcessing) && before.Fence == b.Record.Fence),
	}, nil
}
