package keycount_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lock"
	"idemshop/internal/pay"
	"idemshop/internal/testenv"
)

// The pay lock's fence counter is bounded: it outlives IDEMPOTENCY_RETENTION (the rows it fenced are
// reaped first), then expires. The counter stays after the release; its TTL is read at once, so a slow
// machine only makes it a little smaller, never below the bound.
func TestPayLockFenceCounterExpires(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	locker, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)

	lease, err := locker.Acquire(ctx, pay.LockName(42), time.Hour)
	require.NoError(t, err)
	require.NoError(t, locker.Release(ctx, lease))
	pttl, err := env.Redis.PTTL(ctx, locker.FenceKey(pay.LockName(42))).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 24*time.Hour, "the pay lock's fence counter outlives IDEMPOTENCY_RETENTION, then expires")
	assert.LessOrEqual(t, pttl, lock.DefaultFenceTTL)
}
