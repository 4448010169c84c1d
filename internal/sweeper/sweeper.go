// Package sweeper is ladder step 3: ask the downstream. The sweeper settles pay records stuck in
// PROCESSING (a crash after the platform call, or a timeout) from the platform's query API; the
// reconciler, its slower and unbounded sibling, settles every unfinished record and then compares
// non-final orders with the platform. Neither stores an answer of its own: only the platform knows
// whether a payment exists. How a record is taken over and written stays with the pay flow
// (pay.Payer.TakeOver, Complete, NoPayment); how an order moves stays with the callback guard.
package sweeper

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/idempotency"
	"idemshop/internal/pay"
	"idemshop/internal/payclient"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/retry"
	"idemshop/internal/refunds"
)

// Sweeper is ladder step 3: it resolves pay records stuck in PROCESSING (a crash after the platform
// call, or a timeout) by asking the platform's query API for the fact, under the same fenced lock as a
// live retry. It also executes recorded refunds.
type Sweeper struct {
	payer       *pay.Payer
	store       *idempotency.Store
	platform    *payclient.Client
	refunds     *refunds.Executor
	logger      *slog.Logger
	maxAttempts int
	batch       int
	repairs     *prometheus.CounterVec
	records     *prometheus.GaugeVec
}

// Repair results counted by idemshop_sweeper_repairs_total.
const (
	RepairCompleted   = "completed"   // the platform has the payment: COMPLETED
	RepairRetryable   = "retryable"   // the platform has no payment: FAILED_RETRYABLE
	RepairUnreachable = "unreachable" // the platform did not answer: try again after the lease
	RepairGaveUp      = "gave_up"     // unanswered maxAttempts times: an alert; the reconciler keeps asking
	RepairFenced      = "fenced"      // a live retry took the record over meanwhile
	RepairFailed      = "failed"      // a statement of it failed (the database): PROCESSING for a later sweep
)

// The keys under which RunOnce's result counts the refund requests it sent, by the platform's answer.
// They are not repair results.
const (
	RefundRequested  = "refund_requested"  // accepted: REQUESTED, its callback settles it
	RefundUnanswered = "refund_unanswered" // no answer: PENDING for the next sweep
	RefundRefused    = "refund_refused"    // refused: an alert; PENDING, sent again after REFUND_RETRY_MIN or more
)

// refundKeys maps the refund executor's results onto RunOnce's keys.
var refundKeys = map[string]string{
	refunds.ResultRequested:   RefundRequested,
	refunds.ResultUnreachable: RefundUnanswered,
	refunds.ResultRefused:     RefundRefused,
}

// RefundsFailed is the key under which RunOnce's result says that the refund step stopped on an error
// (the database; logged): 1, and the requests it did not reach stay PENDING for the next sweep. It is
// not a repair result.
const RefundsFailed = "refunds_failed"

// NewSweeper returns the sweeper. payer writes the records it settles, store finds them, platform
// answers about them; refunds is run on every sweep. maxAttempts bounds how often the sweeper asks the
// platform about one record without an answer (a client's own retries do not count); batch bounds one run.
func NewSweeper(payer *pay.Payer, store *idempotency.Store, platform *payclient.Client, refunds *refunds.Executor,
	logger *slog.Logger, reg prometheus.Registerer, maxAttempts, batch int) (*Sweeper, error) {
	if payer == nil || store == nil || platform == nil || refunds == nil || logger == nil || reg == nil || maxAttempts <= 0 || batch <= 0 {
		return nil, errors.New("sweeper: NewSweeper needs a payer, a store, a platform client, a refund executor, a logger, a registry, maxAttempts > 0 and batch > 0")
	}
	s := &Sweeper{payer: payer, store: store, platform: platform, refunds: refunds, logger: logger,
		maxAttempts: maxAttempts, batch: batch,
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_sweeper_repairs_total",
			Help: "Stuck PROCESSING pay records handled by the sweeper, by result.",
		}, []string{"result"}),
		records: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idemshop_pay_records",
			Help: "Unfinished pay idempotency records (PROCESSING, FAILED_RETRYABLE) by state, as of the last sweep.",
		}, []string{"status"}),
	}
	// Every series exists from the start, at 0.
	for _, r := range []string{RepairCompleted, RepairRetryable, RepairUnreachable, RepairGaveUp, RepairFenced, RepairFailed} {
		s.repairs.WithLabelValues(r)
	}
	for _, st := range recordStates {
		s.records.WithLabelValues(string(st))
	}
	reg.MustRegister(s.repairs, s.records)
	return s, nil
}

// recordStates are the states idemshop_pay_records reports: the unfinished ones, which the sweeper
// and an operator watch. The finished ones are not counted: that read every key of the retention
// window on every sweep (Store.CountUnfinished).
var recordStates = []idempotency.State{idempotency.StateProcessing, idempotency.StateFailedRetryable}

