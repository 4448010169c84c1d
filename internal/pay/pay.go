// Package pay is the pay flow, ladder steps 2-4 (docs/design.md, "The ladder"): its effect (a payment
// at the platform) lies across a network call, so no local transaction can cover it. The idempotency
// record is a visible state machine instead:
//
//  1. claim the record (PROCESSING, with a lease and a fencing token from the Redis lock);
//  2. call the platform (idempotent on merchant_order_no = the order id);
//  3. record the result with a fenced write: COMPLETED, FAILED_PERMANENT or FAILED_RETRYABLE; or, when
//     the outcome is unknown (timeout, or a connection that broke after the request may have been
//     written), leave it PROCESSING for the sweeper (internal/sweeper) to resolve.
//
// pay_unsafe.go is the lab's twin without the record (S7).
package pay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"gorm.io/gorm"

	"idemshop/internal/callback"
	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/orders"
	"idemshop/internal/payclient"
	"idemshop/internal/platform/fault"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/problem"
)

// Errors of the pay route; codes are stable.
var (
	ErrNotPayable = problem.New(problem.KindConflict, "order_not_payable",
		"the order is not PENDING: it already has a payment, or it is closed")
	ErrPaymentRefused = problem.New(problem.KindUnprocessable, "payment_refused",
		"the payment platform refused the payment")
	ErrPaymentUnavailable = problem.New(problem.KindUnavailable, "payment_unavailable",
		"the payment platform is unavailable; retry with the same Idempotency-Key")
	ErrOutcomeUnknown = problem.New(problem.KindUnavailable, "payment_outcome_unknown",
		"the payment platform's answer did not arrive (a timeout or a broken connection after the request was sent): the payment may exist; retry with the same Idempotency-Key")
)

// errNotRecorded is payment_outcome_unknown when the platform answered and the shop's write of the
// answer failed or went unanswered: the client cannot know the outcome either way, and unless the write's
// COMMIT ran (its answer lost: a retry then replays it) the record stays PROCESSING until its lease runs
// out. The detail says "may not": a lost COMMIT answer leaves the record COMPLETED (a helper's finding,
// 2026-12-07: "could not record" over 12 of 12 such records).
var errNotRecorded = ErrOutcomeUnknown.WithDetail(
	"the payment platform answered, but the shop may not have recorded its answer; retry with the same Idempotency-Key")

// errHeldAfterClaim is unavailable for a request whose claim committed and whose next database step
// failed before anything reached the platform or the order (the request's work time ran out, a lost
// connection): its record stays PROCESSING under its lease, so the answer's Retry-After is the lease.
// The generic 503 says "nothing was written, retry in 1 s", and its retries met 409 until the lease ran
// out (an overload tester's finding, 2026-12-07: 2,176 such answers at 200 pays a second on 2
// connections).
var errHeldAfterClaim = problem.ErrUnavailable.WithDetail(
	"the database could not finish this request after it was taken; its record is held until Retry-After: retry with the same Idempotency-Key then")

// errClaimUnknown is unavailable for a request whose claim went out and did not answer (its work time ran
// out, its connection broke): the claim may have committed, and then the record is held for the lease,
// so Retry-After is the lease.
var errClaimUnknown = problem.ErrUnavailable.WithDetail(
	"the database did not answer while this request took its record, which may be held until Retry-After: retry with the same Idempotency-Key then")

// heldAfterClaim answers a database error after the claim (raw, or translated to unavailable) with
// errHeldAfterClaim; another problem (the order not found) keeps its own answer.
func (p *Payer) heldAfterClaim(err error) error {
	if pe := (*problem.Error)(nil); errors.As(err, &pe) && pe.Kind != problem.KindUnavailable {
		return err
	}
	return errHeldAfterClaim.WithRetryAfter(p.cfg.Lease).Wrap(err)
}

