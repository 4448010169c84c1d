package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/orders"
	"idemshop/internal/payclient"
)

// payPathLike matches the records of the pay route.
const payPathLike = "/v1/orders/%/pay"

// Sweeper is ladder step 3: it resolves pay records stuck in PROCESSING (a crash after the platform
// call, or a timeout) by asking the platform's query API for the fact, under the same fenced lock as a
// live retry. It also executes recorded refunds.
type Sweeper struct {
	payer       *Payer
	logger      *slog.Logger
	maxAttempts int
	batch       int
	repairs     *prometheus.CounterVec
	records     *prometheus.GaugeVec
	refunds     *prometheus.CounterVec
}

// Repair results counted by idemshop_sweeper_repairs_total.
const (
	RepairCompleted   = "completed"   // the platform has the payment: COMPLETED
	RepairRetryable   = "retryable"   // the platform has no payment: FAILED_RETRYABLE
	RepairUnreachable = "unreachable" // the platform did not answer: try again after the lease
	RepairGaveUp      = "gave_up"     // unanswered maxAttempts times: an alert; the reconciler keeps asking
	RepairFenced      = "fenced"      // a live retry took the record over meanwhile

	// Refund results, the label values of idemshop_refunds_total.
	RefundRequested   = "requested"   // the platform accepted the refund (or already had it)
	RefundUnreachable = "unreachable" // no answer: the row stays PENDING for the next sweep
	RefundRefused     = "refused"     // the platform said no: an alert, checked by hand
)

// NewSweeper returns the sweeper. maxAttempts bounds how often the sweeper asks the platform about one
// record without an answer (a client's own retries do not count); batch bounds one run.
func NewSweeper(payer *Payer, logger *slog.Logger, reg prometheus.Registerer, maxAttempts, batch int) (*Sweeper, error) {
	if payer == nil || logger == nil || reg == nil || maxAttempts <= 0 || batch <= 0 {
		return nil, errors.New("payments: NewSweeper needs a payer, a logger, a registry, maxAttempts > 0 and batch > 0")
	}
	s := &Sweeper{payer: payer, logger: logger, maxAttempts: maxAttempts, batch: batch,
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_sweeper_repairs_total",
			Help: "Stuck PROCESSING pay records handled by the sweeper, by result.",
		}, []string{"result"}),
		records: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idemshop_pay_records",
			Help: "Pay idempotency records by state, as of the last sweep.",
		}, []string{"status"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_refunds_total",
			Help: "Refund requests sent to the payment platform, by result.",
		}, []string{"result"}),
	}
	// Every series exists from the start, at 0.
	for _, r := range []string{RepairCompleted, RepairRetryable, RepairUnreachable, RepairGaveUp, RepairFenced} {
		s.repairs.WithLabelValues(r)
	}
	for _, st := range recordStates {
		s.records.WithLabelValues(string(st))
	}
	for _, r := range []string{RefundRequested, RefundUnreachable, RefundRefused} {
		s.refunds.WithLabelValues(r)
	}
	reg.MustRegister(s.repairs, s.records, s.refunds)
	return s, nil
}

// recordStates are the states idemshop_pay_records reports.
var recordStates = []idempotency.State{idempotency.StateProcessing, idempotency.StateCompleted,
	idempotency.StateFailedRetryable, idempotency.StateFailedPermanent}

// RunOnce repairs every stuck pay record (up to the batch), executes pending refunds, and refreshes
// the record gauge. It returns how many records it repaired by result.
func (s *Sweeper) RunOnce(ctx context.Context) (map[string]int, error) {
	recs, err := s.payer.store.Stuck(ctx, payPathLike, s.maxAttempts, s.batch)
	if err != nil {
		return nil, err
	}
	done := map[string]int{}
	for _, rec := range recs {
		result, err := s.repair(ctx, rec, true)
		if err != nil {
			s.logger.Error("sweeper: repair failed", "record_id", rec.ID, "err", err)
			continue
		}
		if result != "" {
			done[result]++
			s.repairs.WithLabelValues(result).Inc()
		}
	}
	if err := s.executeRefunds(ctx); err != nil {
		s.logger.Error("sweeper: refunds failed", "err", err)
	}
	counts, err := s.payer.store.CountByState(ctx, payPathLike)
	if err != nil {
		return done, err
	}
	for _, st := range recordStates {
		s.records.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
	return done, nil
}

// Run calls RunOnce every interval until ctx is done.
func (s *Sweeper) Run(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		done, err := s.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.logger.Error("sweeper run failed", "err", err)
		} else if len(done) > 0 {
			s.logger.Info("sweeper repaired pay records", "results", done)
		}
	})
}

