package lab_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/platform/config"
)

func TestS5(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil) // LAB_STOCK_LOCK_TTL at its default
	r := runScenario(t, env, "S5")
	u, g := r.Unsafe.Measured, r.Guarded.Measured
	assert.Less(t, u["stock_final"], int64(0), "oversold")
	assert.Greater(t, u["paid"], int64(10), "more orders PAID than units")
	assert.EqualValues(t, 0, u["non_200"])
	assert.EqualValues(t, 0, g["stock_final"])
	assert.EqualValues(t, 10, g["paid"])
	assert.EqualValues(t, 20, g["refund_required"])
	assert.EqualValues(t, 20, g["refund_requests"])
	assert.EqualValues(t, 10, g["outbox_rows"])
	assert.EqualValues(t, 30, g["callbacks_applied"])
	assert.EqualValues(t, 0, g["non_200"])
}

func TestS7(t *testing.T) {
	t.Parallel()
	// The platform holds a create_timeout answer for 2 s (newLabEnv); orders gives up after 300 ms, as
	// with the defaults (3 s against 10 s). A short lease lets the sweeper (every 200 ms) settle it soon.
	env := newLabEnv(t, func(c *config.Orders) {
		c.PaymentsTimeout = 300 * time.Millisecond
		c.PayLease = time.Second
	})
	r := runScenario(t, env, "S7")
	u, g := r.Unsafe.Measured, r.Guarded.Measured
	assert.EqualValues(t, http.StatusServiceUnavailable, u["first_status"])
	assert.EqualValues(t, http.StatusCreated, u["retry_status"])
	assert.EqualValues(t, 2, u["payments"], "two charges at the platform")
	assert.EqualValues(t, 2*2500, u["charged_cents"])
	assert.EqualValues(t, http.StatusServiceUnavailable, g["first_status"])
	assert.EqualValues(t, 1, g["first_outcome_unknown"])
	assert.EqualValues(t, http.StatusConflict, g["retry_status"], "PROCESSING under its lease")
	assert.EqualValues(t, 1, g["record_completed"])
	assert.GreaterOrEqual(t, g["record_takeovers"], int64(1), "the sweeper took the record over")
	assert.EqualValues(t, http.StatusCreated, g["final_status"])
	assert.EqualValues(t, 1, g["final_replayed"])
	assert.EqualValues(t, 1, g["payments"])
	assert.EqualValues(t, 2500, g["charged_cents"])
	assert.EqualValues(t, 1, g["replay_is_the_payment"])
}

func TestS8(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S8")
	u, g := r.Unsafe.Measured, r.Guarded.Measured
	assert.Greater(t, u["fence_b"], u["fence_a"])
	assert.EqualValues(t, 1, u["stored_is_a"], "the stale write overwrote B's result")
	assert.EqualValues(t, 0, u["stored_is_b"])
	assert.Greater(t, g["fence_b"], g["fence_a"])
	assert.EqualValues(t, 1, g["late_write_rejected"])
	assert.EqualValues(t, 1, g["stored_is_b"])
	assert.EqualValues(t, g["fence_b"], g["stored_fence"])
}

func TestS9(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S9")
	assert.Equal(t, "n/a", r.Unsafe.Detail)
	g := r.Guarded.Measured
	for _, side := range []string{"degraded_", "normal_"} {
		assert.EqualValues(t, 20, g[side+"paid"], side)
		assert.EqualValues(t, 20, g[side+"applied"], side)
		assert.EqualValues(t, 60, g[side+"received"], side)
		assert.EqualValues(t, 20, g[side+"outbox_rows"], side)
		assert.EqualValues(t, -20, g[side+"stock_delta"], side)
		assert.EqualValues(t, 0, g[side+"status_5xx"], side)
		assert.EqualValues(t, 0, g[side+"violations"], side)
		assert.Positive(t, g[side+"p50_us"], side)
		assert.GreaterOrEqual(t, g[side+"p99_us"], g[side+"p50_us"], side)
	}
}
