package callback

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the callback route's Prometheus metrics.
type Metrics struct {
	callbacks *prometheus.CounterVec
	rejected  *prometheus.CounterVec
}

// Rejection says why a callback was rejected: the reason label of
// idemshop_payments_callbacks_rejected_total. The rejected outcome alone lumps a platform whose secret
// no longer matches (every callback lost, each a WARN) with a forger's probes and a lock timeout the
// platform's resend will get past; these tell them apart for an alert rule.
type Rejection string

// The reasons a callback is rejected, with the answer it gets.
const (
	RejectedSignature    Rejection = "signature_invalid" // 401: a forgery, or a platform whose secret is not PAYMENT_WEBHOOK_SECRET
	RejectedMalformed    Rejection = "malformed"         // 400 malformed_body or validation_failed: signed, but not a callback the shop can read
	RejectedUnknownOrder Rejection = "order_not_found"   // 404: no such order
	RejectedAmount       Rejection = "amount_mismatch"   // 400, and alert=amount_mismatch
	RejectedPayment      Rejection = "payment_mismatch"  // 400, and alert=payment_mismatch
	RejectedEventReused  Rejection = "event_id_reused"   // 422, and alert=event_id_reused
	RejectedNotApplied   Rejection = "not_applied"       // 503: the transaction failed (a lock timeout, the database); the platform resends
)

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemshop_payments_callbacks_total",
		Help: "Payment callbacks received, by outcome (applied, duplicate, stale, recorded, rejected).",
	}, []string{"outcome"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_payments_callbacks_rejected_total",
			Help: "Payment callbacks rejected, by reason (signature_invalid, malformed, order_not_found, amount_mismatch, payment_mismatch, event_id_reused, not_applied).",
		}, []string{"reason"})}
	// Pre-create every label so dashboards show zeros instead of gaps.
	for _, o := range []Outcome{OutcomeApplied, OutcomeDuplicate, OutcomeStale, OutcomeRecorded, OutcomeRejected} {
		m.callbacks.WithLabelValues(string(o))
	}
	for _, r := range []Rejection{RejectedSignature, RejectedMalformed, RejectedUnknownOrder, RejectedAmount,
		RejectedPayment, RejectedEventReused, RejectedNotApplied} {
		m.rejected.WithLabelValues(string(r))
	}
	reg.MustRegister(m.callbacks, m.rejected)
	return m
}

func (m *Metrics) count(o Outcome) { m.callbacks.WithLabelValues(string(o)).Inc() }

// reject counts a rejected callback under its outcome and its reason.
func (m *Metrics) reject(why Rejection) {
	m.count(OutcomeRejected)
	m.rejected.WithLabelValues(string(why)).Inc()
}
