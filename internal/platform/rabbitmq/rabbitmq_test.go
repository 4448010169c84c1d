package rabbitmq_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
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

// A broker that stalls right after the handshake (it has sent nothing since connection.open-ok): amqp091
// cleared the handshake's deadline and set a read deadline only when a frame came, so Channel() waited
// for good, and the outbox relay and orders' SIGTERM with it (a helper's finding, 2026-12-06). The
// connection now gives up three heartbeats after the handshake.
func TestAConnectionThatStallsAfterItsHandshakeGivesUp(t *testing.T) {
	t.Parallel()
	proxy, url := tcpproxy.ForURL(t, testenv.Find(t).AMQPURL)
	conn, err := rabbitmq.DialWithHeartbeat(t.Context(), url, time.Second)
	require.NoError(t, err)
	proxy.Stall()        // before the broker's first heartbeat (half a heartbeat after the handshake)
	t.Cleanup(proxy.Cut) // a Channel() that waits for good (the guard removed) is freed, and the test fails
	done := make(chan error, 1)
	go func() {
		_, err := conn.Channel()
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err, "no broker answered")
	case <-time.After(8 * time.Second): // three 1 s heartbeats, and slack
		t.Fatal("Channel() on a connection that stalled after its handshake waited for good")
	}
}

// Every connection Dial makes reads through an openDeadlineConn. The test above cannot fail without it
// every time: amqp091 sets a read deadline of its own when it reads the open-ok frame, and the handshake
// clears it or not depending on which of two goroutines runs first (1 in 5 runs under -race kept it,
// and gave up after amqp091's one and a half heartbeats). So the wiring is checked here, on amqp091's
// unexported field.
func TestDialGivesAmqpASocketThatGivesUpOnSilence(t *testing.T) {
	t.Parallel()
	conn, err := rabbitmq.Dial(t.Context(), testenv.Find(t).AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.Equal(t, "*rabbitmq.openDeadlineConn", rabbitmq.SocketType(conn),
		"an empty name: amqp091 no longer holds its socket in a field conn; look again")
}

// Every connection names its process to the broker (connection_name), so that an operator can tell the
// relay's and points-consumer's connections from each other and from other clients'.
func TestDialNamesTheConnectionAfterItsProcess(t *testing.T) {
	t.Parallel()
	conn, err := rabbitmq.Dial(t.Context(), testenv.Find(t).AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	assert.Equal(t, rabbitmq.ConnectionName, conn.Config.Properties["connection_name"])
	assert.Equal(t, fmt.Sprintf("rabbitmq.test (pid %d)", os.Getpid()), rabbitmq.ConnectionName)
}
