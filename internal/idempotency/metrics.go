package idempotency

import "github.com/prometheus/client_golang/prometheus"

// Outcomes counted by idemshop_idempotency_requests_total.
const (
	OutcomeExecuted = "executed" // the work ran and its response was stored
	OutcomeReplayed = "replayed" // a stored response was replayed
	OutcomeInFlight = "in_flight"
	OutcomeMismatch = "mismatch" // same key, different fingerprint: 422
	OutcomeInvalid  = "invalid"  // header missing or malformed
)

// Metrics are the idempotency layer's Prometheus metrics.
type Metrics struct {
	requests        *prometheus.CounterVec
	reaped          prometheus.Counter
	fenceRejections prometheus.Counter
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_idempotency_requests_total",
			Help: "Requests on Idempotency-Key routes by route pattern and outcome (executed, replayed, in_flight, mismatch, invalid).",
		}, []string{"route", "outcome"}),
		reaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_idempotency_keys_reaped_total",
			Help: "Idempotency records deleted by the reaper after IDEMPOTENCY_RETENTION.",
		}),
		fenceRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_idempotency_fence_rejections_total",
			Help: "Writes of an idempotency record refused because a holder with a newer fencing token took it over.",
		}),
	}
	reg.MustRegister(m.requests, m.reaped, m.fenceRejections)
	return m
}

// ExpectRoute creates route's series at 0 for every outcome, so that a dashboard shows zeros from the
// start instead of no series until the first request of each kind.
func (m *Metrics) ExpectRoute(route string) {
	for _, o := range []string{OutcomeExecuted, OutcomeReplayed, OutcomeInFlight, OutcomeMismatch, OutcomeInvalid} {
		m.requests.WithLabelValues(route, o)
	}
}

// Count adds one request with outcome on route (the route pattern, e.g. /v1/orders).
func (m *Metrics) Count(route, outcome string) {
	m.requests.WithLabelValues(route, outcome).Inc()
}
