package lab_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// S6 and S11 run their consumers in process on broker objects of their own, next to the env's demo
// consumer, and feed them one order.paid for an order of 2 units at 12.50 EUR (25 points); the order
// itself is never paid, so it stays PENDING. The test reads each side's ledger and balance itself.

func TestS6(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S6")

	u := sideRows(t, env, "S6-unsafe")
	o := u.orderID()
	assert.Equal(t, map[string]int64{"PENDING": 1}, u.orders())
	assert.EqualValues(t, 2, u.ledgerRows(), "the redelivery was credited again, under a key of its own")
	assert.Equal(t, map[string]int64{fmt.Sprintf("order-paid:%d:delivery-*", o): 50}, u.ledger())
	assert.EqualValues(t, 50, u.balance(), "points twice")
	assert.EqualValues(t, 1, r.Unsafe.Measured["ledger_rows_after_crash"], "the crash came after the commit")

	g := sideRows(t, env, "S6-guarded")
	o = g.orderID()
	assert.EqualValues(t, 1, g.ledgerRows())
	assert.Equal(t, map[string]int64{fmt.Sprintf("order-paid:%d", o): 25}, g.ledger(), "keyed on the order")
	assert.EqualValues(t, 25, g.balance(), "points once")
	gm := r.Guarded.Measured
	assert.EqualValues(t, 1, gm["ledger_rows_after_crash"], "the crash came after the commit")
	assert.EqualValues(t, 1, gm["redelivery_duplicate"], "the ledger answered the redelivery")
	assert.EqualValues(t, 0, gm["redelivery_failed"], "waiting for the dead lease costs no delivery")
	assert.EqualValues(t, 0, gm["queue_ready"], "the redelivery was acked")
}

func TestS11(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S11")

	u := sideRows(t, env, "S11-unsafe")
	assert.Equal(t, map[string]int64{"PENDING": 1}, u.orders())
	assert.EqualValues(t, 0, u.ledgerRows(), "the order was never credited")
	assert.EqualValues(t, 0, u.balance(), "points lost")
	um := r.Unsafe.Measured
	assert.EqualValues(t, 1, um["marker_done_after_crash"], "\"done\" was written before the commit")
	assert.EqualValues(t, 1, um["redelivery_duplicate"], "the redelivery was acked and dropped")
	assert.EqualValues(t, 0, um["queue_ready"]+um["dlq_ready"], "nothing left to retry")

	g := sideRows(t, env, "S11-guarded")
	o := g.orderID()
	assert.Equal(t, map[string]int64{fmt.Sprintf("order-paid:%d", o): 25}, g.ledger(), "credited once")
	assert.EqualValues(t, 25, g.balance())
	gm := r.Guarded.Measured
	assert.EqualValues(t, 0, gm["marker_done_after_crash"], "the dead claim is a lease, not \"done\"")
	assert.EqualValues(t, 1, gm["redelivery_applied"])
	assert.EqualValues(t, 0, gm["redelivery_failed"], "waiting for the dead lease costs no delivery")
}
