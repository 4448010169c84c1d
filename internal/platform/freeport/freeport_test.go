package freeport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/freeport"
)

// The ports come from below the kernel's ephemeral range: one from inside it was taken, before
// points-consumer bound it, as the local port of an outgoing connection, and every start of the consumer
// failed with "address already in use" for the rest of soak-ci's run (2026-12-06).
func TestAddrIsBelowTheEphemeralRange(t *testing.T) {
	lo, hi, ok := freeport.BelowEphemeral()
	if !ok {
		t.Skip("this kernel's ephemeral range leaves no room below it; Addr falls back to port 0")
	}
	seen := map[string]bool{}
	for range 5 {
		addr, err := freeport.Addr()
		require.NoError(t, err)
		host, p, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", host)
		port, err := strconv.Atoi(p)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, port, lo)
		assert.LessOrEqual(t, port, hi)
		assert.False(t, seen[addr], "a port handed out twice in a row: %s", addr)
		seen[addr] = true
	}
}
