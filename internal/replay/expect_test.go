package replay_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/replay"
)

func expect(t *testing.T, rec *replay.Recording) map[string][]replay.End {
	t.Helper()
	orders, err := rec.Orders()
	require.NoError(t, err)
	ends, err := rec.Expect(orders, "EUR")
	require.NoError(t, err)
	return ends
}

func TestExpectTheIncidentPaysOnce(t *testing.T) {
	ends := expect(t, incident(t))
	paid := replay.End{Status: "PAID", PaidEvent: true, Applied: 1}
	assert.Equal(t, map[string][]replay.End{"A": {paid}, "B": {paid}}, ends, "three copies apply once")
	assert.EqualValues(t, -2, paid.StockDelta(2))
	assert.EqualValues(t, 12, paid.Points(1250), "floor(amount/100)")
}

func TestExpectARefundBeforeItsSuccessRefundsTheOrder(t *testing.T) {
	rec := parse(t,
		line(0, body("r1", "p", "A", "REFUNDED", 2500)),
		line(10, body("s1", "p", "A", "SUCCESS", 2500)),
		line(20, body("s1", "p", "A", "SUCCESS", 2500)), // a resend adds nothing
		// Two partial refunds that add up, both before the SUCCESS.
		line(30, body("r2", "q", "B", "REFUNDED", 1000)),
		line(30, body("r3", "q", "B", "REFUNDED", 1500)),
		line(60, body("s2", "q", "B", "SUCCESS", 2500)),
		// One partial refund only: the order stays PAID.
		line(70, body("s3", "x", "C", "SUCCESS", 2500)),
		line(80, body("r4", "x", "C", "REFUNDED", 500)))
	ends := expect(t, rec)
	refunded := replay.End{Status: "REFUNDED", PaidEvent: true, RefundedEvent: true, RefundedCents: 2500, Applied: 1}
	assert.Equal(t, []replay.End{refunded}, ends["A"])
	assert.Equal(t, []replay.End{refunded}, ends["B"], "the two partial refunds race, but add up either way")
	assert.Equal(t, []replay.End{{Status: "PAID", PaidEvent: true, RefundedCents: 500, Applied: 1}}, ends["C"])
	assert.EqualValues(t, 0, refunded.StockDelta(2), "a refunded order gave its stock back")
	assert.EqualValues(t, 0, refunded.Points(2500), "and its points")
}

func TestExpectARefundAfterPaidAppliesIt(t *testing.T) {
	ends := expect(t, parse(t,
		line(0, body("s", "p", "A", "SUCCESS", 2500)),
		line(5, body("r", "p", "A", "REFUNDED", 2500)),
		line(5, body("r", "p", "A", "REFUNDED", 2500))))
	assert.Equal(t, []replay.End{{Status: "REFUNDED", PaidEvent: true, RefundedEvent: true, RefundedCents: 2500, Applied: 2}}, ends["A"])
}

func TestExpectDeclines(t *testing.T) {
	rec := parse(t,
		// A decline three times at once, on an order the pay flow has not even marked PAYING.
		line(0, body("f1", "p", "A", "FAILED", 1013)),
		line(0, body("f1", "p", "A", "FAILED", 1013)),
		line(0, body("f1", "p", "A", "FAILED", 1013)),
		// A SUCCESS, then the stale FAILED of an earlier attempt (reorder): the order stays PAID.
		line(10, body("s2", "q", "B", "SUCCESS", 1250)),
		line(50, body("f2", "q", "B", "FAILED", 1250)),
		// A FAILED and a SUCCESS of one payment racing: either may land first.
		line(60, body("f3", "x", "C", "FAILED", 1250)),
		line(60, body("s3", "x", "C", "SUCCESS", 1250)))
	ends := expect(t, rec)
	assert.Equal(t, []replay.End{{Status: "FAILED", Applied: 1}}, ends["A"])
	assert.Equal(t, []replay.End{{Status: "PAID", PaidEvent: true, Applied: 1}}, ends["B"])
	assert.ElementsMatch(t, []replay.End{
		{Status: "PAID", PaidEvent: true, Applied: 1},
		{Status: "FAILED", Applied: 1, RefundOwed: true}, // the SUCCESS came second: refund requested
	}, ends["C"], "a race has one end per arrival order")
	assert.EqualValues(t, 0, ends["A"][0].StockDelta(1))
}