// errOrderBusy is idempotency_key_in_use (the contract's answer to a concurrent retry of one key) with a
// detail that is also true when the concurrent request carries another key.
var errOrderBusy = idempotency.ErrKeyInUse.WithDetail(
	"a pay request for this order is in progress (a retry of this one, or another request); retry later")

// Config shapes the pay flow. Durations are wall-clock.
type Config struct {
	// CallbackURL is sent as notify_url.
	CallbackURL string
	// PaymentsURL is the platform's base URL, used to build pay_url.
	PaymentsURL string
	// Lease is how long a claimer is presumed alive: the record's locked_until and the Redis lock TTL.
	// A retry within the lease gets 409; after it, a retry or the sweeper takes over.
	Lease time.Duration
}

// The crash windows of the flow (internal/platform/fault). The production wiring passes no hook; with
// ORDERS_LAB=true, PAY_FAULT arms one of them.
const (
	// CrashAfterClaim is after the record is claimed (PROCESSING, fenced), before the platform call.
	CrashAfterClaim fault.Point = "crash-after-claim"
	// CrashAfterRPC is after the platform created the payment, before the lease is checked.
	CrashAfterRPC fault.Point = "crash-after-rpc"
	// CrashBeforeWrite is after the lease check, before the fenced write of the result.
	CrashBeforeWrite fault.Point = "crash-before-write"
)

// Points are the flow's crash windows, in order.
var Points = []fault.Point{CrashAfterClaim, CrashAfterRPC, CrashBeforeWrite}

// Payer runs POST /v1/orders/{id}/pay.
type Payer struct {
	db       *gorm.DB
	orders   *orders.Repository
	store    *idempotency.Store
	metrics  *idempotency.Metrics
	locker   *lock.Locker // nil: the database lease alone
	platform *payclient.Client
	settler  *callback.Service // applies what the platform says of a payment, through the callbacks' guarded steps
	cfg      Config
	fault    fault.Hook // lab and tests only; nil in production
}

// NewPayer returns the pay flow. locker may be nil. settler is the callback service: what the platform
// answers about a payment moves the order through the same guarded steps as its callbacks. hook is
// called at each crash window (Points); nil in production.
func NewPayer(db *gorm.DB, repo *orders.Repository, store *idempotency.Store, m *idempotency.Metrics,
	locker *lock.Locker, platform *payclient.Client, settler *callback.Service, cfg Config, hook fault.Hook) (*Payer, error) {
	if db == nil || repo == nil || store == nil || m == nil || platform == nil || settler == nil {
		return nil, errors.New("pay: NewPayer needs db, orders, store, metrics, a platform client and a settler")
	}
	if cfg.Lease <= 0 || cfg.CallbackURL == "" {
		return nil, errors.New("pay: NewPayer needs a lease > 0 and a callback URL")
	}
	return &Payer{db: db, orders: repo, store: store, metrics: m, locker: locker, platform: platform,
		settler: settler, cfg: cfg, fault: hook}, nil
}

// payResponse is the 201 body of the pay route.
type payResponse struct {
	OrderID   int64  `json:"order_id"`
	PaymentID string `json:"payment_id"`
	Status    string `json:"status"`
	PayURL    string `json:"pay_url"`
}

// detachedWorkLimit bounds the pay work after the claim, once it no longer follows the client.
const detachedWorkLimit = time.Minute

// Subject is what a pay record is about: the sweeper and the reconciler find pay records by their kind,
// and the order they pay by its id, in columns.
func Subject(orderID int64) idempotency.Subject {
	return idempotency.Subject{Kind: idempotency.KindPay, OrderID: orderID}
}

// LockName is the Redis lock of an order's payment. It is per order, not per key: two keys for one order
// queue behind each other, and each order has one fence counter in Redis, which expires once its
// records are reaped (lock.FenceTTL).
func LockName(orderID int64) string { return "pay:order:" + strconv.FormatInt(orderID, 10) }

