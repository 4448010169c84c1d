package points_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

// Debit is the ledger's other half (rewards calls it inside its own transaction): it never takes a
// balance below zero, and a business key debits at most once; a refused debit writes nothing.
func TestDebitNeverBelowZeroAndOncePerKey(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	l, err := points.NewLedger(env.DB)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.Apply(ctx, []points.Credit{{BizID: points.BizIDOrderPaid(1), UserID: 1, Delta: 25, Reason: points.ReasonOrderPaid}})
	require.NoError(t, err)

	debit := func(user int64, key string, amount int64) (int64, error) {
		var balance int64
		err := env.DB.Transaction(func(tx *gorm.DB) error {
			var err error
			balance, err = points.Debit(ctx, tx, user, key, amount, "test")
			return err
		})
		return balance, err
	}
	balance, err := debit(1, "redeem:a", 10)
	require.NoError(t, err)
	assert.EqualValues(t, 15, balance)

	_, err = debit(1, "redeem:a", 10)
	assert.ErrorIs(t, err, postgres.ErrDuplicate, "the same key debits once")
	_, err = debit(1, "redeem:b", 16)
	assert.ErrorIs(t, err, points.ErrInsufficientBalance, "15 points cannot pay 16")
	_, err = debit(2, "redeem:c", 1)
	assert.ErrorIs(t, err, points.ErrInsufficientBalance, "user 2 has no account")

	assert.Equal(t, ledgerState{Rows: 2, Distinct: 2, Sum: 15, Balances: 15}, state(t, env),
		"the credit and debit a: the refused ones left nothing")
}
