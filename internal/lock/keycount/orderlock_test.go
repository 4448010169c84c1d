package keycount_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/callback"
	"idemshop/internal/lock"
	"idemshop/internal/pay"
	"idemshop/internal/testenv"
)

// The callback lock is an efficiency lock: it draws no fencing token, so it leaves no fence counter,
// and its lock key expires and is deleted on unlock. The pay lock's counter has a TTL. Both locks are
// taken for an hour, so they are still held when the test gets to them, however slowly.
func TestCallbackLockCreatesNoFenceKey(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	locker, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)
	cb, err := callback.NewRedisOrderLock(locker, time.Hour, 100*time.Millisecond)
	require.NoError(t, err)

	unlock, err := cb.Lock(ctx, 42)
	require.NoError(t, err)
	pttl, err := env.Redis.PTTL(ctx, locker.LockKey("callback:order:42")).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, time.Duration(0), "the lock key expires")
	_, err = cb.Lock(ctx, 42)
	require.ErrorIs(t, err, lock.ErrNotAcquired, "still a lock: a second callback waits, then gives up")
	unlock()

	keys, err := scan(ctx, env.Redis, env.Prefix)
	require.NoError(t, err)
	assert.Empty(t, keys, "the callback lock left keys behind")

	lease, err := locker.Acquire(ctx, pay.LockName(42), time.Hour)
	require.NoError(t, err)
	require.NoError(t, locker.Release(ctx, lease))
	pttl, err = env.Redis.PTTL(ctx, locker.FenceKey(pay.LockName(42))).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 24*time.Hour, "the pay lock's fence counter outlives IDEMPOTENCY_RETENTION, then expires")
}
