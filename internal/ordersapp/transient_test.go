package ordersapp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/config"
	"idemshop/internal/testenv"
)

// A product row held by a back-office transaction longer than DB_LOCK_TIMEOUT is a transient
// condition: the order's insert (its foreign key check waits on that row) times out, and the client is
// told to retry (503 unavailable, Retry-After), never 500. Nothing is written, so the retry with the
// same key runs, once the row is free.
func TestCreateOrderOnALockedProductIs503(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) { c.LockTimeout = 100 * time.Millisecond }})

	backOffice := env.DB.Begin()
	require.NoError(t, backOffice.Error)
	require.NoError(t, backOffice.Exec(`SELECT stock FROM products WHERE id = 1 FOR UPDATE`).Error)
	r := rp.createOrder(alice, "locked-1", `{"product_id":1,"quantity":1}`)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "unavailable", r.problem(t).Code)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Zero(t, count(t, env.DB, "orders", "user_id = (SELECT id FROM users WHERE name = 'alice')"))
	assert.Zero(t, count(t, env.DB, "idempotency_keys", "idempotency_key = 'locked-1'"))
	require.NoError(t, backOffice.Rollback().Error)

	again := rp.createOrder(alice, "locked-1", `{"product_id":1,"quantity":1}`)
	assert.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "user_id = (SELECT id FROM users WHERE name = 'alice')"))
}
