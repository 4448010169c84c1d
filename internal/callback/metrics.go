package callback

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the callback route's Prometheus metrics.
type Metrics struct {
	callbacks *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemshop_payments_callbacks_total",
		Help: "Payment callbacks received, by outcome (applied, duplicate, stale, recorded, rejected).",
	}, []string{"outcome"})}
	// Pre-create every label so dashboards show zeros instead of gaps.
	for _, o := range []Outcome{OutcomeApplied, OutcomeDuplicate, OutcomeStale, OutcomeRecorded, OutcomeRejected} {
		m.callbacks.WithLabelValues(string(o))
	}
	reg.MustRegister(m.callbacks)
	return m
}

func (m *Metrics) count(o Outcome) { m.callbacks.WithLabelValues(string(o)).Inc() }
