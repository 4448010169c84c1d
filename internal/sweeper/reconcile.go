package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/callback"
	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/orders"
	"idemshop/internal/payclient"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/pgtx"
	"idemshop/internal/platform/retry"
)

// ReconcileConfig shapes the reconciler. Durations are wall-clock.
type ReconcileConfig struct {
	// Grace is how long an order or a pay record is left to its callbacks and the sweeper before the
	// reconciler looks at it (RECONCILE_GRACE).
	Grace time.Duration
	// Recheck is how long the reconciler waits before it asks again about an order it already
	// compared (RECONCILE_RECHECK).
	Recheck time.Duration
	// Lookback bounds the orders it looks at by age (RECONCILE_LOOKBACK): a PAID order can still be
	// refunded, so paid orders are compared again, every Recheck, until they are this old.
	Lookback time.Duration
	// Batch bounds the orders and the records of one run (RECONCILE_BATCH).
	Batch int
	// RefundDriftAfter is how long the platform must have left a payment alone before a difference
	// between its refunded total and the order's is an alert (RECONCILE_REFUND_DRIFT_AFTER): until
	// then a refund's callback may still be on its way, or in the platform's retries.
	RefundDriftAfter time.Duration
	// PointsAfter is how long after its publish an order.paid or order.refunded event may go without
	// its points ledger row before that is an alert (RECONCILE_POINTS_AFTER): until then
	// points-consumer may be behind, or restarting.
	PointsAfter time.Duration
}

// Reconciler results, the label values of idemshop_reconcile_orders_total and
// idemshop_reconcile_records_total.
const (
	ReconcileChanged     = "changed"     // the order (or record) was behind the platform and was moved
	ReconcileUnchanged   = "unchanged"   // it already agreed with the platform
	ReconcileNoPayment   = "no_payment"  // the platform has no payment for it, and none is held here (FAILED, REFUNDED)
	ReconcileUnreachable = "unreachable" // the platform did not answer; the next run asks again
	ReconcileMismatch    = "mismatch"    // amount, currency or payment differ: an operator alert, nothing applied
	// ReconcileRefundDrift: the order agrees with the platform's status, but its refunded total does
	// not, and the platform has not touched the payment for RefundDriftAfter: an operator alert,
	// nothing applied (orders only).
	ReconcileRefundDrift = "refund_drift"
	// ReconcilePaymentMissing: the order is PAID, REFUND_REQUIRED or PAYING here (it has a payment),
	// and the platform has no payment for it (a platform that lost its records, or an order paid by
	// other means): an operator alert, nothing applied (orders only). Not no_payment: that one is an
	// order that holds no money.
	ReconcilePaymentMissing = "payment_missing"
	// ReconcilePaymentNotTaken: the order is PAID or REFUND_REQUIRED here, and the platform says its
	// payment FAILED or is still PENDING (only a SUCCESS it never sent can have paid the order): an
	// operator alert, nothing applied (orders only).
	ReconcilePaymentNotTaken = "payment_not_taken"
	// ReconcileFailed: bringing the order or record to the platform's answer failed here (the
	// database; logged; a record's takeover may fail before the platform is asked): it is left for
	// the next run, and the run goes on to the next one.
	ReconcileFailed = "failed"
	// ReconcilePointsMissing: an event the relay published has no points ledger row PointsAfter later
	// (idemshop_reconcile_points_missing_total): an operator alert, nothing applied. The repair is a republish
	// of its outbox row, which the ledger's unique biz_id makes harmless if the row arrives meanwhile
	// (docs/points.md).
	ReconcilePointsMissing = "missing"
)

// Reconciler compares orders and unfinished pay records with the platform's query API and drives
// them to the platform's state. It runs every RECONCILE_INTERVAL in orders, and once with
// `orders reconcile --once`.
type Reconciler struct {
	sweeper *Sweeper
	svc     *callback.Service
	repo    *orders.Repository
	cfg     ReconcileConfig
	logger  *slog.Logger
	orders  *prometheus.CounterVec
	records *prometheus.CounterVec
	points  prometheus.Counter
	full    prometheus.Counter // runs whose order batch was full
	// turns is where the service's runs take their turn (Run): one replica's reconciler at a time.
	turns *lock.Locker
	// pointsChecked is when the points check last ran: it runs at most every Recheck in the service
	// (an alert a run, every RECONCILE_INTERVAL, would repeat itself), and on every RunOnce of a
	// one-shot command (0: never).
	pointsChecked atomic.Int64 // unix ns
}

