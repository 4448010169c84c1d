package orders_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/orders"
	"idemshop/internal/platform/pgtx"
	"idemshop/internal/testenv"
)

// Newest is the storefront's "my orders": the user's own orders only, newest first, at most limit,
// each with its product's name.
func TestNewestListsTheUsersOwnOrdersWithProductNames(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	repo, err := orders.NewRepository(env.DB)
	require.NoError(t, err)
	ctx := context.Background()
	for _, o := range []struct {
		user, product int64
		qty           int
	}{{1, 1, 2}, {2, 3, 1}, {1, 4, 5}, {1, 3, 1}} { // users 1 and 2 are the seed's alice and bob
		_, err := repo.Create(ctx, env.DB, o.user, orders.CreateRequest{ProductID: o.product, Quantity: o.qty})
		require.NoError(t, err)
	}

	lines, err := repo.Newest(ctx, 1, 2)
	require.NoError(t, err)
	require.Len(t, lines, 2, "limited")
	assert.Equal(t, "Exactly-Once T-shirt", lines[0].ProductName, "newest first")
	assert.Equal(t, 1, lines[0].Quantity)
	assert.EqualValues(t, 2000, lines[0].AmountCents)
	assert.Equal(t, "Fencing Token Sticker", lines[1].ProductName)
	assert.EqualValues(t, 5*300, lines[1].AmountCents)
	assert.Equal(t, "PENDING", lines[1].Status)

	all, err := repo.Newest(ctx, 1, 10)
	require.NoError(t, err)
	assert.Len(t, all, 3, "bob's order is not alice's")
	none, err := repo.Newest(ctx, 3, 10)
	require.NoError(t, err)
	assert.Empty(t, none)
}

// BeginAndLookup reads the order with its own column list (it is sent in a pgx batch, not through
// GORM): it must give what Lookup gives, every field, so that a column added to Order and forgotten
// there fails here. An unknown order is ErrOrderNotFound, as with Lookup.
func TestBeginAndLookupReadsWhatLookupReads(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	repo, err := orders.NewRepository(env.DB)
	require.NoError(t, err)
	ctx := context.Background()
	created, err := repo.Create(ctx, env.DB, 1, orders.CreateRequest{ProductID: 1, Quantity: 2})
	require.NoError(t, err)
	require.NoError(t, env.DB.Exec(`UPDATE orders SET payment_id = 'pay_1', refunded_cents = 7 WHERE id = ?`, created.ID).Error)

	want, err := repo.Lookup(ctx, env.DB, created.ID)
	require.NoError(t, err)
	var got orders.Order
	err = pgtx.Run(ctx, env.DB, func(tx *pgtx.Tx) error {
		var err error
		got, err = repo.BeginAndLookup(ctx, tx, created.ID)
		return err
	})
	require.NoError(t, err)
	assert.Equal(t, want, got)
	require.NotNil(t, got.PaymentID)
	assert.Equal(t, "pay_1", *got.PaymentID)
	assert.EqualValues(t, 7, got.RefundedCents)

	err = pgtx.Run(ctx, env.DB, func(tx *pgtx.Tx) error {
		_, err := repo.BeginAndLookup(ctx, tx, created.ID+1000)
		return err
	})
	require.ErrorIs(t, err, orders.ErrOrderNotFound)
}

// RecordRefund reports how far the order's refund events add up past its amount: 0 while they do not,
// the excess once they do, and 0 for events that arrive after the reconciler set the whole amount
// refunded (RecordFullRefund), which they make up rather than exceed.
func TestRecordRefundReportsEventsPastTheAmount(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	repo, err := orders.NewRepository(env.DB)
	require.NoError(t, err)
	ctx := context.Background()
	newOrder := func() orders.Order {
		o, err := repo.Create(ctx, env.DB, 1, orders.CreateRequest{ProductID: 1, Quantity: 1})
		require.NoError(t, err)
		return o
	}
	record := func(id int64, event string, cents int64) (bool, int64) {
		fresh, over, err := repo.RecordRefund(ctx, env.DB, id, event, "pay_1", cents)
		require.NoError(t, err)
		return fresh, over
	}

	o := newOrder()
	part := o.AmountCents*2/3 + 1
	fresh, over := record(o.ID, "e1", part)
	assert.True(t, fresh)
	assert.Zero(t, over)
	fresh, over = record(o.ID, "e2", part)
	assert.True(t, fresh)
	assert.Equal(t, 2*part-o.AmountCents, over)
	fresh, over = record(o.ID, "e2", part)
	assert.False(t, fresh, "a resent event")
	assert.Zero(t, over, "a resent event reports nothing")
	refunded, _, err := repo.Refunded(ctx, env.DB, o.ID)
	require.NoError(t, err)
	assert.Equal(t, o.AmountCents, refunded, "the total stops at the amount")

	late := newOrder()
	require.NoError(t, repo.RecordFullRefund(ctx, env.DB, late.ID))
	fresh, over = record(late.ID, "late-1", late.AmountCents)
	assert.True(t, fresh)
	assert.Zero(t, over, "the events make up the total the reconciler set")
}
