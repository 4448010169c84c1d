package lab_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
)

// The preflight's messages name the URL they tried without its password: loadtest printed
// PAYMENTS_URL's and ORDERS_URL's to the terminal and the CI log (a helper's finding, 2026-12-07).
func TestPreflightMessagesHideURLPasswords(t *testing.T) {
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(platform.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := closed.Addr().String()
	require.NoError(t, closed.Close())

	e := &lab.Env{
		HTTP:        platform.Client(),
		OrdersURL:   "http://shop:s3cret-o@" + down,
		PaymentsURL: strings.Replace(platform.URL, "http://", "http://pay:s3cret-p@", 1),
	}
	ctx := context.Background()
	err = e.CheckPlatformAdmin(ctx)
	require.ErrorIs(t, err, lab.ErrPlatformAdmin)
	assert.Contains(t, err.Error(), "http://pay:***@127.0.0.1")
	assert.NotContains(t, err.Error(), "s3cret")

	err = e.CheckServices(ctx, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "orders at http://shop:***@"+down)
	assert.NotContains(t, err.Error(), "s3cret")
}