// NewReconciler returns the reconciler. It reuses the sweeper's fenced repair for pay records, applies
// the platform's state through svc (the callback guard's steps), finds its orders in repo, and takes
// the service's turns (Run) with turns.
func NewReconciler(sweeper *Sweeper, svc *callback.Service, repo *orders.Repository, turns *lock.Locker, cfg ReconcileConfig, logger *slog.Logger, reg prometheus.Registerer) (*Reconciler, error) {
	if sweeper == nil || svc == nil || repo == nil || turns == nil || logger == nil || reg == nil {
		return nil, errors.New("sweeper: NewReconciler needs a sweeper, a callback service, an orders repository, a locker, a logger and a registry")
	}
	if cfg.Grace < 0 || cfg.Recheck <= 0 || cfg.Lookback <= 0 || cfg.Batch <= 0 || cfg.RefundDriftAfter < 0 ||
		cfg.PointsAfter <= 0 {
		return nil, fmt.Errorf("sweeper: bad reconcile config %+v", cfg)
	}
	r := &Reconciler{sweeper: sweeper, svc: svc, repo: repo, turns: turns, cfg: cfg, logger: logger.With("component", "reconciler"),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_reconcile_orders_total",
			Help: "Orders compared with the payment platform's query API by the reconciler, by result.",
		}, []string{"result"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_reconcile_records_total",
			Help: "Unfinished pay records (PROCESSING past their lease, FAILED_RETRYABLE) resolved by the reconciler, by result.",
		}, []string{"result"}),
		points: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_reconcile_points_missing_total",
			Help: "Published order.paid and order.refunded events found without their points ledger row RECONCILE_POINTS_AFTER later (each an alert, counted at every check that finds it).",
		}),
		full: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_reconcile_full_batches_total",
			Help: "Reconciler runs that found RECONCILE_BATCH orders due or more: rising at every run, more orders are due than the runs compare, and each is compared less often than RECONCILE_RECHECK says.",
		}),
	}
	for _, res := range []string{ReconcileChanged, ReconcileUnchanged, ReconcileNoPayment, ReconcileUnreachable, ReconcileMismatch,
		ReconcileRefundDrift, ReconcilePaymentMissing, ReconcilePaymentNotTaken, ReconcileFailed} {
		r.orders.WithLabelValues(res) // every series exists from the start, at 0
	}
	for _, res := range []string{ReconcileChanged, ReconcileUnchanged, ReconcileNoPayment, ReconcileUnreachable, ReconcileFailed} {
		r.records.WithLabelValues(res)
	}
	for _, c := range []prometheus.Collector{r.points, r.orders, r.records, r.full} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("sweeper: register reconcile metrics: %w", err)
		}
	}
	return r, nil
}

// Report is what one reconciler run did: per result, how many orders, pay records and published
// events without their points (ReconcilePointsMissing).
type Report struct {
	Orders  map[string]int `json:"orders"`
	Records map[string]int `json:"records"`
	Points  map[string]int `json:"points"`
}

// RunOnce makes one pass: first the unfinished pay records (their orders follow), then the orders.
// It stops early, without error, when the platform stops answering, and with ctx's error, quietly,
// when ctx ends (the process stopping).
func (r *Reconciler) RunOnce(ctx context.Context) (Report, error) {
	return r.runOnce(ctx, false)
}

