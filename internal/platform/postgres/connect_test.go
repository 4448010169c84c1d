package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A DATABASE_URL without connect_timeout gets DefaultConnectTimeout; one with it keeps its own.
func TestParseURLBoundsEveryConnection(t *testing.T) {
	t.Parallel()
	cfg, err := parseURL("postgres://postgres@127.0.0.1:5432/shop")
	require.NoError(t, err)
	assert.Equal(t, DefaultConnectTimeout, cfg.ConnectTimeout)
	cfg, err = parseURL("postgres://postgres@127.0.0.1:5432/shop?connect_timeout=3")
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, cfg.ConnectTimeout)
}
