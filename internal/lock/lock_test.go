package lock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"idemshop/internal/lock"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// held is a lease TTL far longer than any test: a lease the test means to hold stays held however
// slowly the machine runs it. A lease that must run out is run out by hand (a DEL of its key, the same
// state as a TTL that passed), never by waiting on the clock.
const held = time.Hour

func newLocker(t *testing.T) (*lock.Locker, *testenv.Env) {
	t.Helper()
	env := testenv.New(t)
	l, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)
	return l, env
}

// owner returns the value of name's lock key, or "" when there is none.
func owner(t *testing.T, env *testenv.Env, l *lock.Locker, name string) string {
	t.Helper()
	v, err := env.Redis.Get(context.Background(), l.LockKey(name)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

func TestAcquire_ExactlyOneOfManyConcurrentWins(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx := context.Background()
	const n = 50

	start := make(chan struct{})
	var wg sync.WaitGroup
	leases := make([]*lock.Lease, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			leases[i], errs[i] = l.Acquire(ctx, "order-7", 10*time.Second)
		})
	}
	close(start)
	wg.Wait()

	var winners []*lock.Lease
	for i := range n {
		if errs[i] == nil {
			winners = append(winners, leases[i])
			continue
		}
		assert.ErrorIs(t, errs[i], lock.ErrNotAcquired, "goroutine %d", i)
	}
	require.Len(t, winners, 1)
	assert.Equal(t, int64(1), winners[0].Fence)
	assert.Equal(t, winners[0].Owner, owner(t, env, l, "order-7"))
	// The 49 losers must not have drawn tokens: the counter moves only when SET NX succeeded.
	fence, err := env.Redis.Get(ctx, l.FenceKey("order-7")).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), fence)
}

func TestFence_IncreasesAcrossReleaseCycles(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t)
	ctx := context.Background()

	var last int64
	for i := range 20 {
		lease, err := l.Acquire(ctx, "rec", held)
		require.NoError(t, err, "cycle %d", i)
		assert.Greater(t, lease.Fence, last, "cycle %d", i)
		last = lease.Fence
		require.NoError(t, l.Release(ctx, lease), "cycle %d", i)
	}
}

// The S8 shape: A's lease expires under it, B takes over, and A's late calls must not touch B's lease.
func TestFence_IncreasesAcrossExpiry_AndTheStaleHolderCannotTouchTheNewLease(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx := context.Background()

	a, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	// A's lease runs out.
	require.NoError(t, env.Redis.Del(ctx, l.LockKey("rec")).Err())

	b, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	assert.Greater(t, b.Fence, a.Fence)

	assert.ErrorIs(t, l.Release(ctx, a), lock.ErrLost)
	assert.Equal(t, b.Owner, owner(t, env, l, "rec"), "A's release deleted B's lease")

	assert.ErrorIs(t, l.Renew(ctx, a, 24*held), lock.ErrLost)
	pttl, err := env.Redis.PTTL(ctx, l.LockKey("rec")).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, pttl, held, "A's renew extended B's lease")

	assert.NoError(t, l.Release(ctx, b))
}

// A lease whose expiry was removed (PERSIST) would block its name for ever: the next Acquire breaks it,
// with a higher token, and the old holder can no longer touch the lease.
func TestAcquire_BreaksALeaseWithoutExpiry(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx := context.Background()

	a, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	require.True(t, env.Redis.Persist(ctx, l.LockKey("rec")).Val())

	b, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	assert.Greater(t, b.Fence, a.Fence)
	assert.Equal(t, b.Owner, owner(t, env, l, "rec"))
	pttl, err := env.Redis.PTTL(ctx, l.LockKey("rec")).Result()
	require.NoError(t, err)
	assert.Positive(t, pttl, "the new lease expires")
	assert.ErrorIs(t, l.Release(ctx, a), lock.ErrLost)
	assert.NoError(t, l.Release(ctx, b))
}

