package node

import (
	"slices"
	"strconv"
	"testing"

	"idemshop/internal/platform/freeport"
)

// rabbitmqctl listens too while it talks to a node; left to itself it takes 35672–35682, inside the
// kernel's ephemeral range, and on every interface. The node's environment gives it one port from
// below that range, its own (not the node's AMQP or distribution port), on loopback.
func TestRabbitmqctlListensOnAPortBelowTheEphemeralRange(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the RabbitMQ scripts installed (nothing is started)")
	}
	r, err := NewRabbit(t.TempDir(), "idemshop_ctl_port_test")
	if err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(r.CtlDistPort)
	for _, kv := range []string{"RABBITMQ_CTL_DIST_PORT_MIN=" + p, "RABBITMQ_CTL_DIST_PORT_MAX=" + p,
		"RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"} {
		if !slices.Contains(r.env, kv) {
			t.Errorf("the node's environment lacks %s", kv)
		}
	}
	if r.CtlDistPort == r.Port || r.CtlDistPort == r.DistPort {
		t.Errorf("rabbitmqctl's port %d is one of the node's (AMQP %d, distribution %d)", r.CtlDistPort, r.Port, r.DistPort)
	}
	if lo, hi, ok := freeport.BelowEphemeral(); ok && (r.CtlDistPort < lo || r.CtlDistPort > hi) {
		t.Errorf("rabbitmqctl's port %d is outside %d-%d, below the ephemeral range", r.CtlDistPort, lo, hi)
	}
}
