package pay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"gorm.io/gorm"

	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/payclient"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/logging"
)

// The record's write protocol for whoever settles a pay record other than its first request (the
// sweeper and the reconciler, ladder step 3): take it over as a retry would (the order's lock, a
// fenced claim), then finish it with a fenced write. What to finish it with is the caller's to decide,
// from the platform's query API; how it is written stays here, beside the flow that writes it first.

// TakeOver claims the unfinished pay record stuck (found by kind: its OrderID is set) as a retry of it would: under the
// order's Redis lock when one is configured (its fencing token goes into the claim), else under the
// database's fence alone. ok is false, with a nil error, when someone else holds the record (a live
// retry). release must be called when ok is true; it gives the lock back.
func (p *Payer) TakeOver(ctx context.Context, stuck idempotency.Record) (rec idempotency.Record, release func(), ok bool, err error) {
	if stuck.Kind != idempotency.KindPay || stuck.OrderID == nil {
		return idempotency.Record{}, nil, false, fmt.Errorf("record %d is not a pay record (kind %q)", stuck.ID, stuck.Kind)
	}
	orderID := *stuck.OrderID
	var fence int64
	release = func() {}
	if p.locker != nil {
		lease, err := p.locker.Acquire(ctx, LockName(orderID), p.cfg.Lease)
		switch {
		case errors.Is(err, lock.ErrNotAcquired):
			return idempotency.Record{}, nil, false, nil // a live retry is on it
		case err != nil:
			logging.From(ctx).Warn("sweeper: lock unavailable; using the database lease", "err", err)
		default:
			fence = lease.Fence
			release = func() { p.release(ctx, lease) }
		}
	}
	scope := idempotency.Scope{UserID: stuck.UserID, Key: stuck.IdempotencyKey}
	var cl idempotency.Claim
	cl, err = p.store.Claim(ctx, scope, Subject(orderID), stuck.Method, stuck.Path, stuck.Fingerprint, fence, p.cfg.Lease)
	if behind := (*idempotency.FenceBehindError)(nil); errors.As(err, &behind) {
		// Redis's counter is behind the record's token (Pay says why): raise it, so that the next
		// sweep's token is above the record's. Nothing is taken over now.
		release()
		logging.From(ctx).Warn("sweeper: the fencing counter is behind the record's token; raising it",
			"record_id", stuck.ID, "token", behind.Token, "stored", behind.Stored)
		return idempotency.Record{}, nil, false, p.locker.RaiseFence(ctx, LockName(orderID), behind.Stored)
	}
	if err != nil || !cl.Claimed {
		release()
		return idempotency.Record{}, nil, false, err
	}
	return cl.Record, release, true, nil
}

// Complete finishes rec, a pay record of order orderID, COMPLETED with the 201 its client would have got for
// payment, and moves the order in the same transaction (PENDING → PAYING, then whatever the payment
// already says, through the callbacks' guarded steps). idempotency.ErrFenced: a newer holder owns rec.
func (p *Payer) Complete(ctx context.Context, rec idempotency.Record, orderID int64, payment payclient.Payment) error {
	body, err := json.Marshal(p.response(orderID, payment.ID))
	if err != nil {
		return err
	}
	return p.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		o, err := p.orders.Lookup(ctx, tx, orderID)
		if err != nil {
			return err
		}
		if err := p.markPaying(ctx, tx, o, payment); err != nil {
			return err
		}
		return p.store.Finish(ctx, tx, rec.ID, rec.Fence, idempotency.StateCompleted, http.StatusCreated, body)
	})
}

// NoPayment finishes rec FAILED_RETRYABLE with the stored 503 payment_unavailable: the platform has no
// payment for the order, so a retry runs again. The reconciler asks about it again not before askAgain
// (0: after its grace; idempotency.Store.FinishRetryable). idempotency.ErrFenced: a newer holder owns rec.
func (p *Payer) NoPayment(ctx context.Context, rec idempotency.Record, askAgain time.Duration) error {
	body, err := httpproblem.Document(ErrPaymentUnavailable, rec.Path)
	if err != nil {
		return err
	}
	return p.store.FinishRetryable(ctx, p.db, rec.ID, rec.Fence, http.StatusServiceUnavailable, body, askAgain)
}

// NoteUnanswered counts one more unanswered question to the platform about rec and returns the count.
// idempotency.ErrFenced: a newer holder owns rec.
func (p *Payer) NoteUnanswered(ctx context.Context, rec idempotency.Record) (int, error) {
	return p.store.NoteUnanswered(ctx, rec.ID, rec.Fence)
}