// PayRequest is one pay request as the route read it: UserID's order OrderID, with Idempotency-Key Key
// and the request's Fingerprint. Method and Path are stored on a new record; Route labels the metrics.
type PayRequest struct {
	UserID, OrderID     int64
	Key, Fingerprint    string
	Method, Path, Route string
}

func (r PayRequest) scope() idempotency.Scope { return idempotency.Scope{UserID: r.UserID, Key: r.Key} }

// Pay answers one pay request: the 201 of a created payment or the stored 422 of a refusal, fresh or
// replayed from the key's record. Errors (problem kinds, mapped by httpproblem.Handler):
// orders.ErrOrderNotFound (404), ErrNotPayable (409), idempotency.ErrKeyReused (422),
// idempotency.ErrKeyInUse (409 with Retry-After: this key's request, or another for the same order, is
// running), ErrPaymentUnavailable and ErrOutcomeUnknown (503 with Retry-After), or a database error.
//
// The steps, each its own function: lookup (a known key answers from its record), lock (the order's
// fenced lease), claim (the record, PROCESSING, before the call), callPlatform (under the watchdog, and
// only a holder that still holds its lease goes on), record (the fenced finish).
func (p *Payer) Pay(ctx context.Context, r PayRequest) (idempotency.Answer, error) {
	lg := logging.From(ctx).With("idempotency_key", r.Key, "order_id", r.OrderID)
	// lookup's order is read again after the claim (below), once the record is this caller's.
	_, done, ans, err := p.lookup(ctx, r)
	if err != nil || done {
		return ans, err
	}
	lease, busy, ans, err := p.lock(ctx, lg, r)
	if err != nil || busy {
		return ans, err
	}
	defer func() {
		if lease != nil {
			p.release(ctx, lease)
		}
	}()
	rec, claimed, ans, err := p.claim(ctx, r, lease)
	if behind := (*idempotency.FenceBehindError)(nil); errors.As(err, &behind) && lease != nil {
		// The record refused this lease's token, though nobody holds it: Redis's counter is behind the
		// row (it came back empty from a restart, or the database issued tokens while it was down).
		// Raise it past the row's and lock again; every retry was 409 until the counter caught up.
		lg.Warn("pay: the fencing counter is behind the record's token; raising it",
			"token", behind.Token, "stored", behind.Stored)
		if err := p.locker.RaiseFence(ctx, LockName(r.OrderID), behind.Stored); err != nil {
			return ans, err
		}
		p.release(ctx, lease)
		if lease, busy, ans, err = p.lock(ctx, lg, r); err != nil || busy {
			return ans, err
		}
		rec, claimed, ans, err = p.claim(ctx, r, lease)
	}
	if err != nil || !claimed {
		return ans, err
	}
	lg = lg.With("fence", rec.Fence)
	// From the claim on, the work no longer follows the client's connection: a client that hangs up
	// must not leave a created payment unrecorded. The platform call (PAYMENTS_TIMEOUT) and each
	// statement (DB_STATEMENT_TIMEOUT) keep their own bounds; detachedWorkLimit only ends a holder that
	// is stuck for good. It is deliberately not the lease: a holder that outlives its lease is stopped
	// by the fence in its write, which is the guard this flow teaches. The request's deadline (the
	// work time: HTTP_WRITE_TIMEOUT less the part kept to write the answer) still holds: past it the
	// answer could no longer be written, and a pay held up by a lock answered its client nothing (a
	// helper's finding, 2026-12-07). Work cut there leaves the record PROCESSING for the sweeper, as a
	// crash would.
	deadline := time.Now().Add(detachedWorkLimit)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	work, cancelWork := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancelWork()
	ctx = work
	p.fault.At(ctx, CrashAfterClaim)

	// This key ran before (its record may run again), and the order may have its payment by now: the
	// callback of that first call, whose answer was lost. The platform would return that payment for
	// the order, unless it forgot it (payments-mock after a restart), and then a second call would
	// charge again. The order's own payment is the answer.
	o, err := p.orders.Get(ctx, r.UserID, r.OrderID)
	if err != nil {
		return idempotency.Answer{}, p.heldAfterClaim(err)
	}
	if hasItsPayment(o) {
		lg.Info("pay retry: the order has its payment already; answering with it, not calling the platform",
			"payment_id", *o.PaymentID, "status", o.Status)
		return p.recordOrdersPayment(ctx, r.Route, rec, o)
	}

	payment, rpcErr, err := p.callPlatform(ctx, lg, r.Route, o, lease)
	if err != nil {
		return idempotency.Answer{}, err
	}
	return p.record(ctx, r.Route, rec, o, payment, rpcErr)
}