// runOnce is RunOnce; shared: the points check keeps the replicas' shared clock (the service's runs).
func (r *Reconciler) runOnce(ctx context.Context, shared bool) (Report, error) {
	rep := Report{Orders: map[string]int{}, Records: map[string]int{}, Points: map[string]int{}}
	// First, as it does not ask the platform: a run the platform does not answer stops early. A check
	// that fails is counted and logged; the passes that move orders go on.
	r.checkPoints(ctx, &rep, shared)
	recs, err := r.sweeper.store.Unfinished(ctx, idempotency.KindPay, r.cfg.Grace, r.cfg.Batch)
	if err != nil {
		return rep, err
	}
	for _, rec := range recs {
		res, err := r.sweeper.repair(ctx, rec, false, r.cfg.Recheck)
		if err != nil && ctx.Err() != nil {
			return rep, ctx.Err() // the process is stopping: not a failure, and the next run goes on
		}
		if err != nil {
			r.logger.Error("reconcile: repair of pay record failed", "record_id", rec.ID, "err", err)
			rep.Records[ReconcileFailed]++ // counted, so that `reconcile --once` does not exit 0 over it
			r.records.WithLabelValues(ReconcileFailed).Inc()
			continue
		}
		if res == "" {
			continue // a live retry holds it
		}
		res = recordResult(res)
		rep.Records[res]++
		r.records.WithLabelValues(res).Inc()
		if res == ReconcileUnreachable {
			return rep, nil
		}
	}

	list, err := r.candidates(ctx)
	if err != nil {
		return rep, err
	}
	// A run compares at most a batch, so the recheck holds only while the orders due in a recheck fit in
	// the runs of a recheck: RECONCILE_BATCH × RECONCILE_RECHECK / RECONCILE_INTERVAL. Past that each
	// order waits longer (a leak hunter saw 146 s at a 30 s recheck with 2,942 orders in the lookback),
	// and nothing showed it; a full batch at every run does.
	if len(list) >= r.cfg.Batch {
		r.full.Inc()
	}
	for _, o := range list {
		res := r.reconcileOrder(ctx, o)
		if res == "" {
			return rep, ctx.Err()
		}
		rep.Orders[res]++
		r.orders.WithLabelValues(res).Inc()
		if res == ReconcileUnreachable {
			return rep, nil
		}
	}
	return rep, nil
}

// checkPoints raises an alert for each event the relay published more than PointsAfter ago whose points
// ledger row is missing (orders.Repository.UncreditedEvents). It applies nothing: points-consumer
// writes the ledger, and a republish of the outbox row, which an operator decides on, hands it the
// event again. In the service it runs at most every Recheck; one that failed (ReconcileFailed, logged)
// runs again at the next run.
//
// shared (the service's runs): the replicas share the clock. Each kept its own, so each raised every
// alert once a recheck (a helper's finding, 2026-12-06); now the first check of each Recheck leaves the
// lease PointsCheckLease in Redis for that long, unreleased, and the other replicas skip theirs until
// it runs out. A check that fails releases it, so that the next run of any replica tries again. With
// Redis down each replica keeps its own clock, as before.
func (r *Reconciler) checkPoints(ctx context.Context, rep *Report, shared bool) {
	if last := r.pointsChecked.Load(); last != 0 && time.Since(time.Unix(0, last)) < r.cfg.Recheck {
		return
	}
	var mark *lock.Lease
	if shared {
		var err error
		mark, err = r.turns.Acquire(ctx, PointsCheckLease, r.cfg.Recheck)
		switch {
		case errors.Is(err, lock.ErrNotAcquired):
			r.logger.Debug("reconcile: another replica checked the points within RECONCILE_RECHECK; skipping")
			return
		case err != nil && ctx.Err() == nil:
			r.logger.Warn("reconcile: the points check's shared clock is unavailable; keeping this replica's", "err", err)
		}
	}
	missing, err := r.repo.UncreditedEvents(ctx, time.Now(), r.cfg.PointsAfter, r.cfg.Lookback, r.cfg.Batch)
	if err != nil {
		if mark != nil {
			_ = r.turns.Release(context.WithoutCancel(ctx), mark) // an error leaves it to run out
		}
		if ctx.Err() == nil {
			r.logger.Error("reconcile: points check failed", "err", err)
			rep.Points[ReconcileFailed]++
		}
		return
	}
	r.pointsChecked.Store(time.Now().UnixNano())
	for _, ev := range missing {
		r.logger.Error("ALERT: a published event has no points ledger row; republish its outbox row (docs/points.md)",
			"alert", "points_missing", "order_id", ev.OrderID, "event_id", ev.EventID, "routing_key", ev.RoutingKey,
			"published_at", ev.PublishedAt)
		rep.Points[ReconcilePointsMissing]++
		r.points.Inc()
	}
}

// recordResult maps the sweeper's repair results onto the reconciler's.
func recordResult(repair string) string {
	switch repair {
	case RepairCompleted:
		return ReconcileChanged
	case RepairRetryable:
		return ReconcileNoPayment
	case RepairUnreachable:
		return ReconcileUnreachable
	}
	return ReconcileUnchanged // fenced: someone newer finished it
}

// candidates are the orders that may still differ from the platform (orders.Repository.ReconcileCandidates):
// untouched for Grace, younger than Lookback, not compared in the last Recheck.
func (r *Reconciler) candidates(ctx context.Context) ([]orders.Order, error) {
	list, err := r.repo.ReconcileCandidates(ctx, orders.ReconcileWindow{Grace: r.cfg.Grace,
		Lookback: r.cfg.Lookback, Recheck: r.cfg.Recheck, Limit: r.cfg.Batch, Now: time.Now()})
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return list, nil
}

