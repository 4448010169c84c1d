package orders_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/orders"
)

// The whole table, pair by pair: exactly the transitions of the issue are legal, nothing else.
func TestTransitionTable(t *testing.T) {
	t.Parallel()
	P, Y, D, F, C, R, X := orders.StatusPending, orders.StatusPaying, orders.StatusPaid, orders.StatusFailed,
		orders.StatusCancelled, orders.StatusRefundRequired, orders.StatusRefunded
	legal := map[[2]orders.Status]bool{
		{P, Y}: true, {Y, D}: true, {P, D}: true, {Y, F}: true, {P, F}: true, {P, C}: true, {Y, C}: true,
		{D, R}: true, {R, X}: true, {D, X}: true,
	}
	for _, from := range orders.Statuses() {
		for _, to := range orders.Statuses() {
			assert.Equal(t, legal[[2]orders.Status{from, to}], orders.CanTransition(from, to), "%s → %s", from, to)
		}
	}
	assert.Empty(t, orders.AllowedFrom(P), "nothing moves back to PENDING")
}