// hasItsPayment: o knows its payment, whatever it has become since (PAYING, PAID, REFUND_REQUIRED,
// REFUNDED, or FAILED: declined). An order has at most one payment, and the callbacks apply no other
// (payment_mismatch): a second one's money would be taken and never recorded, nor refunded.
func hasItsPayment(o orders.Order) bool { return o.PaymentID != nil }

// lookup answers a known key from its record, unless the record may run again, and reads the order.
// done: the answer or the error is final. It is also the local check: a new key for an order that
// already has a payment must not create a second one. (Two new keys racing past this check still get
// one payment: the platform is idempotent on merchant_order_no.)
func (p *Payer) lookup(ctx context.Context, r PayRequest) (o orders.Order, done bool, ans idempotency.Answer, err error) {
	rec, err := idempotency.Find(ctx, p.db, r.scope())
	if err != nil {
		return o, true, ans, err
	}
	if rec != nil && !mayRunAgain(*rec, r.Fingerprint) {
		ans, err = idempotency.Replay(p.metrics, r.Route, *rec, r.Fingerprint, p.cfg.Lease)
		return o, true, ans, err
	}
	o, err = p.orders.Get(ctx, r.UserID, r.OrderID)
	if err != nil {
		return o, true, ans, err // 404 stores nothing
	}
	if rec == nil && o.Status != orders.StatusPending {
		// This key's own first request may have finished between the two reads: its record answers.
		if cur, err := idempotency.Find(ctx, p.db, r.scope()); err != nil {
			return o, true, ans, err
		} else if cur != nil {
			ans, err = idempotency.Replay(p.metrics, r.Route, *cur, r.Fingerprint, p.cfg.Lease)
			return o, true, ans, err
		}
		return o, true, ans, ErrNotPayable.Wrap(fmt.Errorf("order %d is %s", o.ID, o.Status))
	}
	return o, false, ans, nil
}

// KeyReused returns idempotency.ErrKeyReused (422) when r's key already names another request (another
// fingerprint, in any state), nil when it names none or this one, or a database error. The pay route
// asks it before it refuses a request for its order id or its body.
func (p *Payer) KeyReused(ctx context.Context, r PayRequest) error {
	rec, err := idempotency.Find(ctx, p.db, r.scope())
	if err != nil || rec == nil {
		return err
	}
	return idempotency.Mismatch(p.metrics, r.Route, *rec, r.Fingerprint)
}

// lock takes the order's Redis lease, whose fencing token goes into every write of the record. busy:
// someone else is paying this order, and the answer or the error says so. A nil lease that is not busy
// means no Redis (none configured, or it is down): the database lease and fence alone guard the payment.
func (p *Payer) lock(ctx context.Context, lg *slog.Logger, r PayRequest) (lease *lock.Lease, busy bool, ans idempotency.Answer, err error) {
	if p.locker == nil {
		return nil, false, ans, nil
	}
	lease, err = p.locker.Acquire(ctx, LockName(r.OrderID), p.cfg.Lease)
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		// Someone is paying this order. If it is this key's own first request and it has claimed its
		// record by now, answer from the record; otherwise we cannot tell this key's first request
		// from another key's, so say both.
		cur, ferr := idempotency.Find(ctx, p.db, r.scope())
		if ferr != nil {
			return nil, true, ans, ferr
		}
		if cur != nil {
			ans, err = idempotency.Replay(p.metrics, r.Route, *cur, r.Fingerprint, p.cfg.Lease)
			return nil, true, ans, err
		}
		p.metrics.Count(r.Route, idempotency.OutcomeInFlight)
		return nil, true, ans, errOrderBusy.WithRetryAfter(p.cfg.Lease)
	case err != nil:
		lg.Warn("pay lock unavailable; the database lease and fence alone guard this payment", "err", err)
		return nil, false, ans, nil // fence 0: the database issues the token
	}
	return lease, false, ans, nil
}