// reconcileOrder asks the platform about o's payment and applies the answer, and returns its result:
// "" when ctx ended while it applied it (the process is stopping; nothing to count).
func (r *Reconciler) reconcileOrder(ctx context.Context, o orders.Order) string {
	lg := r.logger.With("order_id", o.ID, "status", o.Status)
	payment, found, err := r.sweeper.platform.FindByMerchantOrderNo(ctx, strconv.FormatInt(o.ID, 10))
	if err != nil {
		lg.Warn("reconcile: payment platform unreachable; next run asks again", "err", err)
		return ReconcileUnreachable
	}
	result := ReconcileNoPayment
	if !found && (o.Status == orders.StatusPaid || o.Status == orders.StatusRefundRequired ||
		o.Status == orders.StatusPaying) {
		// The shop holds money the platform says it never took (PAID, REFUND_REQUIRED), or waits on a
		// payment the platform answered pay with and no longer has (PAYING: no callback will come for
		// it, and pay refuses an order that is not PENDING, so the order would wait for good, unsaid).
		// Nothing here can tell which side is right.
		var paymentID string // the order's, as recorded (PAYING and paid orders have one)
		if o.PaymentID != nil {
			paymentID = *o.PaymentID
		}
		lg.Error("ALERT: the order has a payment here and the platform has none for it; nothing applied",
			"alert", "reconcile_payment_missing", "payment_id", paymentID, "amount_cents", o.AmountCents,
			"refunded_cents", o.RefundedCents)
		result = ReconcilePaymentMissing
	}
	if found {
		outcome, reason, err := r.svc.Reconcile(logging.With(ctx, lg), o, payment) // its alerts name the order
		switch {
		case errors.Is(err, callback.ErrAmountMismatch), errors.Is(err, orders.ErrOtherPayment):
			// Another amount, or another payment than the one the order recorded (a SUCCESS the platform
			// never sent, applied first): no run will change that, so it is said, not retried as if
			// the database had failed.
			lg.Error("ALERT: the platform's payment does not match the order; nothing applied",
				"alert", "reconcile_mismatch", "payment_id", payment.ID, "err", err)
			result = ReconcileMismatch
		case err != nil && ctx.Err() != nil:
			return "" // the process is stopping: nothing failed, and the order is compared next run
		case errors.Is(err, pgtx.ErrCommitUnknown):
			// The COMMIT went out and its answer never came: applied or not, only the rows can say, and
			// the next run compares the order again. Said as what it is, not as a failure to apply (a
			// helper's finding, 2026-12-07: 182 such ERROR lines for changes that had committed).
			lg.Warn("reconcile: the COMMIT applying the platform's state went unanswered (applied or not); the next run compares again", "err", err)
			return ReconcileFailed
		case err != nil:
			// Not unreachable: that ends the run, and this order, never stamped, comes first again in
			// the next one, so one order the database refuses would keep every other from being compared.
			// status (on lg) is the shop's as read; payment_status is the state that was being applied.
			lg.Error("reconcile: applying the platform's state failed; the next run tries again",
				"payment_status", payment.Status, "err", err)
			return ReconcileFailed
		case outcome == callback.OutcomeApplied:
			lg.Info("reconcile: order moved to the platform's state", "payment_status", payment.Status, "reason", reason)
			result = ReconcileChanged
		default:
			result = ReconcileUnchanged
		}
	}
	// An order that holds money here (PAID, REFUND_REQUIRED) whose payment the platform has not taken
	// (FAILED, or still PENDING past the grace): only a SUCCESS the platform never sent can have paid
	// it. The run changes nothing (a FAILED after PAID is stale, and PENDING changes nothing), so it is
	// said, like a payment the platform does not have, once the order is read again unmoved.
	if result == ReconcileUnchanged && (payment.Status == callback.StatusFailed || payment.Status == payclient.StatusPending) &&
		(o.Status == orders.StatusPaid || o.Status == orders.StatusRefundRequired) && !r.movedSince(ctx, lg, o) {
		lg.Error("ALERT: the order is paid here and the platform has not taken its payment; nothing applied",
			"alert", "reconcile_payment_not_taken", "payment_id", payment.ID, "payment_status", payment.Status,
			"amount_cents", o.AmountCents)
		result = ReconcilePaymentNotTaken
	}
	// A partial refund is never copied from the platform (its events would count it again when they
	// come), so one whose event was lost, or refused as event_id_reused, would stay missing unsaid.
	// It is said once the platform has left the payment alone long enough for its callbacks to be done.
	// So is a REFUNDED order whose payment the platform has not refunded in full (a forged REFUNDED that
	// reached the amount: stock back and points reversed while the platform holds the money; unsaid
	// until 2026-12-07, when REFUNDED orders were left out of the comparison, a helper's finding). The
	// state machine applies nothing to a REFUNDED order: it is final.
	if result == ReconcileUnchanged && payment.RefundedCents != o.RefundedCents &&
		time.Since(payment.UpdatedAt) >= r.cfg.RefundDriftAfter && !r.movedSince(ctx, lg, o) {
		lg.Error("ALERT: the platform's refunded total of this payment differs from the order's; nothing applied",
			"alert", "refund_drift", "payment_id", payment.ID, "platform_refunded_cents", payment.RefundedCents,
			"order_refunded_cents", o.RefundedCents, "payment_updated_at", payment.UpdatedAt)
		result = ReconcileRefundDrift
	}
	if err := r.repo.MarkReconciled(ctx, o.ID); err != nil {
		lg.Warn("reconcile: could not stamp reconciled_at; the order is compared again next run", "err", err)
	}
	return result
}

