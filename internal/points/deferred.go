package points

import (
	"cmp"
	"slices"
	"time"
)

// deferredSet is one consumer session's messages whose Redis lease someone else holds: delivered,
// unacknowledged, set aside so that the rest of their batch could go on (Consumer.setAside). A later
// message that says the same as one waiting for its biz_id becomes its copy; one that says something
// else (a broken or forged one beside the real one) waits beside it, to be judged alone, as in a batch
// (twoLayer.handle). It lives and dies with the session's channel: if the channel is lost, the broker
// requeues them all. Only the session's goroutine uses it. A nil set is empty.
type deferredSet struct {
	byBiz map[string][]*message
}

// add sets m aside, or makes it (and its copies) a copy of the message waiting for its biz_id that
// says the same.
func (s *deferredSet) add(m *message) {
	if s.byBiz == nil {
		s.byBiz = make(map[string][]*message)
	}
	for _, w := range s.byBiz[m.bizID()] {
		if w.credit != m.credit || !w.sameReversal(m) {
			continue
		}
		dups := m.dups
		m.dups = nil
		w.follow(m)
		for _, d := range dups {
			w.follow(d)
		}
		return
	}
	m.waiting = true
	s.byBiz[m.bizID()] = append(s.byBiz[m.bizID()], m)
}

// all calls fn for every waiting message (not their copies).
func (s *deferredSet) all(fn func(*message)) {
	if s == nil {
		return
	}
	for _, ms := range s.byBiz {
		for _, m := range ms {
			fn(m)
		}
	}
}

// next returns the earliest time a waiting message is due for another claim.
func (s *deferredSet) next() (time.Time, bool) {
	var at time.Time
	found := false
	s.all(func(m *message) {
		if !found || m.retryAt.Before(at) {
			at, found = m.retryAt, true
		}
	})
	return at, found
}

// takeDue removes and returns at most n of the messages due for another claim at now, the earliest
// deliveries first. The rest stay waiting, where hasTagBelow sees them.
func (s *deferredSet) takeDue(now time.Time, n int) []*message {
	return s.take(func(m *message) bool { return !m.retryAt.After(now) }, n)
}

// takeAll removes and returns every waiting message, in delivery order.
func (s *deferredSet) takeAll() []*message {
	return s.take(func(*message) bool { return true }, -1)
}

// take removes and returns up to n (n < 0: all) of the waiting messages for which pick is true, the
// earliest deliveries first.
func (s *deferredSet) take(pick func(*message) bool, n int) []*message {
	if s == nil {
		return nil
	}
	var out []*message
	s.all(func(m *message) {
		if pick(m) {
			out = append(out, m)
		}
	})
	slices.SortFunc(out, func(a, b *message) int { return cmp.Compare(a.d.DeliveryTag, b.d.DeliveryTag) })
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	for _, m := range out {
		m.waiting = false
		id := m.bizID()
		if kept := slices.DeleteFunc(s.byBiz[id], func(w *message) bool { return w == m }); len(kept) > 0 {
			s.byBiz[id] = kept
		} else {
			delete(s.byBiz, id)
		}
	}
	return out
}

// hasTagBelow reports whether a waiting message, or one of its copies, has a delivery tag lower than
// tag: a multiple-ack of tag would acknowledge it.
func (s *deferredSet) hasTagBelow(tag uint64) bool {
	below := false
	s.all(func(m *message) {
		if m.d.DeliveryTag < tag {
			below = true
		}
		for _, d := range m.dups {
			if d.d.DeliveryTag < tag {
				below = true
			}
		}
	})
	return below
}