// claim takes the record (PROCESSING) before the platform call, with the lease's fencing token (0
// without a lease: the database issues one). claimed false: the record is someone else's or final, and
// it answers.
func (p *Payer) claim(ctx context.Context, r PayRequest, lease *lock.Lease) (rec idempotency.Record, claimed bool, ans idempotency.Answer, err error) {
	var fence int64
	if lease != nil {
		fence = lease.Fence
	}
	var cl idempotency.Claim
	cl, err = p.store.Claim(ctx, r.scope(), Subject(r.OrderID), r.Method, r.Path, r.Fingerprint, fence, p.cfg.Lease)
	if postgres.MayHaveRun(err) {
		// The claim's statement went out and its answer never came (the request's work time ran out, the
		// connection broke): it may have run, and then the record is held for the lease (a verifier's
		// finding, 2026-12-07: a take-over that answered Retry-After 1 and then 409; a helper's, the same
		// day: a claim whose answer the connection lost).
		return rec, false, ans, errClaimUnknown.WithRetryAfter(p.cfg.Lease).Wrap(err)
	}
	if err != nil {
		return rec, false, ans, err
	}
	if !cl.Claimed {
		ans, err = idempotency.Replay(p.metrics, r.Route, cl.Record, r.Fingerprint, p.cfg.Lease)
		return rec, false, ans, err
	}
	p.metrics.PayRecord(r.OrderID, cl.Record.Fence, idempotency.StateProcessing) // live view (lab) only
	return cl.Record, true, ans, nil
}

// callPlatform creates the payment at the platform (merchant_order_no = the order id, on which the
// platform is idempotent) while the watchdog renews the lease. It returns the platform's answer and its
// error; err (idempotency.ErrKeyInUse) means this holder lost its lease during the call and must not
// write the result: the record stays PROCESSING for its new holder.
func (p *Payer) callPlatform(ctx context.Context, lg *slog.Logger, route string, o orders.Order, lease *lock.Lease) (payment payclient.Payment, rpcErr, err error) {
	// The watchdog renews the Redis lease while the platform call runs; if a renewal fails, the lease
	// may be someone else's and this holder must not write.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var lost <-chan error
	if lease != nil {
		lost = p.locker.KeepAlive(watchCtx, lease, p.cfg.Lease, p.cfg.Lease/3)
	}
	payment, _, rpcErr = p.platform.CreatePayment(ctx, payclient.CreatePaymentRequest{
		MerchantOrderNo: strconv.FormatInt(o.ID, 10), AmountCents: o.AmountCents, Currency: o.Currency,
		NotifyURL: p.cfg.CallbackURL})
	p.fault.At(ctx, CrashAfterRPC)
	stopWatch()
	if err := p.stillHeld(ctx, lease, lost); err != nil {
		// Someone else may hold the lease now. Stop before writing; the fence would refuse the write
		// anyway, but a holder that knows it lost does not even try. The record stays PROCESSING.
		lg.Warn("pay lease lost during the platform call; not writing the result", "err", err)
		p.metrics.Count(route, idempotency.OutcomeInFlight)
		return payclient.Payment{}, nil, idempotency.ErrKeyInUse.WithRetryAfter(p.cfg.Lease)
	}
	p.fault.At(ctx, CrashBeforeWrite)
	if rpcErr != nil {
		lg.Warn("payment platform call failed", "err", rpcErr)
	}
	return payment, rpcErr, nil
}