// RaiseFence only ever raises the counter: a floor below it (a resource that stored an older token, a
// raise that comes late, after other holders drew theirs) leaves it as it is, and the next token is
// still above every earlier one; a floor above it is passed. The raise set the counter to the floor
// whatever it was, and with that broken no test failed: tokens went back, and a holder fenced out
// before was let in again (a helper's finding, 2026-12-06).
func TestRaiseFence_NeverLowersTheCounter(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t)
	ctx := context.Background()

	var last int64
	for i := range 5 {
		lease, err := l.Acquire(ctx, "rec", held)
		require.NoError(t, err, "cycle %d", i)
		last = lease.Fence
		require.NoError(t, l.Release(ctx, lease), "cycle %d", i)
	}
	require.Equal(t, int64(5), last)

	require.NoError(t, l.RaiseFence(ctx, "rec", 2))
	lease, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	assert.Equal(t, last+1, lease.Fence, "a floor below the counter lowered it")
	require.NoError(t, l.Release(ctx, lease))
	last = lease.Fence

	require.NoError(t, l.RaiseFence(ctx, "rec", 40))
	lease, err = l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	assert.Equal(t, int64(41), lease.Fence, "the next token is above the floor")
	assert.Greater(t, lease.Fence, last)
}

// The fence counter is bounded: every acquisition sets its TTL again (in the acquire script), so it
// only expires once the name has not been locked for FenceTTL. A busy attempt does not touch it.
func TestFence_HasATTLRefreshedOnEveryAcquisition(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	l, err := lock.New(env.Redis, env.Prefix, lock.FenceTTL(time.Hour))
	require.NoError(t, err)
	ctx := context.Background()
	fenceTTL := func() time.Duration {
		t.Helper()
		d, err := env.Redis.PTTL(ctx, l.FenceKey("rec")).Result()
		require.NoError(t, err)
		return d
	}

	first, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	assert.Greater(t, fenceTTL(), 59*time.Minute)
	assert.LessOrEqual(t, fenceTTL(), time.Hour)

	// Age the counter, as if the name had been left alone for most of the hour.
	require.NoError(t, env.Redis.PExpire(ctx, l.FenceKey("rec"), time.Minute).Err())
	_, err = l.Acquire(ctx, "rec", held)
	require.ErrorIs(t, err, lock.ErrNotAcquired)
	assert.LessOrEqual(t, fenceTTL(), time.Minute, "a busy attempt refreshed the counter")

	require.NoError(t, l.Release(ctx, first))
	second, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	assert.Equal(t, first.Fence+1, second.Fence)
	assert.Greater(t, fenceTTL(), 59*time.Minute, "the acquisition did not refresh the counter's TTL")
}

func TestFence_DefaultTTLOutlivesTheIdempotencyRetention(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx := context.Background()

	_, err := l.Acquire(ctx, "rec", time.Second)
	require.NoError(t, err)
	d, err := env.Redis.PTTL(ctx, l.FenceKey("rec")).Result()
	require.NoError(t, err)
	assert.Greater(t, d, 24*time.Hour, "IDEMPOTENCY_RETENTION's default")
	assert.LessOrEqual(t, d, lock.DefaultFenceTTL)
}

func TestRenew_ExtendsTheTTL(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx := context.Background()

	// Both TTLs are far longer than the test, so the lease is still there to renew however late the
	// renewal comes; the renewal must set the new TTL.
	lease, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	before, err := env.Redis.PTTL(ctx, l.LockKey("rec")).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, before, held)

	require.NoError(t, l.Renew(ctx, lease, 24*held))
	after, err := env.Redis.PTTL(ctx, l.LockKey("rec")).Result()
	require.NoError(t, err)
	assert.Greater(t, after, 23*held)
	assert.Equal(t, lease.Owner, owner(t, env, l, "rec"))
}

