package outbox

import (
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// brokerBlock follows one connection's connection.blocked and connection.unblocked: RabbitMQ's
// resource alarms (memory or disk, node-wide). While the alarm lasts the broker reads nothing more
// from a connection that publishes: a publish sits in the socket, its confirm never comes, and a new
// connection is blocked the same way at its first publish. A relay that took the missing confirms for a
// broken connection and dialed again left one blocked connection behind per ConfirmTimeout, each
// holding a batch, and its health named a confirm timeout, not the alarm (seen against a private node
// under a memory alarm, 2026-12-07: eight blocked connections in eight seconds).
type brokerBlock struct {
	// changed, called with every change (from the follower's goroutine), shows the block at once: a
	// batch in flight when it begins waits for its confirms up to ConfirmTimeout first.
	changed func(active bool, reason string)

	mu      sync.Mutex
	reason  string        // the broker's reason, e.g. "low on memory"; "" while not blocked
	cleared chan struct{} // nil while not blocked; closed when the block clears
}

// followBlocks starts following conn's blocks, calling changed with each change: the broker's reason as
// a block begins, why it ended as it ends. The client drops a notification its listener does not
// take within a few seconds, and holds its reader meanwhile, so a goroutine of its own takes them; it
// ends when the connection closes (the client closes the listener), clearing any block.
func followBlocks(conn *amqp.Connection, changed func(active bool, reason string)) *brokerBlock {
	b := &brokerBlock{changed: changed}
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func() {
		for bl := range blocks {
			reason := bl.Reason
			if !bl.Active {
				reason = "connection.unblocked"
			}
			b.set(bl.Active, reason)
		}
		b.set(false, "its connection closed, not a clear of the alarm")
	}()
	return b
}

func (b *brokerBlock) set(active bool, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case active && b.cleared == nil:
		b.reason, b.cleared = reason, make(chan struct{})
	case !active && b.cleared != nil:
		close(b.cleared)
		b.reason, b.cleared = "", nil
	default:
		return
	}
	b.changed(active, reason)
}

// blocked returns the block's reason and a channel closed when it clears, or ("", nil) while the
// connection is not blocked.
func (b *brokerBlock) blocked() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cleared == nil {
		return "", nil
	}
	return b.reason, b.cleared
}
