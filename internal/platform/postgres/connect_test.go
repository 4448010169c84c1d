package postgres

import (
	"context"
	"net"
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

// A server that accepts the connection and never answers (paused, or a black hole in between) fails
// Open and EnsureDatabase once the connect timeout has passed (the URL's here, so that the test is
// short), instead of holding them forever: the context has no deadline, as a one-shot command's has
// none.
func TestOpenGivesUpOnAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() }) // held open, never answered
		}
	}()
	url := "postgres://postgres@" + ln.Addr().String() + "/shop?connect_timeout=1&sslmode=disable"
	done := make(chan error, 2)
	go func() { _, err := Open(context.Background(), url, Options{}); done <- err }()
	go func() { done <- EnsureDatabase(context.Background(), url) }()
	for range 2 {
		select {
		case err := <-done:
			require.Error(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("a connection to a server that never answers was not given up")
		}
	}
}