// movedSince reports whether order o is no longer as this run read it. The run read it before asking
// the platform, and another reconciler (one runs in every replica, and `reconcile --once` beside them)
// or a late callback may have moved it since: then the difference is with a copy, not with the order,
// and the next run compares the order as it is. A failed read counts as moved: no alert from a copy.
func (r *Reconciler) movedSince(ctx context.Context, lg *slog.Logger, o orders.Order) bool {
	now, err := r.repo.Reread(ctx, o.ID)
	if err != nil {
		lg.Warn("reconcile: could not read the order again; the next run compares it", "err", err)
		return true
	}
	if now.Status != o.Status || now.RefundedCents != o.RefundedCents {
		lg.Info("reconcile: the order moved while the platform was asked; the next run compares it again",
			"now_status", now.Status, "now_refunded_cents", now.RefundedCents)
		return true
	}
	return false
}

// TurnLease is the name of the lease a service's run holds (lock.Locker.LockKey gives its Redis key).
const TurnLease = "reconcile:turn"

// PointsCheckLease is the name of the lease a service's points check leaves for RECONCILE_RECHECK: the
// replicas' shared clock (checkPoints).
const PointsCheckLease = "reconcile:points-checked"

// Run calls RunOnce every interval until ctx is done, taking turns with the other replicas' reconcilers.
//
// A reconciler runs in every replica, and their tickers run close together. Two runs at once read the
// same orders before either stamps them, so each asked the platform about each order and raised each
// alert once per replica. A run therefore holds the lease TurnLease for at most interval, and a
// replica that finds it held skips its turn; a run that starts after another has finished finds that
// run's orders stamped. The lease spares work and noise, not correctness: the state machine makes two
// runs harmless. So a Redis that fails lets the run go ahead, as a lone replica's would, and a run
// that outlasts its lease may meet another.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	retry.Every(ctx, interval, func() {
		turn, err := r.turns.Acquire(ctx, TurnLease, interval)
		if errors.Is(err, lock.ErrNotAcquired) {
			r.logger.Debug("reconcile: another replica's run holds the turn; skipping this one")
			return
		}
		if err != nil && ctx.Err() == nil {
			r.logger.Warn("reconcile: the turn lease is unavailable; running without it", "err", err)
		}
		rep, err := r.runOnce(ctx, true)
		if err != nil && ctx.Err() == nil {
			r.logger.Error("reconcile run failed", "err", err)
		} else if rep.Orders[ReconcileChanged]+rep.Records[ReconcileChanged] > 0 {
			r.logger.Info("reconciler moved orders to the platform's state", "orders", rep.Orders, "records", rep.Records)
		}
		if turn != nil {
			// Released at once, so the next turn need not wait out the lease; an error leaves the lease
			// to expire.
			switch err := r.turns.Release(context.WithoutCancel(ctx), turn); {
			case errors.Is(err, lock.ErrLost):
				r.logger.Warn("reconcile: the run took longer than RECONCILE_INTERVAL, and its turn ran out: another replica may have run beside it",
					"interval", interval)
			case err != nil:
				r.logger.Warn("reconcile: releasing the turn failed; it expires by itself", "err", err)
			}
		}
	})
}
