package lab_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// S6 and S11 run their consumers in process on broker objects of their own, next to the env's demo
// consumer; the numbers are read from the database by the scenario. 1250 cents x 2 = 25 points.

func TestS6(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S6")

	u := r.Unsafe.Measured
	assert.EqualValues(t, 25, u["points_per_order"])
	assert.EqualValues(t, 1, u["ledger_rows_after_crash"], "the crash came after the commit")
	assert.EqualValues(t, 25, u["balance_after_crash"])
	assert.EqualValues(t, 1, u["redelivery_applied"], "the restarted consumer had forgotten the message id")
	assert.EqualValues(t, 2, u["ledger_rows"])
	assert.EqualValues(t, 50, u["balance"], "points twice")

	g := r.Guarded.Measured
	assert.EqualValues(t, 1, g["ledger_rows_after_crash"], "the crash came after the commit")
	assert.EqualValues(t, 0, g["redelivery_applied"])
	assert.EqualValues(t, 1, g["redelivery_duplicate"], "the ledger answered the redelivery")
	assert.EqualValues(t, 0, g["redelivery_failed"], "waiting for the dead lease costs no delivery")
	assert.EqualValues(t, 1, g["ledger_rows"])
	assert.EqualValues(t, 25, g["balance"], "points once")
	assert.EqualValues(t, 0, g["queue_ready"])
}

func TestS11(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S11")

	u := r.Unsafe.Measured
	assert.EqualValues(t, 0, u["ledger_rows_after_crash"], "the crash came before the commit")
	assert.EqualValues(t, 1, u["marker_done_after_crash"], "but \"done\" was already written")
	assert.EqualValues(t, 1, u["redelivery_duplicate"], "the redelivery was acked and dropped")
	assert.EqualValues(t, 0, u["redelivery_applied"])
	assert.EqualValues(t, 0, u["queue_ready"])
	assert.EqualValues(t, 0, u["dlq_ready"])
	assert.EqualValues(t, 0, u["ledger_rows"])
	assert.EqualValues(t, 0, u["balance"], "points lost")

	g := r.Guarded.Measured
	assert.EqualValues(t, 0, g["ledger_rows_after_crash"], "the crash came before the commit")
	assert.EqualValues(t, 0, g["marker_done_after_crash"], "the dead claim is a lease, not \"done\"")
	assert.EqualValues(t, 1, g["redelivery_applied"])
	assert.EqualValues(t, 0, g["redelivery_failed"], "waiting for the dead lease costs no delivery")
	assert.GreaterOrEqual(t, g["redelivery_ms"], int64(500), "credited only once the dead lease ran out")
	assert.EqualValues(t, 1, g["ledger_rows"])
	assert.EqualValues(t, 25, g["balance"], "credited once")
	assert.EqualValues(t, 0, g["queue_ready"])
}
