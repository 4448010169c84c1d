// Package lock is a Redis lease lock with fencing tokens: the guard of ladder step 4, where the sweeper
// and a live retry race for the same idempotency record.
//
// # A lease, not a lock
//
// A lock whose holder dies would block everybody for ever, so every acquisition here is a lease: it
// expires by itself after a TTL unless the holder renews it. The price is that a lease can run out while
// its holder still believes it holds it. The holder does not have to crash for that. A stop-the-world GC
// pause, a process swapped out, or a database statement stuck behind a row lock can outlast the TTL, and
// nothing tells the holder that its time ran out: it wakes up and carries on with its write, while a
// second holder has already taken the lease and written. Renewing the lease ([Locker.KeepAlive]) makes
// this rarer, never impossible, because the pause can fall between the last check and the write.
//
// # Fencing tokens
//
// Every successful acquisition gets a number from a per-name counter that only goes up ([Lease.Fence]).
// The holder sends its token with every write, and the resource itself (for idemshop, PostgreSQL)
// refuses a token lower than the last one it accepted, in the same statement as the write:
//
//	UPDATE idempotency_keys SET state = $3, ...
//	 WHERE id = $1 AND fence <= $2   -- the claim stored the holder's token in fence
//
// A stale holder's write then affects 0 rows, however late it arrives. The check must live in the
// resource: a holder that checks "do I still hold the lease?" before writing is doing check-then-act,
// and the pause can fall right between the check and the act.
//
// The argument is Martin Kleppmann's, in "How to do distributed locking" (2016):
// https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html
//
// # Bounded keys
//
// The fence counter of a name expires [DefaultFenceTTL] (or [FenceTTL]) after the name's last fenced
// acquisition: a counter that expired starts again at 1, below the tokens the database has stored, and
// the database's fence check refuses the first new holder, which then raises the counter past the stored
// token ([Locker.RaiseFence]) and locks again: one refusal, never a wrong write. Pick the TTL so that every row a counter fenced is deleted before the counter can
// expire, and that never happens.
//
// # Redis is an efficiency layer
//
// The lease keeps two workers from doing the same work at the same time in the common case; the database
// fence keeps the result correct when the lease fails. So a Redis error is returned wrapped, never as
// [ErrNotAcquired], and callers fall back to the database (a row lease taken with a conditional UPDATE)
// instead of treating "Redis is down" as "somebody else holds it".
package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"idemshop/internal/platform/redisx"
)

var (
	// ErrNotAcquired means somebody else holds the lease. It is never returned for a Redis failure.
	ErrNotAcquired = errors.New("lock: not acquired, held by another owner")
	// ErrLost means the lease is no longer ours: it expired, and maybe another owner holds it now. A
	// holder that sees it must stop writing; its fencing token is stale.
	ErrLost = errors.New("lock: lease lost")
)

// Lease is one successful acquisition.
type Lease struct {
	// Name is the resource the lease guards, as passed to Acquire.
	Name string
	// Owner is a random value unique to this acquisition. Release and Renew act only while the lock
	// key still holds it, so a holder whose lease expired cannot touch its successor's lease.
	Owner string
	// Fence is the fencing token: larger than the token of every earlier acquisition of Name. Send it
	// with every write the lease guards, and let the database reject a write whose token is lower than
	// the one it has stored.
	Fence int64
}

// Locker hands out leases on names. It is safe for concurrent use.
type Locker struct {
	rdb     *redis.Client
	prefix  string
	fenceMs int64 // the fence counter's TTL in milliseconds
}

// DefaultFenceTTL is the fence counter's TTL when New is given no FenceTTL: longer than the 24 h for
// which idempotency records are kept (IDEMPOTENCY_RETENTION), plus an hour for the reaper to delete them.
const DefaultFenceTTL = 25 * time.Hour

// Option tunes a Locker.
type Option func(*Locker) error

// FenceTTL sets how long a name's fence counter lives after the name's last fenced acquisition (every
// Acquire sets it again, in the same script as the INCR). Whole milliseconds, at least 1 ms.
//
// The rule: ttl must be at least as long as the database keeps the rows the counter fenced (for the
// pay lock, IDEMPOTENCY_RETENTION plus the reaper's delay). A counter that expires while such a row
// exists starts again at 1, below the row's stored fence; the row's `fence < token` check then refuses
// the next takeover, whose caller raises the counter past the stored token ([Locker.RaiseFence]) and
// tries again. That costs a refusal, never a wrong write, and with a long enough ttl it cannot happen,
// because the row is gone first.
func FenceTTL(ttl time.Duration) Option {
	return func(l *Locker) error {
		ms, err := ttlMillis(ttl)
		if err != nil {
			return fmt.Errorf("lock: fence %w", err)
		}
		l.fenceMs = ms
		return nil
	}
}