// The watchdog keeps a lease past its TTL. Rather than racing a short TTL against the watchdog's
// ticks (which a loaded machine may delay past it), the test plays the clock: five times it brings the
// lease close to its end behind the watchdog's back, and each time the watchdog must renew it to its
// full TTL. Without the watchdog the lease would run out after the first.
func TestKeepAlive_HoldsPastSeveralTTLsAndReportsLoss(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	lease, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	lost := l.KeepAlive(ctx, lease, held, 10*time.Millisecond)

	const brink = 10 * time.Minute // what is left of the lease; it cannot run out during the test
	pttl := func() time.Duration {
		t.Helper()
		d, err := env.Redis.PTTL(ctx, l.LockKey("rec")).Result()
		require.NoError(t, err)
		return d
	}
	for i := range 5 {
		require.NoError(t, env.Redis.PExpire(ctx, l.LockKey("rec"), brink).Err())
		deadline := time.Now().Add(time.Minute)
		for pttl() <= brink {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the watchdog did not renew the lease within a minute", i)
			}
			select {
			case err := <-lost:
				t.Fatalf("round %d: watchdog stopped early: %v", i, err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		assert.Greater(t, pttl(), held-time.Minute, "round %d: renewed to its full TTL", i)
		require.Equal(t, lease.Owner, owner(t, env, l, "rec"), "round %d: the lease changed hands", i)
	}

	// Delete the key behind the watchdog's back, as an expiry during a long pause would.
	require.NoError(t, env.Redis.Del(ctx, l.LockKey("rec")).Err())
	select {
	case err := <-lost:
		assert.ErrorIs(t, err, lock.ErrLost)
	case <-time.After(time.Minute):
		t.Fatal("watchdog did not report the loss")
	}
	select {
	case _, open := <-lost:
		assert.False(t, open, "the channel carries one error and is closed")
	case <-time.After(time.Minute):
		t.Fatal("channel not closed after the loss")
	}
}

func TestKeepAlive_EndsQuietlyWhenTheHolderIsDone(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx := context.Background()

	lease, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)
	kctx, cancel := context.WithCancel(ctx)
	lost := l.KeepAlive(kctx, lease, held, 10*time.Millisecond)
	cancel()
	select {
	case err, open := <-lost:
		assert.NoError(t, err)
		assert.False(t, open)
	case <-time.After(time.Minute):
		t.Fatal("channel not closed after cancel")
	}
	assert.Equal(t, lease.Owner, owner(t, env, l, "rec"), "cancelling the watchdog must not release the lease")
	assert.NoError(t, l.Release(ctx, lease))
}

// A renewal that hangs on a stalled Redis must end as a loss by the time the lease can be someone
// else's, or the holder writes on. The client's read timeout is an hour (it honours ctx deadlines):
// only the renewal deadline ends the wait. Guards the lock-renew-deadline mutant (internal/mutants).
func TestKeepAlive_ReportsAHungRenewalAsALossWithinTheTTL(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	proxy, viaProxy := tcpproxy.ForURL(t, env.RedisURL)
	opt, err := redis.ParseURL(viaProxy)
	require.NoError(t, err)
	opt.ContextTimeoutEnabled = true
	opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries = time.Hour, time.Hour, -1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := lock.New(rdb, env.Prefix)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const ttl, every = time.Second, 250 * time.Millisecond
	lease, err := l.Acquire(ctx, "rec", ttl)
	require.NoError(t, err)
	// Push the lease's TTL to an hour behind the watchdog's back: seeing it back at ttl proves a
	// renewal went through the proxy before the stall.
	require.NoError(t, env.Redis.PExpire(ctx, l.LockKey("rec"), time.Hour).Err())
	lost := l.KeepAlive(ctx, lease, ttl, every)
	require.Eventually(t, func() bool {
		d, err := env.Redis.PTTL(ctx, l.LockKey("rec")).Result()
		return err == nil && d > 0 && d <= ttl
	}, time.Minute, 5*time.Millisecond, "the watchdog renewed the lease")

	proxy.Stall()
	stalled := time.Now()
	// The next tick comes within every, and its renewal gives up after ttl-every: ttl in all. The
	// margin is for a loaded machine; without the deadline the renewal waits its hour.
	const margin = 3 * time.Second
	select {
	case err := <-lost:
		require.Error(t, err, "a renewal that got no answer is a loss, not a quiet end")
		t.Logf("loss reported %v after the stall: %v", time.Since(stalled), err)
	case <-time.After(ttl + margin):
		t.Fatalf("no loss reported %v after Redis stalled: the holder would write on a lease past its TTL", ttl+margin)
	}
}

// KeepAlive refuses an `every` that is not shorter than ttl at once, on the channel it returns: the
// lease would run out between two renewals, and the holder would learn of it only after the fact (or,
// for an every of an hour, never). Guards the lock-keepalive-every mutant (internal/mutants).
func TestKeepAlive_RefusesAnEveryNotShorterThanTheTTL(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lease, err := l.Acquire(ctx, "rec", held)
	require.NoError(t, err)

	for _, every := range []time.Duration{time.Second, time.Hour} {
		lost := l.KeepAlive(ctx, lease, time.Second, every)
		// The refusal is already on the channel when KeepAlive returns; nothing was started.
		select {
		case err, open := <-lost:
			require.True(t, open, "every %v: an error, not a quiet close", every)
			require.Error(t, err, "every %v", every)
			assert.Contains(t, err.Error(), "every", "every %v", every)
			assert.NotErrorIs(t, err, lock.ErrLost, "every %v", every)
		default:
			t.Fatalf("every %v >= ttl 1s: KeepAlive started a watchdog instead of refusing", every)
		}
		_, open := <-lost
		assert.False(t, open, "every %v: one error, then closed", every)
	}
	assert.Equal(t, lease.Owner, owner(t, env, l, "rec"), "the refusal left the lease alone")
}

func TestAcquireWait(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx := context.Background()

	// Holders hold for an hour: only a release or the wait ends a wait, never the holder's TTL. Upper
	// bounds on a wait's length are a minute: far above what a slow machine adds, far below an hour.
	t.Run("succeeds once the holder releases", func(t *testing.T) {
		holder, err := l.Acquire(ctx, "a", held)
		require.NoError(t, err)
		released := make(chan error, 1)
		time.AfterFunc(100*time.Millisecond, func() { released <- l.Release(ctx, holder) })

		start := time.Now()
		waiter, err := l.AcquireWait(ctx, "a", held, time.Minute)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
		assert.Greater(t, waiter.Fence, holder.Fence)
		assert.NoError(t, <-released)
		assert.Equal(t, waiter.Owner, owner(t, env, l, "a"))
	})

	t.Run("gives up with ErrNotAcquired after wait", func(t *testing.T) {
		holder, err := l.Acquire(ctx, "b", held)
		require.NoError(t, err)

		start := time.Now()
		_, err = l.AcquireWait(ctx, "b", time.Second, 150*time.Millisecond)
		elapsed := time.Since(start)
		assert.ErrorIs(t, err, lock.ErrNotAcquired)
		assert.GreaterOrEqual(t, elapsed, 150*time.Millisecond)
		assert.Less(t, elapsed, time.Minute, "it gave up after its wait, not at the holder's TTL")
		assert.Equal(t, holder.Owner, owner(t, env, l, "b"))
	})

	t.Run("stops when ctx ends", func(t *testing.T) {
		_, err := l.Acquire(ctx, "c", held)
		require.NoError(t, err)

		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = l.AcquireWait(cctx, "c", time.Second, held)
		require.Error(t, err)
		// Usually ctx's own error; when the deadline lands during a round trip it is the client's
		// timeout instead. Either way it is not "busy", and the wait did not run its full hour.
		assert.NotErrorIs(t, err, lock.ErrNotAcquired)
		assert.Less(t, time.Since(start), time.Minute)
	})
}

func TestRedisDown_FailsFastWithARedisError(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{
		Addr:        "127.0.0.1:1", // nothing listens on port 1
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, PoolTimeout: 100 * time.Millisecond,
		DialerRetries: 1, MaxRetries: -1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := lock.New(rdb, "down:")
	require.NoError(t, err)
	ctx := context.Background()
	// A dead Redis answers at once (a refused dial); the bounds leave a slow machine half a minute, and
	// the waits are longer still, so retrying a dead Redis for a whole wait fails the bound.
	const fast, wait = 30 * time.Second, 2 * time.Minute

	start := time.Now()
	_, err = l.Acquire(ctx, "rec", time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, lock.ErrNotAcquired, "a dead Redis must not look like a busy lock")
	assert.Less(t, time.Since(start), fast)

	start = time.Now()
	_, err = l.AcquireWait(ctx, "rec", time.Second, wait)
	require.Error(t, err)
	assert.NotErrorIs(t, err, lock.ErrNotAcquired)
	assert.Less(t, time.Since(start), fast, "AcquireWait must not retry a dead Redis for the whole wait")

	lease := &lock.Lease{Name: "rec", Owner: "someone", Fence: 1}
	err = l.Renew(ctx, lease, time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, lock.ErrLost)
	err = l.Release(ctx, lease)
	require.Error(t, err)
	assert.NotErrorIs(t, err, lock.ErrLost)
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t)
	ctx := context.Background()

	_, err := lock.New(nil, "p:")
	assert.Error(t, err, "nil client")
	_, err = lock.New(&redis.Client{}, "p{x}:")
	assert.Error(t, err, "brace in prefix")
	_, err = lock.New(&redis.Client{}, "p:", lock.FenceTTL(0))
	assert.Error(t, err, "fence TTL 0")
	_, err = lock.New(&redis.Client{}, "p:", lock.FenceTTL(time.Microsecond))
	assert.Error(t, err, "fence TTL below 1 ms")

	for name, call := range map[string]func() error{
		"empty name":        func() error { _, err := l.Acquire(ctx, "", time.Second); return err },
		"ttl below 1 ms":    func() error { _, err := l.Acquire(ctx, "x", time.Microsecond); return err },
		"release nil":       func() error { return l.Release(ctx, nil) },
		"renew nil":         func() error { return l.Renew(ctx, nil, time.Second) },
		"renew ttl 0":       func() error { return l.Renew(ctx, &lock.Lease{Name: "x", Owner: "o"}, 0) },
		"keepalive nil":     func() error { return <-l.KeepAlive(ctx, nil, time.Second, 100*time.Millisecond) },
		"every not < ttl":   func() error { return <-l.KeepAlive(ctx, &lock.Lease{Name: "x"}, time.Second, time.Second) },
		"every not above 0": func() error { return <-l.KeepAlive(ctx, &lock.Lease{Name: "x"}, time.Second, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			err := call()
			assert.Error(t, err)
			assert.NotErrorIs(t, err, lock.ErrNotAcquired)
			assert.NotErrorIs(t, err, lock.ErrLost)
		})
	}
}

// A random sequence of acquire, release, renew and expiry, by current and stale holders, against a
// model of who holds the name. Expiry is a DEL of the lock key: the same state as a TTL that ran out,
// without waiting for one.
func TestLease_Model(t *testing.T) {
	t.Parallel()
	l, env := newLocker(t)
	ctx := context.Background()
	var run int

	rapid.Check(t, func(rt *rapid.T) {
		run++
		name := "m" + strconv.Itoa(run)
		var (
			holder    *lock.Lease // nil: nobody holds name
			issued    []*lock.Lease
			lastFence int64
		)
		pick := func(rt *rapid.T) *lock.Lease {
			if len(issued) == 0 {
				rt.Skip("no lease issued yet")
			}
			return rapid.SampledFrom(issued).Draw(rt, "lease")
		}
		rt.Repeat(map[string]func(*rapid.T){
			"acquire": func(rt *rapid.T) {
				lease, err := l.Acquire(ctx, name, time.Minute)
				if holder != nil {
					require.ErrorIs(rt, err, lock.ErrNotAcquired)
					return
				}
				require.NoError(rt, err)
				require.Greater(rt, lease.Fence, lastFence)
				holder, lastFence = lease, lease.Fence
				issued = append(issued, lease)
			},
			"release": func(rt *rapid.T) {
				lease := pick(rt)
				err := l.Release(ctx, lease)
				if lease == holder {
					require.NoError(rt, err)
					holder = nil
					return
				}
				require.ErrorIs(rt, err, lock.ErrLost)
			},
			"renew": func(rt *rapid.T) {
				lease := pick(rt)
				err := l.Renew(ctx, lease, time.Minute)
				if lease == holder {
					require.NoError(rt, err)
					return
				}
				require.ErrorIs(rt, err, lock.ErrLost)
			},
			"expire": func(rt *rapid.T) {
				require.NoError(rt, env.Redis.Del(ctx, l.LockKey(name)).Err())
				holder = nil
			},
			"": func(rt *rapid.T) {
				got, err := env.Redis.Get(ctx, l.LockKey(name)).Result()
				if holder == nil {
					require.ErrorIs(rt, err, redis.Nil)
					return
				}
				require.NoError(rt, err)
				require.Equal(rt, holder.Owner, got)
			},
		})
	})
}
