package rabbitmq_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/rabbitmq"
)

// A broker that accepts the connection and never answers holds the AMQP handshake until its deadline
// (5 s without one on ctx). A cancelled ctx ends it at once: a shutdown does not wait the 5 s out (a
// newcomer's, 2026-12-06: SIGTERM took 3.8 s with SHUTDOWN_TIMEOUT=1s).
func TestDialEndsWhenItsContextIsCancelled(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// The client's protocol header ("AMQP" 0 0 9 1): it has connected and waits for the broker's
		// connection.start, which never comes.
		if _, err := io.ReadFull(c, make([]byte, 8)); err == nil {
			accepted <- c // held open, never answered
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := rabbitmq.Dial(ctx, "amqp://guest:guest@"+ln.Addr().String()+"/")
		done <- err
	}()
	c := <-accepted // Dial is in the handshake now
	t.Cleanup(func() { _ = c.Close() })
	cancel()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(3 * time.Second): // the handshake's own deadline is 5 s
		t.Fatal("Dial still waiting for the handshake 3 s after its context was cancelled")
	}
}
