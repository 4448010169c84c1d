package decisions

import (
	"testing"
	"time"
)

func TestPublishNeverBlocksAndTellsTheSlowSubscriberWhatItMissed(t *testing.T) {
	b := NewBus(10, 2)
	slow, _ := b.Subscribe(0)
	defer slow.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 {
			b.Publish(Decision{Type: TypeCallback, Outcome: "applied"})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a bound for a failing run only
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	if got := slow.Missed(); got != 3 {
		t.Fatalf("missed = %d, want 3 (5 published, buffer 2)", got)
	}
	if got := slow.Missed(); got != 0 {
		t.Fatalf("missed after reading it = %d, want 0", got)
	}
	for _, want := range []uint64{1, 2} {
		if d := <-slow.C; d.Seq != want {
			t.Fatalf("got seq %d, want %d: the buffer keeps the first decisions", d.Seq, want)
		}
	}
}

func TestRingKeepsTheLastN(t *testing.T) {
	b := NewBus(3, 1)
	if got := b.Recent(0); len(got) != 0 {
		t.Fatalf("empty bus: %v", got)
	}
	for range 2 {
		b.Publish(Decision{Type: TypeOutbox, Outcome: "published"})
	}
	if got := seqs(b.Recent(0)); !equal(got, []uint64{1, 2}) {
		t.Fatalf("before wrapping: %v", got)
	}
	for range 5 {
		b.Publish(Decision{Type: TypeOutbox, Outcome: "published"})
	}
	if got := seqs(b.Recent(0)); !equal(got, []uint64{5, 6, 7}) {
		t.Fatalf("after wrapping: %v, want the last 3 oldest first", got)
	}
	if got := seqs(b.Recent(5)); !equal(got, []uint64{6, 7}) {
		t.Fatalf("since 5: %v", got)
	}
	sub, backlog := b.Subscribe(6)
	defer sub.Close()
	if got := seqs(backlog); !equal(got, []uint64{7}) {
		t.Fatalf("backlog since 6: %v", got)
	}
}

func TestCopiesAreNumberedPerTypeAndEvent(t *testing.T) {
	b := NewBus(10, 10)
	var got []int
	for _, d := range []Decision{
		{Type: TypeCallback, EventID: "evt_1"}, {Type: TypeCallback, EventID: "evt_1"},
		{Type: TypeOutbox, EventID: "evt_1"}, {Type: TypeCallback, EventID: "evt_2"},
		{Type: TypeCallback, EventID: "evt_1"}, {Type: TypeIdempotency},
	} {
		got = append(got, b.Publish(d).Copy)
	}
	want := []int{1, 2, 1, 1, 3, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("copies = %v, want %v", got, want)
		}
	}
}

func TestCopyCounterForgetsTheOldest(t *testing.T) {
	c := newCopyCounter(2)
	c.next("a")
	c.next("b")
	c.next("c") // forgets a
	if n := c.next("b"); n != 2 {
		t.Fatalf("b = %d, want 2", n)
	}
	if n := c.next("a"); n != 1 {
		t.Fatalf("a after it was forgotten = %d, want 1", n)
	}
	if len(c.seen) != 2 {
		t.Fatalf("remembers %d keys, want 2", len(c.seen))
	}
}

func TestCloseEndsEverySubscription(t *testing.T) {
	b := NewBus(4, 4)
	s1, _ := b.Subscribe(0)
	s2, _ := b.Subscribe(0)
	s2.Close()
	s2.Close() // harmless
	b.Close()
	if _, ok := <-s1.C; ok {
		t.Fatal("s1 still open after the bus closed")
	}
	late, _ := b.Subscribe(0)
	if _, ok := <-late.C; ok {
		t.Fatal("a subscription to a closed bus must be closed")
	}
	late.Close()
	b.Publish(Decision{Type: TypeFence, Outcome: "refused"}) // still kept, nobody to send to
	if len(b.Recent(0)) != 1 {
		t.Fatal("a closed bus still keeps decisions")
	}
}

func TestNilSinksRecordNothing(t *testing.T) {
	Emit(nil, Decision{Type: TypeFence})
	var b *Bus
	Emit(b, Decision{Type: TypeFence}) // a typed nil in the interface: Record is nil-safe
}

func seqs(ds []Decision) []uint64 {
	var out []uint64
	for _, d := range ds {
		out = append(out, d.Seq)
	}
	return out
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
