package lab

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// s9Failed is a run whose lab replica (Redis down) held and whose orders under test did not: the
// figures a helper's shop showed (2026-12-07).
func s9Failed() map[string]int64 {
	m := map[string]int64{}
	for _, p := range []string{s9Down, s9Up} {
		for k, v := range map[string]int64{"orders": 20, "copies": 3, "paid": 20, "applied": 20, "stock_delta": -20,
			"outbox_rows": 20, "p50_us": 1500, "p99_us": 9000} {
			m[p+k] = v
		}
	}
	m[s9Up+"applied"], m[s9Up+"stock_delta"], m[s9Up+"violations"], m[s9Up+"outbox_rows"] = 48, -48, 33, 48
	return m
}

// A failing S9 names the storm that failed, with its own figures, not the other storm's good ones.
func TestS9NamesTheStormThatFailed(t *testing.T) {
	m := s9Failed()
	assert.Empty(t, s9Broken(m, s9Down))
	d := s9Detail(m)
	assert.Contains(t, d, "Redis up (the orders under test): 48 callbacks applied for 20 orders, stock -48 (want -20), "+
		"48 order.paid events (want 20), 33 invariant violations")
	assert.NotContains(t, d, "Redis down (the lab's orders):", "the replica that held is not blamed")
	assert.NotContains(t, d, "20 paid once")

	s := Summarize(Result{ID: "S9", Unsafe: Unsafe{NoTwin: true}, Guarded: Guarded{Side: Side{Measured: m, Detail: d}}})
	assert.Equal(t, VerdictFail, s.Verdict)
	assert.Equal(t, "Redis up: 48 applied, stock -48", s.Guarded)

	m[s9Down+"status_5xx"], m[s9Down+"non_200"], m[s9Down+"paid"] = 4, 4, 18
	s = Summarize(Result{ID: "S9", Unsafe: Unsafe{NoTwin: true}, Guarded: Guarded{Side: Side{Measured: m}}})
	assert.Equal(t, "Redis down: 4 5xx, 18 of 20 paid", s.Guarded, "the first storm that broke")
	assert.Contains(t, s9Detail(m), "Redis down (the lab's orders): 18 of 20 paid, 4 5xx; Redis up (the orders under test): 48")

	delete(m, s9Up+"violations")
	for _, p := range []string{s9Down, s9Up} {
		m[p+"status_5xx"], m[p+"non_200"], m[p+"paid"], m[p+"applied"], m[p+"stock_delta"], m[p+"outbox_rows"] = 0, 0, 20, 20, -20, 20
	}
	assert.Equal(t, "20 orders x 3 callbacks; Redis down: 20 paid once, 0 5xx; Redis up: 20 paid once, 0 5xx "+
		"(Redis down: p50 1.5 ms, p99 9.0 ms; Redis up: p50 1.5 ms, p99 9.0 ms)", s9Detail(m))
}