// mayRunAgain: a record with the same fingerprint that failed retryably, or that is PROCESSING, may be
// taken over by the retry. Whether a PROCESSING holder's lease ran out is the claim's to decide, on the
// database's clock (a live holder's record is then answered 409 from the record, as here). Everything
// else is answered from the record.
func mayRunAgain(rec idempotency.Record, fp string) bool {
	if rec.Fingerprint != fp {
		return false
	}
	return rec.State == idempotency.StateFailedRetryable || rec.State == idempotency.StateProcessing
}

// stillHeld reports whether the holder may write: the watchdog saw no loss, and one last renewal right
// before the write succeeds (the watchdog ticks only every lease/3, so it alone could miss a recent loss).
// Only lock.ErrLost stops the write: a Redis error says nothing about who holds the record, and the
// fence in the write protects it either way. Without a Redis lease (database fallback) the fence decides.
func (p *Payer) stillHeld(ctx context.Context, lease *lock.Lease, lost <-chan error) error {
	if lease == nil {
		return nil
	}
	var err error
	select {
	case err = <-lost:
	default:
	}
	if err == nil {
		err = p.locker.Renew(ctx, lease, p.cfg.Lease)
	}
	if err != nil && !errors.Is(err, lock.ErrLost) {
		logging.From(ctx).Warn("pay lease not confirmed (Redis error); writing under the fence", "err", err)
		return nil
	}
	return err
}

func (p *Payer) release(ctx context.Context, lease *lock.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := p.locker.Release(rctx, lease); err != nil {
		// ErrLost: it expired and maybe someone else holds it now; the fence protected the record.
		logging.From(ctx).Info("pay lease not released", "err", err)
	}
}

// markPaying records that the order has a payment: PENDING → PAYING (0 rows is fine: a callback may
// already have moved it on). Then whatever the platform's answer already says of the payment (settled
// before the answer came back, or found by the sweeper) is applied through the callbacks' own guarded
// steps, so the order never waits for a callback that may have come and gone, or never come.
func (p *Payer) markPaying(ctx context.Context, tx *gorm.DB, o orders.Order, pay payclient.Payment) error {
	if _, err := p.orders.Transition(ctx, tx, o.ID, orders.StatusPaying, pay.ID); err != nil {
		return err
	}
	_, _, err := p.settler.ApplyPayment(ctx, tx, o, pay)
	return err
}

// result is what the platform's answer means for the record and the client.
type result struct {
	state  idempotency.State // PROCESSING: outcome unknown, nothing is written
	status int               // the stored HTTP status (final states)
	body   []byte            // the stored body (final states)
	answer error             // the error to answer with when the answer is not the stored body
}

// answerOf is the client's answer to a stored result: its error when the answer needs more than the
// stored body (the 503 of FAILED_RETRYABLE carries Retry-After), else the stored status and body.
func (r result) answerOf() (idempotency.Answer, error) {
	if r.answer != nil {
		return idempotency.Answer{}, r.answer
	}
	return idempotency.Answer{Status: r.status, Body: r.body}, nil
}

