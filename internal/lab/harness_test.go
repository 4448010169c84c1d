package lab_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
	"idemshop/internal/lab/labtest"
	"idemshop/internal/platform/config"
)

func newLabEnv(t *testing.T, mutate func(*config.Orders)) *lab.Env {
	t.Helper()
	return labtest.NewEnv(t, mutate)
}

// runScenario runs one scenario and requires that the unsafe side reproduced the failure and the
// guarded side held.
func runScenario(t *testing.T, env *lab.Env, id string) lab.Result {
	t.Helper()
	sc, err := lab.Select([]string{id})
	require.NoError(t, err)
	r := lab.Run(context.Background(), env, sc, nil)[0]
	t.Logf("%s: unsafe %+v; guarded %+v; err %q", r.ID, r.Unsafe, r.Guarded, r.Error)
	require.Empty(t, r.Error)
	require.True(t, r.Unsafe.Reproduced, "unsafe side did not show the failure: %s", r.Unsafe.Detail)
	require.True(t, r.Guarded.OK, "guarded side broke an invariant: %s", r.Guarded.Detail)
	return r
}

func TestS1(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	r := runScenario(t, env, "S1")
	require.EqualValues(t, -6, r.Unsafe.Measured["stock_delta"])
	require.EqualValues(t, -2, r.Guarded.Measured["stock_delta"])
	require.EqualValues(t, 3, r.Guarded.Measured["received"])
	require.EqualValues(t, 1, r.Guarded.Measured["applied"])
}

func TestIncidentGuardedHoldsAndUnsafeShowsDamage(t *testing.T) {
	t.Parallel()
	env := newLabEnv(t, nil)
	ctx := context.Background()

	rep, err := lab.Incident(ctx, env, 10, false, nil)
	require.NoError(t, err)
	t.Logf("guarded: %+v", rep)
	require.Empty(t, rep.Violations)
	require.EqualValues(t, 30, rep.Callbacks.Received, "3 copies of each callback arrived")
	require.EqualValues(t, 10, rep.Callbacks.Applied)
	require.Equal(t, rep.WantStock, rep.StockDelta)
	require.EqualValues(t, -19, rep.StockDelta) // quantities 1,2,3,1,2,3,1,2,3,1
	require.Equal(t, rep.WantPoints, rep.PointsDelta)

	bad, err := lab.Incident(ctx, env, 10, true, nil)
	require.NoError(t, err)
	t.Logf("unsafe: %+v", bad)
	require.NotEmpty(t, bad.Violations)
	require.EqualValues(t, -57, bad.StockDelta, "every copy deducted")
	require.Equal(t, 3*bad.WantPoints, bad.PointsDelta, "every copy credited")
	require.EqualValues(t, 30, bad.Callbacks.Applied)
}
