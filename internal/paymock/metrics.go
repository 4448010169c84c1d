package paymock

import "github.com/prometheus/client_golang/prometheus"

// metrics are registered on the registry the binary passes in; nothing is global.
type metrics struct {
	sent       *prometheus.CounterVec // per attempt, by outcome
	deliveries *prometheus.CounterVec // per delivery, by how it ended
	latency    prometheus.Histogram   // per attempt that got an answer or an error
	creates    *prometheus.CounterVec // POST /v1/payments, by result
	inFlight   prometheus.Gauge       // deliveries started and not yet ended
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_paymock_callbacks_sent_total",
			Help: "Callback attempts by outcome: success, ack_lost, retry, rejected, error.",
		}, []string{"outcome"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_paymock_callback_deliveries_total",
			Help: "Callback deliveries (one copy of one event, with its retries) by result: delivered, rejected, exhausted, abandoned.",
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idemshop_paymock_callback_attempt_duration_seconds",
			Help:    "Duration of one callback POST, answered or not.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_paymock_payment_creates_total",
			Help: "POST /v1/payments by result: created, replayed, conflict, chaos_error, chaos_timeout, chaos_reset.",
		}, []string{"result"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemshop_paymock_callback_deliveries_in_flight",
			Help: "Deliveries started and not yet delivered, rejected, exhausted or abandoned.",
		}),
	}
	// Every series exists from the start, at 0 (the label values are the ones the Help texts list).
	for _, o := range []string{OutcomeSuccess, OutcomeAckLost, OutcomeRetry, OutcomeRejected, OutcomeError} {
		m.sent.WithLabelValues(o)
	}
	for _, r := range []string{"delivered", "rejected", "exhausted", "abandoned"} {
		m.deliveries.WithLabelValues(r)
	}
	for _, r := range []string{"created", "replayed", "conflict", "chaos_error", "chaos_timeout", "chaos_reset"} {
		m.creates.WithLabelValues(r)
	}
	reg.MustRegister(m.sent, m.deliveries, m.latency, m.creates, m.inFlight)
	return m
}
