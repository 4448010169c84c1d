package points

// LAB ONLY — the deliberately broken twins of Consumer.handle (consumer.go), for the lab
// rows S6 and S11 (docs/design.md, "The lab"). Each one keeps handle's steps and calls and breaks only the dedup:
//
//   - s6-no-dedup shows "points twice". It de-duplicates on the broker's message_id, remembered in
//     this process's memory, and keys the ledger row by the delivery instead of the order. A crash
//     after the commit, before the ack, forgets every message id; the broker redelivers; the next
//     consumer credits the order a second time, and the unique index on biz_id never sees a repeat.
//   - s11-claim-first shows "message dropped, points lost". SET NX writes the final "done" for the
//     order BEFORE the commit, and it does not run out before any redelivery. A crash between that
//     claim and the commit leaves "done" with nothing in the ledger; the redelivery reads "done",
//     acks, and the credit is gone for good.
//
// Only ConsumerConfig.Unsafe selects them, and only the lab sets it (internal/lab s6.go, s11.go);
// NewConsumer logs loudly when it is. Compare handleUnsafe with handle: the guard is the Redis lease
// claimed per ORDER that runs out (claim, lease.go) and the ledger row keyed by the ORDER (decode).

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// UnsafeMode names a broken twin of the consumer's dedup. The empty mode is the guarded consumer.
type UnsafeMode string

const (
	// UnsafeNoDedup (S6) has no dedup on the business key: a message_id set in memory only.
	UnsafeNoDedup UnsafeMode = "s6-no-dedup"
	// UnsafeClaimFirst (S11) marks the order done with SET NX before the commit, with no lease.
	UnsafeClaimFirst UnsafeMode = "s11-claim-first"
)

func (m UnsafeMode) validate() error {
	switch m {
	case "", UnsafeNoDedup, UnsafeClaimFirst:
		return nil
	}
	return fmt.Errorf("points: unknown unsafe mode %q (want %q or %q)", m, UnsafeNoDedup, UnsafeClaimFirst)
}

// unsafeDedup is the state of a broken twin. seen is S6's whole dedup: it lives in this process and
// dies with it, which is the point.
type unsafeDedup struct {
	mode UnsafeMode
	mu   sync.Mutex
	seen map[string]bool // message ids credited by this process
}

func newUnsafeDedup(mode UnsafeMode, logger *slog.Logger) *unsafeDedup {
	if mode == "" {
		return nil
	}
	logger.Warn("LAB UNSAFE: points-consumer runs a deliberately broken dedup; points WILL be credited twice or lost",
		"unsafe", string(mode))
	return &unsafeDedup{mode: mode, seen: map[string]bool{}}
}

// handleUnsafe is handle with its guard broken. Decode, apply (the ledger transaction), the crash
// points and settle are the same calls; what changes is step 2 (layer 1) and, for S6, the key.
func (c *Consumer) handleUnsafe(ctx, work context.Context, ch *amqp.Channel, ds []amqp.Delivery) {
	msgs := make([]*message, len(ds))
	var decoded []*message
	for i, d := range ds {
		m := &message{d: d}
		msgs[i] = m
		if err := m.decode(); err != nil {
			m.outcome, m.err = OutcomeFailed, err
			continue
		}
		decoded = append(decoded, m)
	}

	switch c.unsafe.mode {
	case UnsafeNoDedup:
		toApply := c.unsafe.notSeen(decoded)
		c.apply(ctx, work, toApply)
		if len(toApply) > 0 {
			c.fault(FaultAfterCommit) // the crash S6 is about: committed, not acked, memory lost
		}
		c.unsafe.remember(toApply)
	case UnsafeClaimFirst:
		toApply := c.claimFirst(work, decoded)
		if len(toApply) > 0 {
			c.fault(FaultAfterClaim) // the crash S11 is about: "done" written, nothing committed
		}
		c.apply(ctx, work, toApply)
		// No release on failure either: the naive version never undoes its "done".
	}
	c.settle(ch, nil, msgs) // nothing is ever set aside here
}

// notSeen is S6's dedup, and both of its mistakes. It remembers broker message ids, not order ids (a
// republish of the order carries a new one), and only in memory (a crash forgets them). With nothing
// durable keyed on the order, the ledger row gets a key per delivery, so the unique index on biz_id
// can never catch the repeat. The guarded decode keys both layers on the order id instead.
func (u *unsafeDedup) notSeen(ms []*message) []*message {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []*message
	for _, m := range ms {
		if u.seen[m.d.MessageId] {
			m.outcome = OutcomeDuplicate
			continue
		}
		m.credit.BizID = fmt.Sprintf("%s:delivery-%s", m.credit.BizID, uuid.NewString())
		out = append(out, m)
	}
	return out
}

// remember records the message ids credited now, after the commit: a crash before this line (or any
// time later, since it is memory) and the next process has never heard of them.
func (u *unsafeDedup) remember(ms []*message) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, m := range ms {
		if m.outcome == OutcomeApplied {
			u.seen[m.d.MessageId] = true
		}
	}
}

// claimFirst is S11's layer 1, broken: SET NX writes the final "done" before the commit, kept for
// DoneTTL (24 h by default: no redelivery outlives it). Whoever finds the key takes the work for done
// and acks. The guarded claim (lease.go) writes a token that runs out after LeaseTTL instead, waits
// for a held one rather than dropping the message, and only markDone, after the commit, writes "done".
func (c *Consumer) claimFirst(ctx context.Context, ms []*message) []*message {
	var toApply []*message
	for _, m := range ms {
		first, err := c.leases.rdb.SetNX(ctx, c.leases.key(m.bizID()), doneValue, c.cfg.DoneTTL).Result()
		switch {
		case err != nil:
			m.outcome, m.err = OutcomeFailed, fmt.Errorf("claim-first: %w", err)
		case !first:
			m.outcome = OutcomeDuplicate // "done" proves only that someone claimed, not that it committed
		default:
			toApply = append(toApply, m)
		}
	}
	return toApply
}
