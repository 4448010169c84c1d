package refunds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"idemshop/internal/payclient"
)

// Results of sending one refund, the label values of idemshop_refunds_requests_total.
const (
	ResultRequested   = "requested"   // the platform accepted the refund (or already had it)
	ResultUnreachable = "unreachable" // no answer: the row stays PENDING for the next run
	ResultRefused     = "refused"     // the platform said no: an alert, checked by hand, asked again later
)

// Executor sends PENDING refund requests to the platform. The sweeper runs it on every sweep.
type Executor struct {
	db         *gorm.DB
	platform   *payclient.Client
	logger     *slog.Logger
	batch      int
	retry      RetryPolicy
	alertAfter int
	results    *prometheus.CounterVec
	unanswered prometheus.Counter
	owedSilent prometheus.Gauge
}

// NewExecutor returns the executor; batch bounds the requests of one run, retry spaces out the
// requests of a refused refund, and a request the platform has left unanswered alertAfter times
// (SWEEP_MAX_ATTEMPTS) is alerted once (alert=refund_unanswered) and still sent at every run. Its
// metrics are registered on reg.
func NewExecutor(db *gorm.DB, platform *payclient.Client, logger *slog.Logger, reg prometheus.Registerer, batch int,
	retry RetryPolicy, alertAfter int) (*Executor, error) {
	if db == nil || platform == nil || logger == nil || reg == nil || batch <= 0 || alertAfter <= 0 {
		return nil, errors.New("refunds: NewExecutor needs a db, a platform client, a logger, a registry, batch > 0 and alertAfter > 0")
	}
	if retry.Min <= 0 || retry.Max < retry.Min {
		return nil, fmt.Errorf("refunds: bad retry policy %+v (want 0 < Min <= Max)", retry)
	}
	e := &Executor{db: db, platform: platform, logger: logger, batch: batch, retry: retry, alertAfter: alertAfter,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_refunds_requests_total",
			Help: "Refund requests sent to the payment platform, by result.",
		}, []string{"result"}),
		unanswered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_refunds_unanswered_alerts_total",
			Help: "Refund requests this process alerted as left unanswered SWEEP_MAX_ATTEMPTS times (alert=refund_unanswered); each is still sent at every sweep.",
		}),
		owedSilent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemshop_refunds_unanswered_pending",
			Help: "Refund requests still owed (PENDING) that were alerted as unanswered, by any process: read from the database at every sweep.",
		})}
	for _, r := range []string{ResultRequested, ResultUnreachable, ResultRefused} {
		e.results.WithLabelValues(r) // every series exists from the start, at 0
	}
	reg.MustRegister(e.results, e.unanswered, e.owedSilent)
	return e, nil
}

