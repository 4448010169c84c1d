package points

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"idemshop/internal/platform/rabbitmq"
)

// checkTopology declares the topology again every TopologyCheck, on channels of its own (a failed
// declare closes its channel; the consuming one must stay open), and raises an alert for each exchange
// or queue that was missing. Declaring again also binds the queue again (a binding cannot be looked
// up). A session declares it once, when it connects; a DLX or DLQ an operator deleted afterwards
// stayed missing until the consumer reconnected, and RabbitMQ dropped every dead letter meanwhile: a
// quorum queue dead-letters at most once, and a dead letter it cannot route is gone (a helper's
// finding, 2026-12-06). The dead letters of the gap are lost still; the alert says so, and the
// reconciler's points check (docs/points.md, "Events the broker lost") names their orders.
func (c *Consumer) checkTopology(conn *amqp.Connection) {
	missing, err := rabbitmq.Missing(conn, c.cfg.Topology)
	c.alertMissing(missing)
	if err == nil {
		err = declareOnItsOwnChannel(conn, c.cfg.Topology)
	}
	if err != nil {
		c.logger.Warn("topology check failed; the next check tries again", "err", err)
	}
}

// declareOnItsOwnChannel declares t on a channel opened for it.
func declareOnItsOwnChannel(conn *amqp.Connection, t rabbitmq.Topology) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	return rabbitmq.Declare(ch, t)
}

// declare declares the topology on the session's channel ch, and raises topology_missing for what a
// session after the process's first finds gone (rabbitmq.Redeclare). Only the session's goroutine
// calls it.
func (c *Consumer) declare(conn *amqp.Connection, ch *amqp.Channel) error {
	missing, err := rabbitmq.Redeclare(conn, ch, c.cfg.Topology, c.declared)
	c.alertMissing(missing)
	if err != nil {
		return err
	}
	c.declared = true
	return nil
}

// alertMissing raises topology_missing for the names in missing, if any.
func (c *Consumer) alertMissing(missing []string) {
	if len(missing) > 0 {
		c.logger.Error("ALERT: part of the topology was deleted while the consumer ran; declared again. Dead letters of the gap were dropped by the broker",
			"alert", "topology_missing", "missing", missing)
	}
}
