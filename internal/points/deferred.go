package points

import (
	"cmp"
	"slices"
	"time"
)

// deferredSet is one consumer session's messages whose Redis lease someone else holds: delivered,
// unacknowledged, set aside so that the rest of their batch could go on (Consumer.setAside). It
// holds one message per biz_id; a later message with the same biz_id becomes its copy. It lives and
// dies with the session's channel: if the channel is lost, the broker requeues them all. Only the
// session's goroutine uses it. A nil set is empty.
type deferredSet struct {
	byBiz map[string]*message
}

// add sets m aside, or makes it (and its copies) a copy of the message already waiting for its biz_id.
func (s *deferredSet) add(m *message) {
	if s.byBiz == nil {
		s.byBiz = make(map[string]*message)
	}
	w := s.byBiz[m.bizID()]
	if w == nil {
		m.waiting = true
		s.byBiz[m.bizID()] = m
		return
	}
	dups := m.dups
	m.dups = nil
	w.follow(m)
	for _, d := range dups {
		w.follow(d)
	}
}

// next returns the earliest time a waiting message is due for another claim.
func (s *deferredSet) next() (time.Time, bool) {
	if s == nil || len(s.byBiz) == 0 {
		return time.Time{}, false
	}
	var at time.Time
	for _, m := range s.byBiz {
		if at.IsZero() || m.retryAt.Before(at) {
			at = m.retryAt
		}
	}
	return at, true
}

// takeDue removes and returns the messages due for another claim at now, in delivery order.
func (s *deferredSet) takeDue(now time.Time) []*message {
	return s.take(func(m *message) bool { return !m.retryAt.After(now) })
}

// takeAll removes and returns every waiting message, in delivery order.
func (s *deferredSet) takeAll() []*message {
	return s.take(func(*message) bool { return true })
}

func (s *deferredSet) take(pick func(*message) bool) []*message {
	if s == nil {
		return nil
	}
	var out []*message
	for id, m := range s.byBiz {
		if pick(m) {
			m.waiting = false
			delete(s.byBiz, id)
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *message) int { return cmp.Compare(a.d.DeliveryTag, b.d.DeliveryTag) })
	return out
}

// hasTagBelow reports whether a waiting message, or one of its copies, has a delivery tag lower than
// tag: a multiple-ack of tag would acknowledge it.
func (s *deferredSet) hasTagBelow(tag uint64) bool {
	if s == nil {
		return false
	}
	for _, m := range s.byBiz {
		if m.d.DeliveryTag < tag {
			return true
		}
		for _, d := range m.dups {
			if d.d.DeliveryTag < tag {
				return true
			}
		}
	}
	return false
}
