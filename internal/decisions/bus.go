package decisions

import (
	"sync"
	"time"
)

// Bus fans decisions out to subscribers and keeps the last few for a page that opens late. Publish
// never blocks: a guard's request must not wait for a browser. A subscriber whose buffer is full loses
// the decision, and Missed tells it how many it lost, so a page can say so instead of looking complete.
type Bus struct {
	mu     sync.Mutex
	seq    uint64
	ring   []Decision // the last len(ring) decisions, oldest at next when full
	next   int
	full   bool
	subs   map[*Subscription]struct{}
	buffer int
	copies copyCounter
	closed bool
	now    func() time.Time
}

// NewBus returns a bus that remembers the last keep decisions and gives each subscriber a buffer of
// buffer decisions. Both are at least 1.
func NewBus(keep, buffer int) *Bus {
	return &Bus{ring: make([]Decision, max(keep, 1)), buffer: max(buffer, 1),
		subs: map[*Subscription]struct{}{}, copies: newCopyCounter(copiesRemembered), now: time.Now}
}

// Subscription is one watcher's feed. C is closed when the subscription or the bus is closed.
type Subscription struct {
	C      <-chan Decision
	c      chan Decision
	bus    *Bus
	missed int64 // guarded by bus.mu
}

// Record is Publish for the Sink interface. A nil *Bus records nothing.
func (b *Bus) Record(d Decision) {
	if b == nil {
		return
	}
	b.Publish(d)
}

// Publish numbers d (Seq, Copy, At), keeps it, and offers it to every subscriber without waiting.
func (b *Bus) Publish(d Decision) Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	d.Seq = b.seq
	if d.At.IsZero() {
		d.At = b.now().UTC()
	}
	if d.EventID != "" && d.Copy == 0 {
		d.Copy = b.copies.next(d.Type + "\x00" + d.EventID)
	}
	b.ring[b.next] = d
	b.next = (b.next + 1) % len(b.ring)
	b.full = b.full || b.next == 0
	if b.closed {
		return d
	}
	for s := range b.subs {
		select {
		case s.c <- d:
		default:
			s.missed++ // a slow watcher loses this one; the guard does not wait for it
		}
	}
	return d
}

// Recent returns the kept decisions with Seq > since, oldest first.
func (b *Bus) Recent(since uint64) []Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.recentLocked(since)
}

func (b *Bus) recentLocked(since uint64) []Decision {
	var out []Decision
	n, start := b.next, 0
	if b.full {
		n, start = len(b.ring), b.next
	}
	for i := range n {
		if d := b.ring[(start+i)%len(b.ring)]; d.Seq > since {
			out = append(out, d)
		}
	}
	return out
}

// Subscribe returns a live feed and, taken at the same instant so that nothing falls between them, the
// kept decisions with Seq > since. On a closed bus the feed is already closed.
func (b *Bus) Subscribe(since uint64) (*Subscription, []Decision) {
	c := make(chan Decision, b.buffer)
	s := &Subscription{C: c, c: c, bus: b}
	b.mu.Lock()
	defer b.mu.Unlock()
	backlog := b.recentLocked(since)
	if b.closed {
		close(c)
		return s, backlog
	}
	b.subs[s] = struct{}{}
	return s, backlog
}

// Missed returns how many decisions this subscriber lost since the last call, and starts counting again.
func (s *Subscription) Missed() int64 {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	n := s.missed
	s.missed = 0
	return n
}

// Close ends the subscription and closes C. Closing twice is harmless.
func (s *Subscription) Close() {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	if _, ok := s.bus.subs[s]; ok {
		delete(s.bus.subs, s)
		close(s.c)
	}
}

// Close closes every subscription (their watchers end: a server's shutdown must not wait on open
// streams) and refuses new ones. Decisions are still numbered and kept.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.subs {
		delete(b.subs, s)
		close(s.c)
	}
}

// copiesRemembered bounds the event ids the bus numbers copies for: a long lab run sends millions of
// events, and only the recent ones get resent.
const copiesRemembered = 10000

// copyCounter counts decisions per key, forgetting the oldest key once it holds limit keys.
type copyCounter struct {
	seen  map[string]int
	order []string // keys in first-seen order, a ring of limit
	pos   int      // the oldest key in order, once it is full
	limit int
}

func newCopyCounter(limit int) copyCounter {
	return copyCounter{seen: map[string]int{}, order: make([]string, 0, limit), limit: limit}
}

func (c *copyCounter) next(key string) int {
	if n, ok := c.seen[key]; ok {
		c.seen[key] = n + 1
		return n + 1
	}
	if len(c.order) < c.limit {
		c.order = append(c.order, key)
	} else {
		delete(c.seen, c.order[c.pos])
		c.order[c.pos] = key
		c.pos = (c.pos + 1) % c.limit
	}
	c.seen[key] = 1
	return 1
}