// RunOnce repairs every stuck pay record (up to the batch; the first question the platform leaves
// unanswered ends the repairs), executes pending refunds, and refreshes the record gauge. It returns
// how many records it repaired by result, how many refund requests it
// sent by the platform's answer (RefundRequested, RefundUnanswered, RefundRefused), and under
// RefundsFailed whether the refund step failed. A repair or refund step that fails is logged and
// counted, and the run goes on: the error returned is that of the run's own reads, or ctx's when it
// ended (the process stopping: then the run ends quietly).
func (s *Sweeper) RunOnce(ctx context.Context) (map[string]int, error) {
	recs, err := s.store.Stuck(ctx, idempotency.KindPay, s.maxAttempts, s.batch)
	if err != nil {
		return nil, err
	}
	done := map[string]int{}
	for _, rec := range recs {
		result, err := s.repair(ctx, rec, true, 0)
		if err != nil && ctx.Err() != nil {
			return done, ctx.Err() // the process is stopping: not a failure, and the next sweep goes on
		}
		if err != nil {
			s.logger.Error("sweeper: repair failed", "record_id", rec.ID, "err", err)
			result = RepairFailed // counted, so that `sweep --once` does not exit 0 over it
		}
		if result != "" {
			done[result]++
			s.repairs.WithLabelValues(result).Inc()
		}
		if result == RepairUnreachable || result == RepairGaveUp {
			// The platform left a question unanswered (PAYMENTS_TIMEOUT, for one that stalls): the next
			// would most likely wait as long. The rest waits for the next sweep, and this record, its
			// lease renewed by the takeover, goes behind them. One pass asked every record in turn:
			// 5-7 s for 8 records, about 5 minutes at the defaults, with the refunds and the gauge
			// behind it (a helper's finding, 2026-12-06). The reconciler stops the same way.
			break
		}
	}
	// A refund step that failed partway has counted the requests it sent before the failure.
	sent, err := s.refunds.RunOnce(ctx)
	for result, n := range sent {
		done[refundKeys[result]] = n
	}
	if err != nil && ctx.Err() != nil {
		return done, ctx.Err()
	}
	if err != nil {
		s.logger.Error("sweeper: refunds failed", "err", err)
		done[RefundsFailed] = 1
	}
	return done, s.countRecords(ctx)
}

// countRecords sets idemshop_pay_records from the database.
func (s *Sweeper) countRecords(ctx context.Context) error {
	counts, err := s.store.CountUnfinished(ctx, idempotency.KindPay)
	if err != nil {
		return err
	}
	for _, st := range recordStates {
		s.records.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
	return nil
}

// Run calls RunOnce every interval until ctx is done.
//
// The gauges (idemshop_pay_records, idemshop_refunds_unanswered_pending) are read once at start, before
// the first interval: a restarted replica showed 0 for both until its first sweep had sent its refunds
// (5 s at the defaults, more with a stalled platform), and an alert on them resolved and fired again at
// every restart (an observability helper's finding, 2026-12-07).
func (s *Sweeper) Run(ctx context.Context, interval time.Duration) {
	if err := s.countRecords(ctx); err != nil && ctx.Err() == nil {
		s.logger.Warn("sweeper: could not count the unfinished pay records at start", "err", err)
	}
	s.refunds.CountOwedSilent(ctx)
	retry.Every(ctx, interval, func() {
		done, err := s.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.logger.Error("sweeper run failed", "err", err)
		} else if len(done) > 0 {
			s.logger.Info("sweeper run", "results", done)
		}
	})
}

// repair takes one stuck record over (fenced, like a live retry would) and asks the platform whether
// the payment exists. "" means it did nothing (someone else holds it). bounded counts an unanswered
// question towards maxAttempts (the sweeper); the reconciler asks without a bound. A record the
// platform has no payment for is left FAILED_RETRYABLE, and the reconciler asks about it again not
// before askAgain (its RECONCILE_RECHECK; 0 from the sweeper: after RECONCILE_GRACE).
func (s *Sweeper) repair(ctx context.Context, stuck idempotency.Record, bounded bool, askAgain time.Duration) (string, error) {
	rec, release, ok, err := s.payer.TakeOver(logging.With(ctx, s.logger), stuck)
	if err != nil || !ok {
		return "", err
	}
	defer release()
	orderID := *rec.OrderID
	lg := s.logger.With("order_id", orderID, "record_id", rec.ID, "fence", rec.Fence, "attempts", rec.Attempts)

	// Ask before anything else: only the platform knows whether the payment exists, and no answer
	// stored here may contradict it (so there is no "give up" answer to store).
	payment, found, err := s.platform.FindByMerchantOrderNo(ctx, strconv.FormatInt(orderID, 10))
	if err != nil {
		// The platform is unreachable: leave the record PROCESSING; the claim renewed its lease, so
		// the next sweep after the lease tries again, up to maxAttempts unanswered questions.
		who := "sweeper" // the reconciler repairs through here too
		if !bounded {
			who = "reconcile"
		}
		lg.Warn(who+": payment platform unreachable; will retry", "err", err, "sweeps", rec.Sweeps)
		if !bounded && stuck.State == idempotency.StateFailedRetryable {
			// The reconciler took over a record whose last answer was "nothing was sent", and learnt
			// nothing: give that answer back, so that the client's retry runs again at once. Left
			// PROCESSING under the takeover's lease, the retry got 409 until the lease ran out.
			return fenced(s.payer.NoPayment(ctx, rec, 0), RepairUnreachable)
		}
		if !bounded {
			return RepairUnreachable, nil
		}
		n, err := s.payer.NoteUnanswered(ctx, rec)
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
		return fenced(s.payer.NoPayment(ctx, rec, askAgain), RepairRetryable)
	}
	// The payment exists: COMPLETED with the answer the client would have got; the order becomes
	// PAYING, or stays PAID if the callback came first.
	return fenced(s.payer.Complete(ctx, rec, orderID, payment), RepairCompleted)
}

// fenced names the end of a repair whose write returned err: result if it was written, RepairFenced if
// a newer holder owned the record by then (nothing written, and nothing to do), an error otherwise.
func fenced(err error, result string) (string, error) {
	switch {
	case errors.Is(err, idempotency.ErrFenced):
		return RepairFenced, nil
	case err != nil:
		return "", err
	}
	return result, nil
}
