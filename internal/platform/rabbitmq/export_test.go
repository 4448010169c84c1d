package rabbitmq

import (
	"reflect"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DialWithHeartbeat is Dial asking for heartbeat instead of Heartbeat, so that a test waits three short
// heartbeats. Tests only.
var DialWithHeartbeat = dial

// SocketType names the type of the socket conn reads from: amqp091's unexported field conn, "" if
// amqp091 has no such field any more. Tests only.
func SocketType(conn *amqp.Connection) string {
	field := reflect.ValueOf(conn).Elem().FieldByName("conn")
	if !field.IsValid() || field.IsNil() {
		return ""
	}
	return field.Elem().Type().String()
}
