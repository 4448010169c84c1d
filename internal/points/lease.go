package points

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"idemshop/internal/platform/redisx"
)

// Layer 1 of the consumer's dedup: a Redis lease per business key, <prefix>points:dedup:<biz_id>.
//
//	absent          nobody is working on it (or the lease ran out)
//	<claim token>   a consumer claimed it with SET NX PX and has not committed yet
//	"done"          a consumer committed it; kept EX DoneTTL so a duplicate need not claim or wait
//
// The lease only saves work: it keeps two consumers from working on one order at the same time. The
// truth is the ledger's unique index (layer 2): if Redis is down, or forgets a key, the database still
// refuses the second credit. What the lease must never do is lose a credit, so it never decides alone:
//   - a claim that is neither committed nor released expires after LeaseTTL, and the redelivered
//     message claims it again (lab scenario S11, guarded side);
//   - "done" means "maybe done": Redis can remember what the database does not (a database restored
//     or recreated under a Redis that kept its keys), so a "done" message still goes to the ledger,
//     whose unique index answers "duplicate" or credits it. A cache never outvotes the ledger.

// claimState is the answer of one claim.
type claimState int

const (
	claimed claimState = iota + 1 // ours now: go on to the database
	done                          // committed earlier, says Redis: maybe a duplicate, the ledger decides
	held                          // someone else's claim, not committed yet: wait, do not drop
)

// claimScript takes each lease in KEYS that is free and otherwise says whether it is done or held,
// without a window between the two checks: two answers per key, in order: 1 claimed, 2 done or 3
// held, then for a held lease the milliseconds it has left (PTTL), else 0. One script for the whole
// batch is one command for Redis to parse and run instead of one per message.
//
// A claim that never expires (PTTL -1) is broken and taken like a free one: no consumer wrote it (every
// claim has PX), so nothing would ever free it. It comes from a PERSIST, a restore or a hand-made key;
// waited for, it failed the message after each LeaseTTL until the DLQ took it (a helper's finding,
// 2026-12-06). Taking it is safe for the same reason the lease may expire at all: the ledger decides.
var claimScript = redis.NewScript(`
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) then
    out[2*i-1], out[2*i] = 1, 0
  elseif redis.call('GET', key) == 'done' then
    out[2*i-1], out[2*i] = 2, 0
  elseif redis.call('PTTL', key) == -1 then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    out[2*i-1], out[2*i] = 1, 0
  else
    out[2*i-1], out[2*i] = 3, redis.call('PTTL', key)
  end
end
return out`)

const doneValue = "done"

// leases is the Redis side of the dedup.
type leases struct {
	rdb     *redis.Client
	prefix  string
	ttl     time.Duration
	doneTTL time.Duration
}

func (l *leases) key(bizID string) string { return l.prefix + "points:dedup:" + bizID }

// claim tries to claim every biz_id with token, in one round trip (one script for the whole batch;
// EVALSHA, and EVAL once if Redis does not have the script yet). An error means Redis is unusable
// right now; the caller then goes to the database without leases, which is slower but still exactly
// once.
//
// left is, for each held lease, how long it has to run (0 for the others): a holder with a longer
// POINTS_LEASE_TTL than this consumer's (a rolling change of the setting, replicas that differ) must be
// waited out to its end, not to this consumer's TTL.
func (l *leases) claim(ctx context.Context, bizIDs []string, token string) (states []claimState, left []time.Duration, err error) {
	keys := make([]string, len(bizIDs))
	for i, id := range bizIDs {
		keys[i] = l.key(id)
	}
	answers, err := claimScript.Run(ctx, l.rdb, keys, token, l.ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("claim dedup leases: %w", err)
	}
	if len(answers) != 2*len(bizIDs) {
		return nil, nil, fmt.Errorf("claim dedup leases: %d answers for %d keys", len(answers), len(bizIDs))
	}
	states, left = make([]claimState, len(bizIDs)), make([]time.Duration, len(bizIDs))
	for i := range bizIDs {
		states[i], left[i] = claimState(answers[2*i]), time.Duration(answers[2*i+1])*time.Millisecond
	}
	return states, left, nil
}

// markDone records committed credits, so a duplicate goes straight to the ledger instead of waiting
// for a lease. It runs after the commit: a crash before it leaves the lease to expire, and the ledger
// answers the duplicate.
// Set unconditionally: the credit is committed, whoever's lease this was.
func (l *leases) markDone(ctx context.Context, bizIDs []string) error {
	if len(bizIDs) == 0 {
		return nil
	}
	pipe := l.rdb.Pipeline()
	for _, id := range bizIDs {
		pipe.Set(ctx, l.key(id), doneValue, l.doneTTL)
	}
	_, err := pipe.Exec(ctx)
	if err != nil {
		return fmt.Errorf("mark dedup leases done: %w", err)
	}
	return nil
}

// release frees our claims after a failure, so the redelivery can claim at once instead of waiting
// out the lease.
func (l *leases) release(ctx context.Context, bizIDs []string, token string) error {
	if len(bizIDs) == 0 {
		return nil
	}
	pipe := l.rdb.Pipeline()
	for _, id := range bizIDs {
		// Only if the lease is still ours: a slow consumer whose lease already ran out must not
		// delete the claim a newer consumer took since.
		_ = redisx.DeleteIfOwner.Eval(ctx, pipe, []string{l.key(id)}, token)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("release dedup leases: %w", err)
	}
	return nil
}
