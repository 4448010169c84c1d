package refunds

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/payclient"
)

func TestNoIsOnePerOrder(t *testing.T) {
	assert.Equal(t, "order-42-refund", No(42))
	assert.Equal(t, No(42), No(42), "a second request for one order is the same refund")
	assert.NotEqual(t, No(42), No(43))
}

func TestSendResult(t *testing.T) {
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"400 refused":            {&payclient.StatusError{Status: 400, Code: "refund_exceeds_payment"}, ResultRefused},
		"404 refused":            {&payclient.StatusError{Status: 404}, ResultRefused},
		"408 is not now, not no": {&payclient.StatusError{Status: 408}, ResultUnreachable},
		"429 is not now, not no": {&payclient.StatusError{Status: 429}, ResultUnreachable},
		"500":                    {&payclient.StatusError{Status: 500}, ResultUnreachable},
		"garbled answer":         {fmt.Errorf("%w: eof", payclient.ErrProtocol), ResultUnreachable},
	} {
		assert.Equal(t, c.want, sendResult(c.err), name)
	}
}

func TestRetryPolicyDoublesUpToItsMax(t *testing.T) {
	p := RetryPolicy{Min: 30 * time.Second, Max: 5 * time.Minute}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, p.After(n))
	}
	assert.Equal(t, []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute,
		5 * time.Minute}, got)
	assert.Equal(t, time.Hour, RetryPolicy{Min: time.Hour, Max: time.Hour}.After(1000), "no overflow past the max")
	huge := RetryPolicy{Min: time.Hour, Max: math.MaxInt64}
	for n := 1; n <= 200; n++ {
		assert.Positive(t, huge.After(n), "refusal %d: a Max near the largest duration must not overflow", n)
	}
	assert.Equal(t, time.Duration(math.MaxInt64), huge.After(200))
}