func TestExpectMoneyThatDoesNotFitIsRejected(t *testing.T) {
	rec := parse(t,
		`{"format":"idemshop-replay/1","orders":{"A":{"amount_cents":2500}}}`,
		line(0, body("s1", "p", "A", "SUCCESS", 2400)),  // not the order's amount
		line(5, body("r1", "p", "A", "REFUNDED", 2600)), // more than the order
		line(9, `{"event_id":"s2","payment_id":"p","merchant_order_no":"A","status":"SUCCESS","amount_cents":2500,"currency":"USD"}`))
	assert.Equal(t, []replay.End{{Status: "PENDING"}}, expect(t, rec)["A"])
}

func TestExpectBoundsTheRaces(t *testing.T) {
	var lines []string
	for i := range 7 {
		lines = append(lines, line(0, body("e"+string(rune('a'+i)), "p", "A", "REFUNDED", 1)))
	}
	lines = append(lines, line(1, body("s", "p", "A", "SUCCESS", 100)))
	rec := parse(t, lines...)
	orders, err := rec.Orders()
	require.NoError(t, err)
	_, err = rec.Expect(orders, "EUR")
	assert.ErrorContains(t, err, "7 different events sent at once")
}

// The shop's rules on refunds and payments, as docs/callbacks.md gives them (a newcomer's recordings:
// the prediction broke each of them, and the replay reported violations against a correct shop).
func TestExpectFollowsTheRefundAndPaymentRules(t *testing.T) {
	rec := parse(t,
		// A: refunds past the amount paid: the total stops at the amount (alert=over_refund).
		line(0, body("sa", "p1", "A", "SUCCESS", 1000)),
		line(10, body("ra1", "p1", "A", "REFUNDED", 1000)),
		line(20, body("ra2", "p1", "A", "REFUNDED", 600)),
		// B: refunded in full, then FAILED, then the SUCCESS: nothing is left to ask back.
		line(30, body("rb", "p1", "B", "REFUNDED", 1000)),
		line(35, body("fb", "p1", "B", "FAILED", 1000)),
		line(40, body("sb", "p1", "B", "SUCCESS", 1000)),
		// C: another payment's refund before the SUCCESS is not the order's money.
		line(50, body("rc", "p2", "C", "REFUNDED", 1000)),
		line(60, body("sc", "p1", "C", "SUCCESS", 1000)),
		// D: once a FAILED told the order its payment, another payment's SUCCESS is refused.
		line(70, body("fd", "p2", "D", "FAILED", 1000)),
		line(75, body("sd", "p1", "D", "SUCCESS", 1000)),
		// E: another payment's refund, the SUCCESS, then the order's own refund: refunded once.
		line(80, body("re2", "p2", "E", "REFUNDED", 1000)),
		line(90, body("se", "p1", "E", "SUCCESS", 1000)),
		line(100, body("re1", "p1", "E", "REFUNDED", 1000)),
		// F: part refunded by its own payment before a FAILED, then the SUCCESS: the rest is owed.
		line(110, body("rf", "p1", "F", "REFUNDED", 400)),
		line(115, body("ff", "p1", "F", "FAILED", 1000)),
		line(120, body("sf", "p1", "F", "SUCCESS", 1000)))
	ends := expect(t, rec)
	assert.Equal(t, []replay.End{{Status: "REFUNDED", PaidEvent: true, RefundedEvent: true, RefundedCents: 1000, Applied: 2}}, ends["A"])
	assert.Equal(t, []replay.End{{Status: "FAILED", RefundedCents: 1000, Applied: 1}}, ends["B"], "no refund owed")
	assert.Equal(t, []replay.End{{Status: "PAID", PaidEvent: true, Applied: 1}}, ends["C"])
	assert.Equal(t, []replay.End{{Status: "FAILED", Applied: 1}}, ends["D"], "the other payment's SUCCESS changes nothing")
	assert.Equal(t, []replay.End{{Status: "REFUNDED", PaidEvent: true, RefundedEvent: true, RefundedCents: 1000, Applied: 2}}, ends["E"])
	assert.Equal(t, []replay.End{{Status: "FAILED", RefundedCents: 400, Applied: 1, RefundOwed: true}}, ends["F"])
}