// record writes the result of the platform call with the claimer's fence and returns the client's
// answer: the stored 201 or 422, or the error of a result that is not stored (503), or, when a newer
// holder's fence refused the write, fencedOut's answer.
func (p *Payer) record(ctx context.Context, route string, rec idempotency.Record, o orders.Order, pay payclient.Payment, rpcErr error) (idempotency.Answer, error) {
	r, err := p.outcome(o, rec.Path, pay, rpcErr)
	if err != nil {
		return idempotency.Answer{}, err
	}
	if r.state == idempotency.StateProcessing {
		// Outcome unknown: the payment may exist. Leave the record PROCESSING; when its lease runs out,
		// a retry or the sweeper asks the platform and finishes it.
		p.metrics.PayRecord(o.ID, rec.Fence, r.state)
		p.metrics.Count(route, idempotency.OutcomeExecuted)
		return idempotency.Answer{}, r.answer
	}
	err = p.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if r.state == idempotency.StateCompleted {
			if err := p.markPaying(ctx, tx, o, pay); err != nil {
				return err
			}
		}
		return p.store.Finish(ctx, tx, rec.ID, rec.Fence, r.state, r.status, r.body)
	})
	if errors.Is(err, idempotency.ErrFenced) {
		logging.From(ctx).Warn("stale pay holder: a newer fencing token owns the record; result dropped",
			"order_id", o.ID, "fence", rec.Fence)
		return p.fencedOut(ctx, route, rec)
	}
	if err != nil {
		// The platform answered and the shop could not write its answer down (the order row held past
		// DB_LOCK_TIMEOUT, a lost connection), or cannot know whether it did (the COMMIT's answer lost):
		// the record stays PROCESSING under its lease, or is COMPLETED, and for the client the outcome is
		// as unknown as after a timeout. The generic 503 (Retry-After: 1, nothing
		// was written) would be untrue: the payment exists, and retries inside the lease meet 409. After
		// the lease, a retry or the sweeper takes the record over and the platform returns the same payment.
		msg := "pay result not recorded; the record stays PROCESSING until its lease runs out"
		if postgres.MayHaveRun(err) {
			msg = "pay result's write went unanswered: recorded, or the record stays PROCESSING until its lease runs out"
		}
		logging.From(ctx).Warn(msg, "order_id", o.ID, "fence", rec.Fence, "err", err)
		p.metrics.PayRecord(o.ID, rec.Fence, idempotency.StateProcessing)
		p.metrics.Count(route, idempotency.OutcomeExecuted)
		return idempotency.Answer{}, errNotRecorded.WithRetryAfter(p.cfg.Lease).Wrap(err)
	}
	p.metrics.PayRecord(o.ID, rec.Fence, r.state)
	p.metrics.Count(route, idempotency.OutcomeExecuted)
	return r.answerOf()
}

// recordOrdersPayment finishes rec COMPLETED with the 201 of o's own payment, the answer its first call
// would have got, and leaves the order as it is (its payment is already on it); fencedOut's answer when
// a newer holder's fence refused the write.
func (p *Payer) recordOrdersPayment(ctx context.Context, route string, rec idempotency.Record, o orders.Order) (idempotency.Answer, error) {
	body, err := json.Marshal(p.response(o.ID, *o.PaymentID))
	if err != nil {
		return idempotency.Answer{}, err
	}
	err = p.store.Finish(ctx, p.db, rec.ID, rec.Fence, idempotency.StateCompleted, http.StatusCreated, body)
	if errors.Is(err, idempotency.ErrFenced) {
		return p.fencedOut(ctx, route, rec)
	}
	if err != nil {
		return idempotency.Answer{}, p.heldAfterClaim(err)
	}
	p.metrics.PayRecord(o.ID, rec.Fence, idempotency.StateCompleted)
	p.metrics.Count(route, idempotency.OutcomeExecuted)
	return idempotency.Answer{Status: http.StatusCreated, Body: body}, nil
}

// fencedOut answers a holder whose write the fence refused: a newer holder took rec over. Once that
// holder has finished, its stored answer is the key's answer, replayed as to any retry (201 or 422,
// Idempotent-Replayed); while it still works, or if the record cannot be read, idempotency.ErrKeyInUse
// (409) with Retry-After PAY_LEASE. (A multi-replica adversary's finding, 2026-12-07: the stale holder
// answered 409 and made its client wait a lease for an answer that was already there.)
func (p *Payer) fencedOut(ctx context.Context, route string, rec idempotency.Record) (idempotency.Answer, error) {
	cur, err := idempotency.Find(ctx, p.db, idempotency.Scope{UserID: rec.UserID, Key: rec.IdempotencyKey})
	if err != nil || cur == nil {
		p.metrics.Count(route, idempotency.OutcomeInFlight)
		return idempotency.Answer{}, idempotency.ErrKeyInUse.WithRetryAfter(p.cfg.Lease)
	}
	return idempotency.Replay(p.metrics, route, *cur, rec.Fingerprint, p.cfg.Lease)
}

