// Package rabbitmq holds the RabbitMQ plumbing shared by the outbox relay and points-consumer.
package rabbitmq

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Heartbeat is the AMQP heartbeat every connection asks for (the broker may lower it). A connection that
// has read nothing since its handshake is given up three heartbeats after it (openDeadlineConn); once
// frames arrive, amqp091's own rule applies (nothing read for three half-heartbeats).
const Heartbeat = 10 * time.Second

// Dial opens a connection to url, bounded by ctx's deadline (or 5 s without one) and ended early if ctx
// is cancelled, the AMQP handshake included.
func Dial(ctx context.Context, url string) (*amqp.Connection, error) {
	return dial(ctx, url, Heartbeat)
}

func dial(ctx context.Context, url string, heartbeat time.Duration) (*amqp.Connection, error) {
	timeout := budget(ctx)
	stop := func() bool { return false }
	defer func() { stop() }()
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat:  heartbeat,
		Properties: clientProperties(),
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The deadline covers the AMQP handshake; amqp091 clears it once the connection is open.
			if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
				_ = c.Close()
				return nil, err
			}
			// amqp091 takes no context: a shutdown would wait out the whole timeout on a broker that
			// accepts and never answers. Cancelling ctx moves the deadline to now. (Should it fire just
			// after the handshake, the new connection dies, and ctx is done anyway.)
			stop = context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
			return &openDeadlineConn{Conn: c, silence: 3 * heartbeat}, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("dial amqp: %w", err)
	}
	return conn, nil
}

// ConnectionName is the name every connection gives the broker (AMQP's connection_name client
// property, which `rabbitmqctl list_connections pid client_properties` and the management UI show):
// the program and its pid. Without it the relay's, points-consumer's and any other Go client's
// connections looked alike, and closing one process's connections meant mapping peer ports by hand (a
// helper's finding, 2026-12-07).
var ConnectionName = fmt.Sprintf("%s (pid %d)", filepath.Base(os.Args[0]), os.Getpid())

func clientProperties() amqp.Table {
	p := amqp.NewConnectionProperties()
	p.SetClientConnectionName(ConnectionName)
	return p
}

// openDeadlineConn is the socket amqp091 is given. amqp091 clears the handshake's deadline once the
// connection is open, and sets a read deadline (three half-heartbeats) only when a frame arrives. A broker
// that stalled right after the handshake therefore held the connection for good: the relay's
// Channel() never returned, its events waited while the stall lasted, and orders' SIGTERM with them
// (a helper's finding, 2026-12-06). Here that clearing leaves a read deadline of three heartbeats
// instead, which the first frame moves on as amqp091 does. Writes keep no deadline: a broker under
// memory pressure pushes back on them on purpose (TCP flow control).
type openDeadlineConn struct {
	net.Conn
	silence time.Duration
}

func (c *openDeadlineConn) SetDeadline(t time.Time) error {
	if !t.IsZero() {
		return c.Conn.SetDeadline(t)
	}
	if err := c.Conn.SetWriteDeadline(time.Time{}); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(time.Now().Add(c.silence))
}

// Ping dials and closes a connection; it is the /readyz probe until a process holds a long-lived one.
// The close waits for the broker's answer until ctx's deadline (or 5 s without one).
func Ping(ctx context.Context, url string) error {
	conn, err := Dial(ctx, url)
	if err != nil {
		return err
	}
	return CloseWithin(conn, budget(ctx))
}

// budget is what is left of ctx's deadline, or 5 s without one: amqp091 takes no context.
func budget(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return 5 * time.Second
}

// CloseWithin closes conn and waits at most limit for the broker's close-ok. amqp091's Close waits for
// it until the connection's heartbeat gives up (about 12 s at Dial's 10 s heartbeat): behind a broker
// that had stalled, the relay's confirm wait ended at OUTBOX_CONFIRM_TIMEOUT and its reconnect came
// 11-13 s later, and orders' SIGTERM took 12 s with SHUTDOWN_TIMEOUT=3s (a helper's finding,
// 2026-12-06). The connection is closed on return whatever the error.
func CloseWithin(conn *amqp.Connection, limit time.Duration) error {
	return conn.CloseDeadline(time.Now().Add(limit))
}

// CheckURL refuses an AMQP_URL that no reconnect can make usable, so that the mistake stops the
// process at start instead of feeding the reconnect loop forever.
func CheckURL(url string) error {
	if _, err := amqp.ParseURI(url); err != nil {
		return fmt.Errorf("parse AMQP_URL: %w", err)
	}
	return nil
}