// every calls fn every interval until ctx is done (the sweeper's and the reconciler's loop).
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// repair takes one stuck record over (fenced, like a live retry would) and asks the platform whether
// the payment exists. "" means it did nothing (someone else holds it). bounded counts an unanswered
// question towards maxAttempts (the sweeper); the reconciler asks without a bound.
func (s *Sweeper) repair(ctx context.Context, stuck idempotency.Record, bounded bool) (string, error) {
	p := s.payer
	orderID, err := orderIDFromPath(stuck.Path)
	if err != nil {
		return "", err
	}
	var fence int64
	if p.locker != nil {
		lease, err := p.locker.Acquire(ctx, LockName(orderID), p.cfg.Lease)
		switch {
		case errors.Is(err, lock.ErrNotAcquired):
			return "", nil // a live retry is on it
		case err != nil:
			s.logger.Warn("sweeper: lock unavailable; using the database lease", "err", err)
		default:
			fence = lease.Fence
			defer p.release(ctx, lease)
		}
	}
	scope := idempotency.Scope{UserID: stuck.UserID, Key: stuck.IdempotencyKey}
	cl, err := p.store.Claim(ctx, scope, stuck.Method, stuck.Path, stuck.Fingerprint, fence, p.cfg.Lease)
	if err != nil || !cl.Claimed {
		return "", err
	}
	rec := cl.Record
	lg := s.logger.With("order_id", orderID, "record_id", rec.ID, "fence", rec.Fence, "attempts", rec.Attempts)

	// Ask before anything else: only the platform knows whether the payment exists, and no answer
	// stored here may contradict it (so there is no "give up" answer to store).
	pay, found, err := p.platform.FindByMerchantOrderNo(ctx, strconv.FormatInt(orderID, 10))
	if err != nil {
		// The platform is unreachable: leave the record PROCESSING; the claim renewed its lease, so
		// the next sweep after the lease tries again, up to maxAttempts unanswered questions.
		lg.Warn("sweeper: payment platform unreachable; will retry", "err", err)
		if !bounded {
			return RepairUnreachable, nil
		}
		n, err := p.store.NoteUnanswered(ctx, rec.ID, rec.Fence)
		if errors.Is(err, idempotency.ErrFenced) {
			return RepairFenced, nil
		}
		if err != nil {
			return "", err
		}
		if n >= s.maxAttempts {
			lg.Error("ALERT: the payment platform left this pay record unanswered the maximum number of times; "+
				"the sweeper stops asking, the reconciler keeps asking on its slower schedule",
				"alert", "sweeper_gave_up", "sweeps", n)
			return RepairGaveUp, nil
		}
		return RepairUnreachable, nil
	}
	if !found {
		body, err := problemBody(ErrPaymentUnavailable)
		if err != nil {
			return "", err
		}
		return s.finish(ctx, rec, orderID, RepairRetryable, idempotency.StateFailedRetryable, http.StatusServiceUnavailable, body, nil)
	}
	// The payment exists: COMPLETED with the answer the client would have got; the order becomes
	// PAYING, or stays PAID if the callback came first.
	resp, err := json.Marshal(p.response(orderID, pay.ID))
	if err != nil {
		return "", err
	}
	return s.finish(ctx, rec, orderID, RepairCompleted, idempotency.StateCompleted, http.StatusCreated, resp, &pay)
}

func (s *Sweeper) finish(ctx context.Context, rec idempotency.Record, orderID int64, result string, state idempotency.State,
	status int, body []byte, pay *payclient.Payment) (string, error) {
	p := s.payer
	err := p.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if pay != nil {
			o, err := p.orders.Lookup(ctx, tx, orderID)
			if err != nil {
				return err
			}
			if err := p.markPaying(ctx, tx, o, *pay); err != nil {
				return err
			}
		}
		return p.store.Finish(ctx, tx, rec.ID, rec.Fence, state, status, body)
	})
	if errors.Is(err, idempotency.ErrFenced) {
		return RepairFenced, nil
	}
	if err != nil {
		return "", err
	}
	return result, nil
}

// executeRefunds sends every PENDING refund request to the platform. The platform is idempotent on
// refund_no (one per order), so a crash between the call and the UPDATE, or two replicas sending the
// same request, still makes one refund.
func (s *Sweeper) executeRefunds(ctx context.Context) error {
	p := s.payer
	var reqs []struct {
		ID          int64
		OrderID     int64
		PaymentID   string
		RefundNo    string
		AmountCents int64
	}
	err := p.db.WithContext(ctx).Raw(`SELECT id, order_id, payment_id, refund_no, amount_cents
		FROM refund_requests WHERE status = 'PENDING' ORDER BY id LIMIT ?`, s.batch).Scan(&reqs).Error
	if err != nil {
		return fmt.Errorf("list refund requests: %w", err)
	}
	for _, r := range reqs {
		_, _, err := p.platform.Refund(ctx, payclient.RefundRequest{PaymentID: r.PaymentID, RefundNo: r.RefundNo,
			AmountCents: r.AmountCents})
		if err != nil {
			if errors.Is(err, payclient.ErrConnection) || errors.Is(err, payclient.ErrTimeout) {
				// The platform is down: the rest would wait out the same timeout one by one.
				s.refunds.WithLabelValues(RefundUnreachable).Inc()
				return nil
			}
			result := RefundUnreachable
			if isRefusal(err) {
				result = RefundRefused
				s.logger.Error("ALERT: payment platform refused a refund; check it by hand", "alert", "refund_refused",
					"order_id", r.OrderID, "refund_no", r.RefundNo, "err", err)
			}
			s.refunds.WithLabelValues(result).Inc()
			continue
		}
		if err := p.db.WithContext(ctx).Exec(`UPDATE refund_requests SET status = 'REQUESTED', updated_at = now()
			WHERE id = ? AND status = 'PENDING'`, r.ID).Error; err != nil {
			return fmt.Errorf("mark refund %s requested: %w", r.RefundNo, err)
		}
		s.refunds.WithLabelValues(RefundRequested).Inc()
	}
	return nil
}

// orderIDFromPath reads the order id out of "/v1/orders/{id}/pay".
func orderIDFromPath(path string) (int64, error) {
	rest, ok := strings.CutPrefix(path, "/v1/orders/")
	if !ok {
		return 0, fmt.Errorf("not a pay path: %q", path)
	}
	idText, ok := strings.CutSuffix(rest, "/pay")
	if !ok {
		return 0, fmt.Errorf("not a pay path: %q", path)
	}
	id, ok := orders.ParseID(idText)
	if !ok {
		return 0, fmt.Errorf("not a pay path: %q", path)
	}
	return id, nil
}
