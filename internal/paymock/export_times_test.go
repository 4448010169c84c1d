package paymock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// at_ms never goes back: an attempt due together with one that was moved a millisecond later moves
// with it (seen in a workshop: "at_ms 204 is before the previous line's 205").
func TestSendingTimesNeverDecrease(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	got := sendingTimes([]time.Time{ms(0), ms(0), ms(0.4), ms(0.4), ms(0.6), ms(20), ms(20)})
	assert.Equal(t, []int64{0, 0, 1, 1, 2, 20, 20}, got)
	assert.Empty(t, sendingTimes(nil))
}
