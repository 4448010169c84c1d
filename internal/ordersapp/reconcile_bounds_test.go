package ordersapp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/config"
	"idemshop/internal/sweeper"
	"idemshop/internal/testenv"
)

// The reconciler's bounds: an order touched within RECONCILE_GRACE is left to its callbacks and the
// sweeper (the reconciler neither asks nor moves it), and an order compared within RECONCILE_RECHECK
// is not asked about again. Without them every tick would query the platform for every open order.
// Both orders' callbacks go nowhere, so only the reconciler can move them.
func TestReconcilerKeepsToGraceAndRecheck(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, nil)
	nowhere := "http://" + testenv.FreeAddr(t) + "/v1/payments/callback"
	inGrace := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) {
		payTo(mock, 5*time.Second)(c)
		c.CallbackURL = nowhere
		c.ReconcileGrace = time.Hour
		c.ReconcileRecheck = time.Hour
	}})
	id, _ := inGrace.newOrder(alice, 1, 1)
	pid := paymentID(t, inGrace.pay(alice, id, "pay-in-grace"))
	_, err := mock.client.Approve(context.Background(), pid)
	require.NoError(t, err)

	rep, err := inGrace.app.Reconciler.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Empty(t, rep.Orders, "an order inside its grace is not asked about")
	assert.Equal(t, "PAYING", statusOf(t, env.DB, id), "nor moved")

	// The same order through a reconciler without grace but with a long recheck: compared (and moved)
	// once, then left alone.
	noGrace := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) {
		payTo(mock, 5*time.Second)(c)
		c.CallbackURL = nowhere
		c.ReconcileGrace = 0
		c.ReconcileRecheck = time.Hour
	}})
	rep, err = noGrace.app.Reconciler.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]int{sweeper.ReconcileChanged: 1}, rep.Orders)
	assert.Equal(t, "PAID", statusOf(t, env.DB, id))

	rep, err = noGrace.app.Reconciler.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Empty(t, rep.Orders, "compared within RECONCILE_RECHECK: not asked again")
}

// A run that finds a full batch of orders due counts it: past RECONCILE_BATCH × RECONCILE_RECHECK /
// RECONCILE_INTERVAL orders in the lookback, each is compared less often than the recheck says, and
// nothing showed it (a leak hunter's finding, 2026-12-07). Guards the reconcile-full-batch mutant.
func TestAFullReconcileBatchIsCounted(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, nil)
	rp := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) {
		payTo(mock, 5*time.Second)(c)
		c.CallbackURL = "http://" + testenv.FreeAddr(t) + "/v1/payments/callback"
		c.ReconcileGrace = 0
		c.ReconcileRecheck = time.Hour
		c.ReconcileBatch = 2
	}})
	for i := range 3 {
		id, _ := rp.newOrder(alice, 1, 1)
		paymentID(t, rp.pay(alice, id, fmt.Sprintf("pay-full-%d", i)))
	}
	for run, want := range []struct {
		compared int
		full     float64
	}{{2, 1}, {1, 1}, {0, 1}} {
		rep, err := rp.app.Reconciler.RunOnce(context.Background())
		require.NoError(t, err)
		assert.Equal(t, want.compared, rep.Orders[sweeper.ReconcileUnchanged], "run %d", run)
		assert.Equal(t, want.full, metricValue(t, rp.reg, "idemshop_reconcile_full_batches_total", nil), "run %d", run)
	}
}
