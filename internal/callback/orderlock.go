package callback

import (
	"context"
	"errors"
	"strconv"
	"time"

	"idemshop/internal/lock"
)

// RedisOrderLock is the OrderLock over a Redis lease: ttl bounds how long a crashed holder blocks
// others, wait how long a callback queues before it gives up and goes to the database anyway.
type RedisOrderLock struct {
	locker *lock.Locker
	ttl    time.Duration
	wait   time.Duration
}

// NewRedisOrderLock returns the efficiency lock for callbacks.
func NewRedisOrderLock(l *lock.Locker, ttl, wait time.Duration) (*RedisOrderLock, error) {
	if l == nil || ttl <= 0 || wait < 0 {
		return nil, errors.New("callback: NewRedisOrderLock needs a locker, ttl > 0 and wait >= 0")
	}
	return &RedisOrderLock{locker: l, ttl: ttl, wait: wait}, nil
}

// Lock takes callback:order:<id>, unfenced. A fencing token is not needed here: the conditional UPDATE
// in the database is the guard, the lock only spares it a queue of identical callbacks. So the lease
// draws none, and leaves no fence counter in Redis: its only key is the lock key, which expires.
func (r *RedisOrderLock) Lock(ctx context.Context, orderID int64) (func(), error) {
	lease, err := r.locker.AcquireUnfencedWait(ctx, "callback:order:"+strconv.FormatInt(orderID, 10), r.ttl, r.wait)
	if err != nil {
		return nil, err
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = r.locker.Release(rctx, lease) // a lost lease has expired already; nothing to undo
	}, nil
}
