package rabbitmq

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Where amqp091 clears the handshake's deadline, openDeadlineConn leaves a read deadline of three
// heartbeats, so a broker that says nothing after the handshake is given up; a deadline amqp091 sets
// itself (the close's) is kept as it is.
func TestOpenDeadlineConnGivesUpOnASilentPeer(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	c := &openDeadlineConn{Conn: client, silence: 200 * time.Millisecond}

	require.NoError(t, c.SetDeadline(time.Now().Add(time.Hour))) // the handshake's
	require.NoError(t, c.SetDeadline(time.Time{}))               // amqp091's, at connection.open-ok
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case err := <-read:
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a read from a silent peer gives up")
	case <-time.After(5 * time.Second):
		_ = client.Close() // frees the read
		t.Fatal("a read from a silent peer waited for good")
	}

	// Writes keep no deadline: a write the peer takes goes through, however long after.
	go func() { _, _ = server.Read(make([]byte, 1)) }()
	time.Sleep(300 * time.Millisecond) // past the read deadline
	_, err := c.Write([]byte{1})
	assert.NoError(t, err)

	require.NoError(t, c.SetDeadline(time.Now())) // amqp091's CloseDeadline: kept as it is
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
}
