// Package rabbitmq holds the RabbitMQ plumbing shared by the outbox relay and points-consumer.
package rabbitmq

import (
	"context"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dial opens a connection to url, bounded by ctx's deadline (or 5 s without one) and ended early if ctx
// is cancelled, the AMQP handshake included.
func Dial(ctx context.Context, url string) (*amqp.Connection, error) {
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	stop := func() bool { return false }
	defer func() { stop() }()
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat: 10 * time.Second,
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
			return c, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("dial amqp: %w", err)
	}
	return conn, nil
}

// Ping dials and closes a connection; it is the /readyz probe until a process holds a long-lived one.
func Ping(ctx context.Context, url string) error {
	conn, err := Dial(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close()
}

// CheckURL refuses an AMQP_URL that no reconnect can make usable, so that the mistake stops the
// process at start instead of feeding the reconnect loop forever.
func CheckURL(url string) error {
	if _, err := amqp.ParseURI(url); err != nil {
		return fmt.Errorf("parse AMQP_URL: %w", err)
	}
	return nil
}
