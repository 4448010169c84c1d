package callback

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/orders"
	"idemshop/internal/platform/problem"
)

func TestAlready(t *testing.T) {
	cases := []struct {
		cb     string
		status orders.Status
		want   bool
	}{
		{StatusSuccess, orders.StatusPending, false},
		{StatusSuccess, orders.StatusPaying, false},
		{StatusSuccess, orders.StatusPaid, true},
		{StatusSuccess, orders.StatusRefundRequired, true},
		{StatusSuccess, orders.StatusRefunded, true},
		{StatusSuccess, orders.StatusFailed, false}, // a success after a failure owes a refund: not a resend
		{StatusFailed, orders.StatusFailed, true},
		{StatusFailed, orders.StatusPaid, false},
		{StatusRefunded, orders.StatusRefunded, false}, // a further refund is recorded: apply decides
		{StatusRefunded, orders.StatusPaid, false},
		{"UNKNOWN", orders.StatusPaid, false},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, already(c.cb, c.status), "%s on a %s order", c.cb, c.status)
	}
}

func TestValidate(t *testing.T) {
	good := Callback{EventID: "evt_1", PaymentID: "pay_1", MerchantOrderNo: "42", Status: StatusSuccess}
	id, err := validate(good)
	assert.NoError(t, err)
	assert.Equal(t, int64(42), id)

	// The detail says what is wrong: the sender reads it in its delivery log.
	for name, tc := range map[string]struct {
		cb     Callback
		detail string
	}{
		"no event id":        {Callback{PaymentID: "pay_1", MerchantOrderNo: "42", Status: StatusSuccess}, "the callback is invalid: missing event_id"},
		"no payment id":      {Callback{EventID: "evt_1", MerchantOrderNo: "42", Status: StatusSuccess}, "the callback is invalid: missing payment_id"},
		"unknown status":     {Callback{EventID: "evt_1", PaymentID: "pay_1", MerchantOrderNo: "42", Status: "PENDING"}, `the callback is invalid: unknown status "PENDING": want SUCCESS, FAILED or REFUNDED`},
		"order no not an id": {Callback{EventID: "evt_1", PaymentID: "pay_1", MerchantOrderNo: "42-x", Status: StatusSuccess}, `the callback is invalid: merchant_order_no "42-x" is not an order id`},
		"order no zero":      {Callback{EventID: "evt_1", PaymentID: "pay_1", MerchantOrderNo: "0", Status: StatusSuccess}, `merchant_order_no "0" is not an order id`},
	} {
		_, err := validate(tc.cb)
		assert.True(t, errors.Is(err, ErrInvalidCallback), "%s: %v", name, err)
		var p *problem.Error
		if assert.True(t, errors.As(err, &p), name) {
			assert.Contains(t, p.Detail, tc.detail, name)
		}
	}
}

func TestAmountMatches(t *testing.T) {
	o := orders.Order{AmountCents: 1000, Currency: "EUR"}
	cases := []struct {
		name string
		cb   Callback
		want bool
	}{
		{"success, same amount", Callback{Status: StatusSuccess, AmountCents: 1000, Currency: "EUR"}, true},
		{"success, other amount", Callback{Status: StatusSuccess, AmountCents: 999, Currency: "EUR"}, false},
		{"success, other currency", Callback{Status: StatusSuccess, AmountCents: 1000, Currency: "USD"}, false},
		{"failed, same amount", Callback{Status: StatusFailed, AmountCents: 1000, Currency: "EUR"}, true},
		{"refund, partial", Callback{Status: StatusRefunded, AmountCents: 1, Currency: "EUR"}, true},
		{"refund, full", Callback{Status: StatusRefunded, AmountCents: 1000, Currency: "EUR"}, true},
		{"refund, more than paid", Callback{Status: StatusRefunded, AmountCents: 1001, Currency: "EUR"}, false},
		{"refund, zero", Callback{Status: StatusRefunded, AmountCents: 0, Currency: "EUR"}, false},
		{"refund, other currency", Callback{Status: StatusRefunded, AmountCents: 10, Currency: "USD"}, false},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, amountMatches(c.cb, o), c.name)
	}
}

func TestCleanedMakesTextStorable(t *testing.T) {
	cb := Callback{EventID: "evt\x00_1", PaymentID: "pay\xff", MerchantOrderNo: "42", Status: StatusSuccess, Currency: "EUR"}.cleaned()
	for _, v := range []string{cb.EventID, cb.PaymentID, cb.MerchantOrderNo, cb.Status, cb.Currency} {
		assert.NotContains(t, v, "\x00")
		assert.True(t, utf8.ValidString(v), "%q", v)
	}
	assert.Equal(t, "42", cb.MerchantOrderNo)
}