// New returns a Locker whose keys start with prefix (it may be empty). rdb must not be nil. prefix must
// not contain '{' or '}', because the keys' hash tag has to be the name (see LockKey). Without options
// the fence counters expire DefaultFenceTTL after their name's last fenced acquisition.
func New(rdb *redis.Client, prefix string, opts ...Option) (*Locker, error) {
	if rdb == nil {
		return nil, errors.New("lock: nil redis client")
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("lock: prefix %q contains a brace, which would move the keys' hash tag", prefix)
	}
	l := &Locker{rdb: rdb, prefix: prefix, fenceMs: DefaultFenceTTL.Milliseconds()}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// LockKey is the Redis key that holds the lease on name: "<prefix>lock:{<name>}". Its value is the
// owner. The braces are a Redis Cluster hash tag: only the name is hashed, so the lock key, the fence
// key and any data key of the same resource that uses the same tag live in one slot, which a Lua script
// touching several of them requires.
func (l *Locker) LockKey(name string) string { return l.prefix + "lock:{" + name + "}" }

// FenceKey is the Redis key of name's fencing counter: "<prefix>fence:{<name>}". Only Acquire writes it;
// it expires FenceTTL after the last one.
func (l *Locker) FenceKey(name string) string { return l.prefix + "fence:{" + name + "}" }

// acquireScript takes the lease and, only if it did, draws the next fencing token and sets the counter's
// TTL again. The steps sit in one script because Redis runs a script without interleaving other
// commands: two acquisitions can never see the same counter value, a failed SET NX never burns a token,
// and the counter never exists without its TTL.
//
// The TTL is long (FenceTTL): the database keeps the highest token that wrote each row, and a counter
// that expired and started again at 1 would hand out tokens lower than ones already stored, and the
// first new holder's write would be refused until its caller raised the counter (RaiseFence). Refreshed at every
// acquisition, it only runs out once the name has not been locked for the whole TTL.
//
// A lock key without expiry (PTTL -1) is a broken lease, deleted first and taken like a free one: no
// Locker wrote it (every SET and PEXPIRE here has a TTL), so it would block the name for ever. It comes
// from a PERSIST, a restore or a hand-made key; the sweeper skipped such an order's stuck pay record
// for good, and its retries got 409 (a helper's finding, 2026-12-06). Breaking it is safe for the same
// reason a lease may expire at all: the new holder's token is higher, and the fence refuses the old.
//
// In Lua, a SET NX that did not set returns false; fences start at 1, so 0 can mean "busy".
var acquireScript = redis.NewScript(`
if redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('DEL', KEYS[1])
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return fence
end
return 0`)

// renewScript extends the TTL only while the lock key still holds our owner value, for the same reason:
// extending a successor's lease would keep it alive after the successor died.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// ttlMillis converts ttl for PX/PEXPIRE, which count whole milliseconds and refuse 0.
func ttlMillis(ttl time.Duration) (int64, error) {
	ms := ttl.Milliseconds()
	if ms < 1 {
		return 0, fmt.Errorf("lock: ttl %v is below the 1 ms Redis resolution", ttl)
	}
	return ms, nil
}

// attempt checks the arguments of one acquisition and draws its owner value: 128 random bits, so no two
// acquisitions, in any process, pick the same owner. ms is ttl in whole milliseconds.
func attempt(name string, ttl time.Duration) (owner string, ms int64, err error) {
	if name == "" {
		return "", 0, errors.New("lock: empty name")
	}
	if ms, err = ttlMillis(ttl); err != nil {
		return "", 0, err
	}
	return rand.Text(), ms, nil
}

// Acquire makes one attempt to take the lease on name for ttl (whole milliseconds, at least 1 ms).
//
// It returns the lease with a fencing token larger than any earlier one for name; an error wrapping
// ErrNotAcquired when another owner holds the lease; or a wrapped Redis or context error, which callers
// must not mistake for "busy".
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	owner, ms, err := attempt(name, ttl)
	if err != nil {
		return nil, err
	}
	fence, err := acquireScript.Run(ctx, l.rdb, []string{l.LockKey(name), l.FenceKey(name)}, owner, ms, l.fenceMs).Int64()
	if err != nil {
		return nil, fmt.Errorf("lock %q: acquire: %w", name, err)
	}
	if fence == 0 {
		return nil, fmt.Errorf("lock %q: %w", name, ErrNotAcquired)
	}
	return &Lease{Name: name, Owner: owner, Fence: fence}, nil
}

// Backoff between AcquireWait attempts: short, because leases guard short steps and a waiter should
// notice a release quickly; capped, so that waiters poll Redis at a bounded rate.
const (
	firstBackoff = 5 * time.Millisecond
	maxBackoff   = 50 * time.Millisecond
)

// AcquireWait is Acquire retried, with a backoff that doubles from 5 ms up to 50 ms, until it succeeds
// or wait has elapsed. The last attempt is made when wait runs out, so a wait of 0 is a single attempt.
//
// It returns an error wrapping ErrNotAcquired when the lease stayed busy for the whole wait, ctx's error
// (wrapped) when ctx ended first, and a Redis error at once: retrying a Redis that is down would only
// delay the caller's database fallback.
func (l *Locker) AcquireWait(ctx context.Context, name string, ttl, wait time.Duration) (*Lease, error) {
	return acquireWait(ctx, name, wait, func() (*Lease, error) { return l.Acquire(ctx, name, ttl) })
}

