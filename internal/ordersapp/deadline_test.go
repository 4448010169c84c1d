package ordersapp_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/config"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// A database connection that stops answering without closing (half-open: the proxy's Stall) ends a
// request at HTTP_WRITE_TIMEOUT with 503 unavailable, and the next request, on a new connection, is
// answered. It hung for good: the server's statement timeout never starts on a statement that does not
// reach it (a newcomer's finding, 2026-12-06). The replica's server has the binaries' timeouts: the work
// ends before the write deadline, whose client otherwise saw the connection close without the 503 (and
// Go's client sent the GET again on a new connection, answered 200; a helper's finding, 2026-12-06).
func TestARequestOnAHalfOpenDatabaseConnectionEndsAtTheWriteTimeout(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	proxy, viaProxy := tcpproxy.ForURL(t, env.DatabaseURL)
	db, err := postgres.Open(context.Background(), viaProxy, postgres.Options{LockTimeout: 2 * time.Second,
		StatementTimeout: 10 * time.Second, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = postgres.Close(db) })
	// A work time of 1.5 s: the next request's new connection is dialed inside it (375 ms was too short
	// for that under a loaded suite, 2026-12-07: 503 again).
	rp := newReplica(t, env, replicaOpts{db: db, cfg: func(c *config.Orders) { c.HTTP.WriteTimeout = 2 * time.Second }})
	id, _ := rp.newOrder(alice, 1, 1) // the pool's one connection is open now
	t.Cleanup(proxy.Cut)              // runs first: a request still hanging would hold the server's Close

	proxy.Stall()
	r := answeredWithin(t, 10*time.Second, func() response {
		return rp.call(http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), alice, "", nil)
	})
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "unavailable", r.problem(t).Code)

	again := rp.call(http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), alice, "", nil)
	assert.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
}

// A redeem's work runs on after its client goes away (a double-click abandons the first request), and
// was bounded by FORM_TOKEN_INFLIGHT_LEASE (at least 5 s) alone, not by the request's work time: one
// that waited on a locked points account past HTTP_WRITE_TIMEOUT wrote its answer to a closed
// connection, and its client got none (a helper's finding, 2026-12-06). It ends within the request's
// work time now, with 503, and gives its token back: the retry redeems once the account is free.
func TestARedeemEndsWithinTheRequestsWorkTime(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{LockTimeout: 10 * time.Second}) // the lock wait outlasts the work time
	credit(t, env.DB, redeemAlice, 100)
	rp := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) {
		c.HTTP.WriteTimeout = time.Second
		c.FormTokenInFlightLease = 10 * time.Second
	}})
	tok := rp.issueFormToken("alice-token")
	locker := env.DB.Begin() // another transaction holds alice's account
	require.NoError(t, locker.Exec(`SELECT 1 FROM points_accounts WHERE user_id = ? FOR UPDATE`, redeemAlice).Error)
	t.Cleanup(func() { locker.Rollback() })

	r := answeredWithin(t, 15*time.Second, func() response {
		r, err := rp.redeemAsync("alice-token", tok, "coupon-10")
		if err != nil {
			r = response{Body: []byte(err.Error())} // no answer: Status 0
		}
		return r
	})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "answered within the work time: %s", r.Body)
	assert.Equal(t, "unavailable", r.problem(t).Code)
	assertRedeemed(t, env.DB, redeemAlice, 0, 100)

	require.NoError(t, locker.Rollback().Error)
	again := rp.redeem("alice-token", tok, "coupon-10")
	assert.Equal(t, http.StatusCreated, again.Status, "the token was given back: %s", again.Body)
	assertRedeemed(t, env.DB, redeemAlice, 1, 90)
}

// answeredWithin returns send's answer, sent from another goroutine, or fails the test once within has
// passed without one: a request that hangs must fail it, not hold it until the suite's timeout.
func answeredWithin(t *testing.T, within time.Duration, send func() response) response {
	t.Helper()
	answered := make(chan response, 1)
	go func() { answered <- send() }()
	select {
	case r := <-answered:
		return r
	case <-time.After(within):
		t.Fatalf("no answer within %s", within)
		return response{}
	}
}
