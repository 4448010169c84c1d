package lock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"idemshop/internal/lock"
)

// The holder's side of ladder step 4: take the lease, keep it alive while working, carry the fencing
// token into every write, and let the database have the last word. (Compiled, not run: it needs Redis.)
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	locker, err := lock.New(rdb, "idemshop:")
	if err != nil {
		log.Fatal(err)
	}

	lease, err := locker.AcquireWait(ctx, "pay:42", 2*time.Second, 200*time.Millisecond)
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		return // someone else is on it: answer 409 with Retry-After
	case err != nil:
		return // Redis is down: fall back to the database row lease
	}

	work, stop := context.WithCancel(ctx)
	lost := locker.KeepAlive(work, lease, 2*time.Second, 600*time.Millisecond)

	// ... call the payment platform with work ...

	select {
	case err := <-lost:
		log.Printf("lease lost, not writing: %v", err)
		stop()
		return
	default:
	}
	// The fence check that decides, whatever the lease says by now:
	//   UPDATE idempotency_keys SET state = 'COMPLETED', ..., fence = $2 WHERE id = $1 AND fence <= $2
	// with $2 = lease.Fence. RowsAffected 0 means a newer holder wrote first: count it, do not retry.
	_ = lease.Fence

	stop() // stop the watchdog before releasing, or its next renewal reports ErrLost
	if err := locker.Release(ctx, lease); errors.Is(err, lock.ErrLost) {
		log.Printf("lease expired before release; the fence guarded the write: %v", err)
	}
}
