package points

// LAB ONLY — the deliberately broken twins of the consumer's Dedup (twoLayer.handle, consumer.go), for
// the lab rows S6 and S11 (docs/design.md, "The lab"). Each one keeps handle's steps and calls and
// breaks only the dedup:
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
// Only ConsumerConfig.Dedup selects them, and only the lab sets it (internal/lab s6.go, s11.go);
// NewConsumer logs loudly when it does. Compare each handle with twoLayer.handle: the guard is the
// Redis lease claimed per ORDER that runs out (claim, lease.go) and the ledger row keyed by the ORDER
// (decode).

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// NoDedup returns S6's twin: no dedup on the business key, only a set of broker message ids in this
// consumer's memory. Each consumer needs its own (a restarted process starts with an empty memory).
func NoDedup() Dedup { return &noDedup{seen: map[string]bool{}} }

// ClaimFirst returns S11's twin: SET NX writes the final "done" for the order before the commit, with
// no lease that runs out.
func ClaimFirst() Dedup { return claimFirst{} }

// noDedup is S6's dedup, all of it: seen lives in this consumer and dies with it, which is the point.
type noDedup struct {
	mu   sync.Mutex
	seen map[string]bool // message ids credited by this consumer
}

func (*noDedup) Name() string { return "s6-no-dedup" }

// handle is twoLayer.handle with layer 1 replaced by notSeen and the ledger key by the delivery.
// Decode, apply (the ledger transaction), the crash point and settle are the same calls.
func (u *noDedup) handle(c *Consumer, ctx, work context.Context, ch *amqp.Channel, _ *deferredSet, ds []amqp.Delivery) {
	msgs, decoded := decodeAll(ds)
	toApply := u.notSeen(decoded)
	c.apply(ctx, work, toApply)
	if len(toApply) > 0 {
		c.cfg.Fault.At(work, CrashAfterCommit) // the crash S6 is about: committed, not acked, memory lost
	}
	u.remember(toApply)
	c.settle(ch, nil, msgs) // nothing is ever set aside here
}

type claimFirst struct{}

func (claimFirst) Name() string { return "s11-claim-first" }

// handle is twoLayer.handle with layer 1 replaced by claim: the same decode, apply, crash point and
// settle.
func (cf claimFirst) handle(c *Consumer, ctx, work context.Context, ch *amqp.Channel, _ *deferredSet, ds []amqp.Delivery) {
	msgs, decoded := decodeAll(ds)
	toApply := cf.claim(c, work, decoded)
	if len(toApply) > 0 {
		c.cfg.Fault.At(work, CrashAfterClaim) // the crash S11 is about: "done" written, nothing committed
	}
	c.apply(ctx, work, toApply)
	// No release on failure either: the naive version never undoes its "done".
	c.settle(ch, nil, msgs) // nothing is ever set aside here
}

// decodeAll decodes ds; msgs are all of them (to settle), decoded the ones that decoded.
func decodeAll(ds []amqp.Delivery) (msgs, decoded []*message) {
	msgs = make([]*message, len(ds))
	for i, d := range ds {
		m := &message{d: d}
		msgs[i] = m
		if err := m.decode(); err != nil {
			m.outcome, m.err = OutcomeFailed, err
			continue
		}
		decoded = append(decoded, m)
	}
	return msgs, decoded
}

// notSeen is S6's dedup, and both of its mistakes. It remembers broker message ids, not order ids (a
// republish of the order carries a new one), and only in memory (a crash forgets them). With nothing
// durable keyed on the order, the ledger row gets a key per delivery, so the unique index on biz_id
// can never catch the repeat. The guarded decode keys both layers on the order id instead.
func (u *noDedup) notSeen(ms []*message) []*message {
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
func (u *noDedup) remember(ms []*message) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, m := range ms {
		if m.outcome == OutcomeApplied {
			u.seen[m.d.MessageId] = true
		}
	}
}

// claim is S11's layer 1, broken: SET NX writes the final "done" before the commit, kept for
// DoneTTL (24 h by default: no redelivery outlives it). Whoever finds the key takes the work for done
// and acks. The guarded claim (lease.go) writes a token that runs out after LeaseTTL instead, waits
// for a held one rather than dropping the message, and only markDone, after the commit, writes "done".
func (claimFirst) claim(c *Consumer, ctx context.Context, ms []*message) []*message {
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
