package bench

import (
	"strings"
	"testing"
	"time"
)

// TestOutboxTargetNeedsTheSetRate: a lag measured while the writers fell short of the set rate is not
// a figure at that rate, however low it is.
func TestOutboxTargetNeedsTheSetRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p99, achieved float64
		want          bool
	}{
		{p99: 30, achieved: 1999, want: true},
		{p99: 30, achieved: 1900, want: true},  // 95% of 2,000/s
		{p99: 30, achieved: 1899, want: false}, // below 95%: a lighter load than the target's
		{p99: 50, achieved: 2000, want: false}, // the target is p99 < 50 ms
		{p99: 80, achieved: 2000, want: false},
	} {
		if got := outboxTargetMet(c.p99, 50, c.achieved, 2000); got != c.want {
			t.Errorf("p99 %.0f ms at %.0f/s of 2000/s: met = %v, want %v", c.p99, c.achieved, got, c.want)
		}
	}
}

// TestRateShortNoteSaysHowShort: the note names a shortfall with its decimal (1,890 of 2,000/s is 94.5%,
// not "95%", which would read as the rule met) and says nothing when the rate was reached.
func TestRateShortNoteSaysHowShort(t *testing.T) {
	t.Parallel()
	if got := rateShortNote(1900, 2000); got != "" {
		t.Errorf("at 95%% of the rate: note %q, want none", got)
	}
	got := rateShortNote(1890, 2000)
	if !strings.Contains(got, "reached 94.5% of the set rate (< 95%)") || !strings.Contains(got, "not met") {
		t.Errorf("at 94.5%% of the rate: note %q", got)
	}
	if got := rateShortNote(1899.9, 2000); !strings.Contains(got, "reached 94.9% of the set rate") {
		t.Errorf("at 94.995%% of the rate: note %q, want the share cut to 94.9%%, never shown as 95.0%%", got)
	}
}

func TestAfterWriteCountsFromTheWritesEnd(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		written time.Time
		lag     time.Duration
		want    time.Duration
	}{
		{"delivered after the answer", sent.Add(3 * time.Millisecond), 5 * time.Millisecond, 2 * time.Millisecond},
		{"delivered before the answer", sent.Add(6 * time.Millisecond), 5 * time.Millisecond, 0},
		{"the write never returned", time.Time{}, 5 * time.Millisecond, 5 * time.Millisecond},
	} {
		if got := afterWrite(sent, c.written, c.lag); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