// acquireWait retries attempt while it answers ErrNotAcquired, as AcquireWait describes.
func acquireWait(ctx context.Context, name string, wait time.Duration, attempt func() (*Lease, error)) (*Lease, error) {
	deadline := time.Now().Add(wait)
	sleep := firstBackoff
	// Bounded by the deadline: each pass sleeps 5 ms or more (or exactly until the deadline), and the
	// pass that finds the deadline reached returns.
	for {
		lease, err := attempt()
		if !errors.Is(err, ErrNotAcquired) {
			return lease, err // acquired, or a Redis/context error
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("lock %q: still held after %v: %w", name, wait, ErrNotAcquired)
		}
		t := time.NewTimer(min(sleep, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lock %q: wait: %w", name, ctx.Err())
		case <-t.C:
		}
		sleep = min(2*sleep, maxBackoff)
	}
}

// raiseScript sets the fencing counter to at least ARGV[1] (and its TTL again), never lower: tokens only
// ever grow.
var raiseScript = redis.NewScript(`
if (tonumber(redis.call('GET', KEYS[1])) or 0) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 0`)

// RaiseFence makes the next fencing token of name larger than floor. A resource that refused a token
// because it had stored floor or more knows the counter is behind: Redis lost it (a restart that came
// back empty), or the database issued tokens while Redis was down. Without the raise, every holder's
// token was refused until the counter caught up one acquisition at a time.
func (l *Locker) RaiseFence(ctx context.Context, name string, floor int64) error {
	if err := raiseScript.Run(ctx, l.rdb, []string{l.FenceKey(name)}, floor, l.fenceMs).Err(); err != nil {
		return fmt.Errorf("lock %q: raise fence: %w", name, err)
	}
	return nil
}

// Release gives the lease up, so the next owner need not wait for the TTL.
//
// It returns an error wrapping ErrLost when the lease had already expired (another owner may hold the
// name now; its key is left alone). That is not a failure of the caller's work, which the fence
// protected, but worth a log line: the lease was too short for the work. Redis errors come back wrapped;
// the lease then simply expires after its TTL.
func (l *Locker) Release(ctx context.Context, lease *Lease) error {
	if lease == nil {
		return errors.New("lock: release of nil lease")
	}
	// Only while the key still holds our owner value: after our lease expired it may be the next holder's.
	n, err := redisx.DeleteIfOwner.Run(ctx, l.rdb, []string{l.LockKey(lease.Name)}, lease.Owner).Int64()
	if err != nil {
		return fmt.Errorf("lock %q: release: %w", lease.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("lock %q: release: %w", lease.Name, ErrLost)
	}
	return nil
}

// Renew sets the lease's remaining time to ttl (whole milliseconds, at least 1 ms), counted from now.
//
// It returns an error wrapping ErrLost when the lease is no longer ours; the holder must stop writing.
// A Redis error comes back wrapped; the holder then cannot tell whether the lease is still alive, so it
// should treat the error like a loss, unless its write carries the fencing token and the store checks it:
// then the fence decides, and a Redis outage need not stop the work (the pay flow writes on,
// pay.Payer.stillHeld).
func (l *Locker) Renew(ctx context.Context, lease *Lease, ttl time.Duration) error {
	if lease == nil {
		return errors.New("lock: renew of nil lease")
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return err
	}
	n, err := renewScript.Run(ctx, l.rdb, []string{l.LockKey(lease.Name)}, lease.Owner, ms).Int64()
	if err != nil {
		return fmt.Errorf("lock %q: renew: %w", lease.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("lock %q: renew: %w", lease.Name, ErrLost)
	}
	return nil
}

// KeepAlive is the watchdog for a long holder: it renews lease to ttl every `every` until ctx ends. every
// must be shorter than ttl; a third of ttl is a usual choice, so one late renewal still lands in time.
//
// The returned channel yields at most one error and is then closed. An error (wrapping ErrLost, or a
// Redis error) means the lease may be gone: stop writing, or, after a Redis error, write only under the
// fencing token (as Renew says). A receive that yields nil (closed channel)
// means ctx ended and the lease was still ours at the last renewal. Cancel ctx before Release; otherwise
// a renewal after the release reports ErrLost.
func (l *Locker) KeepAlive(ctx context.Context, lease *Lease, ttl, every time.Duration) <-chan error {
	out := make(chan error, 1) // buffered: the watchdog never blocks on a holder that stopped listening
	if lease == nil || every <= 0 || every >= ttl {
		out <- fmt.Errorf("lock: keepalive needs a lease and 0 < every (%v) < ttl (%v)", every, ttl)
		close(out)
		return out
	}
	go func() {
		defer close(out)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A renewal slower than ttl-every would land after the lease could already have expired:
			// report it as a failure rather than let the holder write on a lease that may be gone.
			rctx, cancel := context.WithTimeout(ctx, ttl-every)
			err := l.Renew(rctx, lease, ttl)
			cancel()
			if ctx.Err() != nil {
				return // the holder is done; an error caused by its cancel is not a loss
			}
			if err != nil {
				out <- err
				return
			}
		}
	}()
	return out
}