// outcome maps the platform's answer to the record's next state and the client's answer:
//
//	success                          → COMPLETED, 201 {"order_id","payment_id","status":"PAYING","pay_url"}
//	4xx except 408 and 429 (refused) → FAILED_PERMANENT, 422 payment_refused (replayed to retries)
//	503, 408, 429, a dial that failed → FAILED_RETRYABLE, 503 payment_unavailable (a retry runs again)
//	anything else: timeout, reset after the request was written, 500, 502, 504, garbled answer
//	                                 → stays PROCESSING, 503 payment_outcome_unknown (the sweeper asks)
//
// path is the record's request path: a stored problem (the RFC 9457 document the client would get) names
// it as its instance, as a live one would, and is replayed byte for byte. The path was stored as routed
// (/v1/orders/7/pay: digits only between its fixed segments), so it is the escaped path
// httpproblem.Instance gives a live answer.
func (p *Payer) outcome(o orders.Order, path string, pay payclient.Payment, rpcErr error) (result, error) {
	switch {
	case rpcErr == nil:
		body, err := json.Marshal(p.response(o.ID, pay.ID))
		return result{state: idempotency.StateCompleted, status: http.StatusCreated, body: body}, err
	case payclient.IsRefusal(rpcErr):
		st, code, _ := payclient.Refused(rpcErr)
		pe := problem.Newf(problem.KindUnprocessable, ErrPaymentRefused.Code,
			"the payment platform refused the payment (HTTP %d %s)", st, code)
		body, err := httpproblem.Document(pe, path)
		return result{state: idempotency.StateFailedPermanent, status: httpproblem.StatusOf(pe.Kind), body: body}, err
	case isRetryable(rpcErr):
		body, err := httpproblem.Document(ErrPaymentUnavailable, path)
		return result{state: idempotency.StateFailedRetryable, status: http.StatusServiceUnavailable, body: body,
			answer: ErrPaymentUnavailable.WithRetryAfter(p.cfg.Lease).Wrap(rpcErr)}, err
	default:
		return result{state: idempotency.StateProcessing,
			answer: ErrOutcomeUnknown.WithRetryAfter(p.cfg.Lease).Wrap(rpcErr)}, nil
	}
}

func (p *Payer) response(orderID int64, paymentID string) payResponse {
	return payResponse{OrderID: orderID, PaymentID: paymentID, Status: string(orders.StatusPaying),
		PayURL: publicBase(p.cfg.PaymentsURL) + "/v1/payments/" + paymentID}
}

// publicBase is base without its userinfo. pay_url goes to every paying client, and is stored and
// replayed with the answer; credentials in PAYMENTS_URL are the shop's, for its own calls (a helper's
// finding, 2026-12-06: they were in every pay answer).
func publicBase(base string) string {
	u, err := url.Parse(base)
	if err != nil || u.User == nil {
		return base
	}
	u.User = nil
	return u.String()
}

// isRetryable: the platform did not take the request: the dial failed (nothing was sent), or it said
// "not now" (503, 408, 429). Every other failure came after the request may have been written, so the
// payment may exist: that is outcome unknown, never retryable, however the connection broke.
func isRetryable(err error) bool {
	var se *payclient.StatusError
	if errors.As(err, &se) {
		switch se.Status {
		case http.StatusServiceUnavailable, http.StatusRequestTimeout, http.StatusTooManyRequests:
			return true
		}
		return false
	}
	return errors.Is(err, payclient.ErrNotSent)
}
