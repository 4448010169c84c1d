package orders_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/orders"
	"idemshop/internal/platform/problem"
)

func TestCreateRequestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		req    orders.CreateRequest
		ok     bool
		detail string
	}{
		{"minimum", orders.CreateRequest{ProductID: 1, Quantity: 1}, true, ""},
		{"maximum", orders.CreateRequest{ProductID: 1, Quantity: 10}, true, ""},
		// Absent reads as 0: the detail does not say "got 0" to a client that sent none.
		{"zero quantity", orders.CreateRequest{ProductID: 1, Quantity: 0}, false, "quantity is required and must be between 1 and 10"},
		{"eleven", orders.CreateRequest{ProductID: 1, Quantity: 11}, false, "quantity must be between 1 and 10, got 11"},
		{"negative", orders.CreateRequest{ProductID: 1, Quantity: -1}, false, "got -1"},
		{"no product", orders.CreateRequest{Quantity: 1}, false, "product_id is required"},
		{"negative product", orders.CreateRequest{ProductID: -4, Quantity: 1}, false, "product_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			var pe *problem.Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "validation_failed", pe.Code)
			assert.Equal(t, problem.KindInvalid, pe.Kind)
			assert.Contains(t, pe.Detail, tc.detail)
		})
	}
}

func TestAmountIsIntegerAndRefusesOverflow(t *testing.T) {
	t.Parallel()
	a, err := orders.Amount(1250, 3)
	require.NoError(t, err)
	assert.EqualValues(t, 3750, a)
	_, err = orders.Amount(math.MaxInt64/2, 3)
	assert.Error(t, err)
	_, err = orders.Amount(-1, 1)
	assert.Error(t, err)
}

func TestParseIDAcceptsOneSpellingOnly(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1": 1, "42": 42, "9223372036854775807": math.MaxInt64} {
		got, ok := orders.ParseID(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "01", "+1", "-1", " 1", "1 ", "1e3", "0x1", "9223372036854775808", "abc"} {
		_, ok := orders.ParseID(in)
		assert.False(t, ok, in)
	}
}