// RunOnce sends every due PENDING refund request (up to the batch) to the platform. The platform is
// idempotent on refund_no (one per order), so a crash between the call and MarkRequested, or two
// replicas sending the same request, still makes one refund. It stops at the first request that gets
// no answer at all (a connection error or a timeout): the rest would wait out the same timeout one by
// one. A request answered without a verdict (a 5xx, 408, 429 or a garbled body) is counted unreachable
// too, but the run goes on: the platform answers, so the next one costs no timeout. Either way the
// request is postponed: it is sent again after the others (ListPending). A refused one is alerted and not due
// again before the retry policy's wait. sent counts the requests by result (ResultRequested,
// ResultUnreachable, ResultRefused), also when err is not nil, so that `orders sweep --once` can say
// what it did and whether work is left.
func (e *Executor) RunOnce(ctx context.Context) (sent map[string]int, err error) {
	sent = map[string]int{}
	defer e.CountOwedSilent(ctx)
	var reqs []Pending
	reqs, err = ListPending(ctx, e.db, e.batch)
	if err != nil {
		return sent, err
	}
	for _, r := range reqs {
		_, _, err := e.platform.Refund(ctx, payclient.RefundRequest{PaymentID: r.PaymentID, RefundNo: r.RefundNo,
			AmountCents: r.AmountCents})
		if err != nil {
			// Even when the send failed because the process is stopping: one short statement, and
			// without it the request would keep its place at the head of the queue.
			after := context.WithoutCancel(ctx)
			result := sendResult(err)
			if result == ResultRefused {
				wait := e.retry.After(r.Refusals + 1)
				recorded, rerr := Refused(after, e.db, r.ID, r.RefundNo, r.Refusals, r.AmountCents, wait)
				if rerr != nil {
					return sent, rerr
				}
				if recorded {
					e.logger.Error("ALERT: payment platform refused a refund; check it by hand", "alert", "refund_refused",
						"order_id", r.OrderID, "payment_id", r.PaymentID, "refund_no", r.RefundNo, "amount_cents", r.AmountCents,
						"refusals", r.Refusals+1, "next_attempt_in", wait, "err", err)
				} else {
					e.logger.Info("payment platform refused a refund whose refusal was not counted: another sweeper "+
						"counted it in the same round, or the request was capped while it was sent",
						"order_id", r.OrderID, "refund_no", r.RefundNo, "sent_cents", r.AmountCents)
				}
			} else if n, perr := Postpone(after, e.db, r.ID, r.RefundNo); perr != nil {
				return sent, perr
			} else if n == 0 {
				// Its callback closed it while the send went unanswered: nothing is owed, nothing to count.
				e.logger.Info("payment platform did not answer a refund that was closed meanwhile",
					"order_id", r.OrderID, "refund_no", r.RefundNo, "err", err)
			} else if aerr := e.unansweredSend(after, r, n, err); aerr != nil {
				return sent, aerr
			}
			sent[result]++
			e.results.WithLabelValues(result).Inc()
			if errors.Is(err, payclient.ErrConnection) || errors.Is(err, payclient.ErrTimeout) {
				return sent, nil
			}
			continue
		}
		if err := MarkRequested(ctx, e.db, r.ID, r.RefundNo); err != nil {
			return sent, err
		}
		sent[ResultRequested]++
		e.results.WithLabelValues(ResultRequested).Inc()
	}
	return sent, nil
}

// unansweredSend logs the n-th send of request r that the platform left unanswered (sendErr): a WARN,
// and once n reaches alertAfter, one ALERT for the request (MarkUnansweredAlerted), not one at every
// sweep: the refund is owed all the while, and a WARN at every sweep is what nobody reads.
func (e *Executor) unansweredSend(ctx context.Context, r Pending, n int, sendErr error) error {
	if n >= e.alertAfter {
		first, err := MarkUnansweredAlerted(ctx, e.db, r.ID, r.RefundNo)
		if err != nil {
			return err
		}
		if first {
			e.logger.Error("ALERT: payment platform has not answered a refund; it is owed and still sent at every sweep",
				"alert", "refund_unanswered", "order_id", r.OrderID, "payment_id", r.PaymentID, "refund_no", r.RefundNo,
				"amount_cents", r.AmountCents, "unanswered", n, "err", sendErr)
			e.unanswered.Inc()
			return nil
		}
	}
	e.logger.Warn("payment platform did not answer a refund; sent again at the next sweep",
		"order_id", r.OrderID, "refund_no", r.RefundNo, "unanswered", n, "err", sendErr)
	return nil
}

// CountOwedSilent sets idemshop_refunds_unanswered_pending from the database. The alert's counter
// counts only the process that raised it, and `orders sweep --once` has no /metrics: an alert it raised
// marked the request, so no replica counted it (an on-call trainee's finding, 2026-12-07). The gauge
// is the same on every replica, and stays up while the refund is owed. A failed read leaves it as it
// was, and a stopping process does not read. RunOnce ends with it; the sweeper's Run calls it at
// start too, so that a restarted replica does not show 0 for a sweep interval.
func (e *Executor) CountOwedSilent(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	n, err := CountUnansweredAlerted(ctx, e.db)
	if err != nil {
		e.logger.Warn("refunds: could not count the unanswered refunds still owed", "err", err)
		return
	}
	e.owedSilent.Set(float64(n))
}

// sendResult names a failed send that did not stop the run: refused when the platform said no to the
// request as sent, unreachable otherwise (a 5xx or a garbled answer: the row stays PENDING).
func sendResult(err error) string {
	if payclient.IsRefusal(err) {
		return ResultRefused
	}
	return ResultUnreachable
}
