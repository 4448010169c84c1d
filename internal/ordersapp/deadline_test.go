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
	rp := newReplica(t, env, replicaOpts{db: db, cfg: func(c *config.Orders) { c.HTTP.WriteTimeout = 500 * time.Millisecond }})
	id, _ := rp.newOrder(alice, 1, 1) // the pool's one connection is open now
	t.Cleanup(proxy.Cut)              // runs first: a request still hanging would hold the server's Close

	proxy.Stall()
	answered := make(chan response, 1)
	go func() { answered <- rp.call(http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), alice, "", nil) }()
	var r response
	select {
	case r = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request was never answered")
	}
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "unavailable", r.problem(t).Code)

	again := rp.call(http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), alice, "", nil)
	assert.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
}
