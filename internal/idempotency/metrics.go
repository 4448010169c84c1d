package idempotency

import (
	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/decisions"
)

// Outcomes counted by idemshop_idempotency_requests_total.
const (
	OutcomeExecuted = "executed" // the work ran and its response was stored
	OutcomeReplayed = "replayed" // a stored response was replayed
	OutcomeInFlight = "in_flight"
	OutcomeMismatch = "mismatch" // same key, different fingerprint: 422
	OutcomeInvalid  = "invalid"  // header missing or malformed
)

// Metrics are the idempotency layer's Prometheus metrics, and the point where its outcomes are reported
// to a decisions.Sink (the lab's live view): every outcome is counted here, so it is reported here too.
type Metrics struct {
	requests        *prometheus.CounterVec
	reaped          prometheus.Counter
	fenceRejections reportingCounter
	sink            decisions.Sink // nil: nobody watches (production)
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics { return NewMetricsWithSink(reg, nil) }

// NewMetricsWithSink is NewMetrics that also reports every outcome, pay record transition and fenced
// write to sink (nil: none).
func NewMetricsWithSink(reg prometheus.Registerer, sink decisions.Sink) *Metrics {
	m := &Metrics{
		sink: sink,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemshop_idempotency_requests_total",
			Help: "Requests on Idempotency-Key routes by route pattern and outcome (executed, replayed, in_flight, mismatch, invalid).",
		}, []string{"route", "outcome"}),
		reaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_idempotency_keys_reaped_total",
			Help: "Idempotency records deleted by the reaper after IDEMPOTENCY_RETENTION.",
		}),
		fenceRejections: reportingCounter{Counter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemshop_idempotency_fence_rejections_total",
			Help: "Writes of an idempotency record refused: a holder with a newer fencing token took it over, or the record was already final.",
		}), report: func() {
			decisions.Emit(sink, decisions.Decision{Type: decisions.TypeFence, Outcome: "refused",
				Detail: "a newer fencing token owns the record: the late write changed nothing"})
		}},
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
	decisions.Emit(m.sink, decisions.Decision{Type: decisions.TypeIdempotency, Outcome: outcome, Route: route, Detail: answers[outcome]})
}

// answers names the HTTP answer of each outcome, for the live view.
var answers = map[string]string{OutcomeExecuted: "ran the work", OutcomeReplayed: "stored answer replayed",
	OutcomeInFlight: "409 idempotency_key_in_use", OutcomeMismatch: "422 idempotency_key_reused", OutcomeInvalid: "400"}

// PayRecord reports that the pay record of orderID, held with fence, is now in state (PROCESSING when
// claimed, or left so when the outcome is unknown). It counts nothing: it is for the live view only.
func (m *Metrics) PayRecord(orderID, fence int64, state State) {
	decisions.Emit(m.sink, decisions.Decision{Type: decisions.TypePayRecord, Outcome: string(state), OrderID: orderID, Fence: fence})
}

// reportingCounter is the fence rejection counter: Store.Finish counts a refused write with Inc, and
// the refusal is reported from there, where it is decided, without a second call in the store.
type reportingCounter struct {
	prometheus.Counter
	report func()
}

// Inc counts one and reports it.
func (c reportingCounter) Inc() {
	c.Counter.Inc()
	c.report()
}
