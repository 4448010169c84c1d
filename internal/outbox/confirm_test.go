package outbox_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/events"
	"idemshop/internal/outbox"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/testenv"
)

// The broker nacks a batch (a second queue bound for the same routing key is full and rejects
// publishes: x-overflow reject-publish, which RabbitMQ reports as basic.nack). Every row must stay
// pending, with attempts and last_error recorded, and be published once the broker takes them.
// Guards the relay-confirm-wait and relay-nack-pending mutants (internal/mutants).
func TestRelayLeavesNackedRowsPending(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	full := declareWithAFullQueue(t, env, top)
	ids := insertBatch(t, env.DB, 3)
	relay := startRelay(t, env, env.AMQPURL, top, nil)

	waitFor(t, 10*time.Second, func() bool { return minAttempts(t, env.DB, ids) >= 1 }, "first attempt")
	for _, id := range ids {
		r := row(t, env.DB, id)
		require.Nil(t, r.PublishedAt, "row %d was marked published although the broker nacked it: it is lost", id)
		assert.Contains(t, r.LastError, "not confirmed by the broker")
	}
	waitFor(t, 10*time.Second, func() bool { return minAttempts(t, env.DB, ids) >= 3 }, "retried")
	for _, id := range ids {
		assert.Nil(t, row(t, env.DB, id).PublishedAt, "row %d marked published after a nack", id)
	}
	assert.Equal(t, 0, gathered(relay, "idemshop_outbox_published_total"), "a nacked row is not counted as published")

	// The operator removes the full queue: the broker takes the next attempt.
	broker(t, env, func(ch *amqp.Channel) error { _, err := ch.QueueDelete(full, false, false, false); return err })
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published once the broker takes them")
	for _, id := range ids {
		assert.Empty(t, row(t, env.DB, id).LastError)
	}
	assert.Equal(t, 3, gathered(relay, "idemshop_outbox_published_total"))
}

// The relay publishes persistent messages: the quorum queue keeps every message on disk anyway, but a
// message marked transient is not one the relay may count as the broker's responsibility (a classic
// queue, or a policy that changes the queue type, would lose it in a broker restart after its row was
// marked published). Each names its event in the type property too, which a dead letter or a republish
// keeps where the routing key is lost. Guards the relay-persistent and relay-event-type mutants.
func TestRelayPublishesPersistentMessages(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	broker(t, env, func(ch *amqp.Channel) error { return rabbitmq.Declare(ch, top) })
	ids := insertBatch(t, env.DB, 2)
	startRelay(t, env, env.AMQPURL, top, nil)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published")

	var got []amqp.Delivery
	broker(t, env, func(ch *amqp.Channel) error {
		for range ids {
			d, ok, err := ch.Get(top.Queue, true)
			if err != nil {
				return err
			}
			if ok {
				got = append(got, d)
			}
		}
		return nil
	})
	require.Len(t, got, len(ids), "both rows' messages are in the queue")
	for _, d := range got {
		assert.Equal(t, amqp.Persistent, d.DeliveryMode, "message %s", d.MessageId)
		assert.Equal(t, d.RoutingKey, d.Type, "the event's name in the type property, message %s", d.MessageId)
		assert.Equal(t, "application/json", d.ContentType)
	}
}

// Health is orders' /readyz outbox check: it must say whether events get through, not whether the broker
// answers. Here the broker answers throughout and nacks every publish (a full queue bound for the same
// routing key); Health must name that until the rows are published, and be nil after.
// Guards the relay-health-fails mutant (internal/mutants).
func TestRelayHealthSaysWhetherEventsGetThrough(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	full := declareWithAFullQueue(t, env, top)
	ids := insertBatch(t, env.DB, 2)
	r, err := outbox.NewRelay(env.DB, relayConfig(env.AMQPURL, top), logger(), prometheus.NewRegistry())
	require.NoError(t, err)
	require.ErrorContains(t, r.Health(), "not drained the outbox yet", "before the relay runs")
	runInBackground(t, r.Run)

	waitFor(t, 10*time.Second, func() bool { return minAttempts(t, env.DB, ids) >= 2 }, "nacked twice")
	waitFor(t, 5*time.Second, func() bool {
		err := r.Health()
		return err != nil && strings.Contains(err.Error(), "not confirmed (nack or channel closed)")
	}, "Health names the nacks") // it did after the second nack, just now
	assert.Equal(t, int64(2), pending(t, env.DB), "nothing published while the broker nacks")

	broker(t, env, func(ch *amqp.Channel) error { _, err := ch.QueueDelete(full, false, false, false); return err })
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published once the broker takes them")
	waitFor(t, 10*time.Second, func() bool { return r.Health() == nil }, "healthy once a drain went through")
}

// declareWithAFullQueue declares top and a second queue bound for its routing key that is full and
// rejects publishes (x-overflow reject-publish, which RabbitMQ reports as basic.nack), and returns that
// queue's name: the broker nacks every publish until it is deleted.
func declareWithAFullQueue(t *testing.T, env *testenv.Env, top rabbitmq.Topology) string {
	t.Helper()
	full := env.Queue("outbox.full")
	broker(t, env, func(ch *amqp.Channel) error {
		if err := rabbitmq.Declare(ch, top); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(full, true, false, false, false, amqp.Table{
			"x-max-length": 0, "x-overflow": "reject-publish",
		}); err != nil {
			return err
		}
		return ch.QueueBind(full, top.RoutingKey, top.Exchange, false, nil)
	})
	return full
}

// The broker takes a batch but its confirms never reach the relay (a proxy holds everything the broker
// sends). After ConfirmTimeout every row must stay pending, with attempts and last_error recorded: the
// relay cannot know whether the broker has them. Once the confirms flow again the rows are published;
// the broker then holds two copies of each (at least once, never at most once).
// Guards the relay-confirm-wait and relay-no-confirm-ack mutants (internal/mutants).
func TestRelayLeavesRowsWhoseConfirmNeverCamePending(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env)
	proxy, viaProxy := newStallProxy(t, env.AMQPURL)
	reg := prometheus.NewRegistry()
	cfg := relayConfig(viaProxy, top)
	cfg.ConfirmTimeout = 300 * time.Millisecond
	r, err := outbox.NewRelay(env.DB, cfg, logger(), reg)
	require.NoError(t, err)
	runInBackground(t, r.Run)
	// Registered after the relay, so it runs first: a held connection.close-ok would block the relay's
	// shutdown.
	t.Cleanup(proxy.Close)

	insertPaid(t, env.DB, 1, 1)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "relay connected and published")

	proxy.Hold() // from now on the broker's confirms (and everything else it sends) do not reach the relay
	ids := insertBatch(t, env.DB, 3)
	waitFor(t, 10*time.Second, func() bool { return minAttempts(t, env.DB, ids) >= 1 }, "first attempt")
	for _, id := range ids {
		r := row(t, env.DB, id)
		require.Nil(t, r.PublishedAt, "row %d was marked published without the broker's confirm", id)
		assert.Contains(t, r.LastError, "no confirm")
	}
	assert.Equal(t, 1, gathered(reg, "idemshop_outbox_published_total"), "an unconfirmed row is not counted")

	proxy.Release()
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published once the confirms flow")
	for _, id := range ids {
		r := row(t, env.DB, id)
		assert.Equal(t, 2, r.Attempts, "row %d: one unconfirmed attempt, then one confirmed", id)
		assert.Empty(t, r.LastError)
	}
	assert.Equal(t, 4, gathered(reg, "idemshop_outbox_published_total"))
	waitCount(t, 5*time.Second, 1+2*3, func() int { return queueDepth(t, env, top.Queue) },
		"the broker kept the unconfirmed copies too, and no more")
}

// insertBatch writes n order.paid rows in one transaction (so that the relay takes them in one batch)
// and returns their ids.
func insertBatch(t *testing.T, db *gorm.DB, n int) []int64 {
	t.Helper()
	var eventIDs []string
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		for i := range n {
			ev := events.OrderPaid{EventID: uuid.NewString(), OrderID: int64(900 + i), UserID: 1, AmountCents: 1250,
				Points: events.PointsFor(1250), OccurredAt: time.Now().UTC()}
			if err := outbox.Insert(context.Background(), tx, ev.EventID, events.RoutingKeyOrderPaid, ev); err != nil {
				return err
			}
			eventIDs = append(eventIDs, ev.EventID)
		}
		return nil
	}))
	var ids []int64
	require.NoError(t, db.Raw(`SELECT id FROM outbox WHERE event_id::text IN ? ORDER BY id`, eventIDs).Scan(&ids).Error)
	require.Len(t, ids, n)
	return ids
}

// minAttempts is the smallest attempts count among the rows ids.
func minAttempts(t *testing.T, db *gorm.DB, ids []int64) int {
	var n int
	require.NoError(t, db.Raw(`SELECT COALESCE(min(attempts), 0) FROM outbox WHERE id IN ?`, ids).Scan(&n).Error)
	return n
}

// stallProxy is a TCP proxy to the broker that can hold what the broker sends (its confirms among it)
// without closing anything, as a stalled network path would; what the client sends still flows.
type stallProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

// newStallProxy starts a proxy to the host of rawURL and returns the URL pointing at it. The caller
// closes it (t.Cleanup(p.Close)) before whatever uses it is stopped.
func newStallProxy(t *testing.T, rawURL string) (*stallProxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln, target: u.Host}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	u.Host = ln.Addr().String()
	return p, u.String()
}

// Hold stops forwarding the broker's bytes to the client until Release.
func (p *stallProxy) Hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Release forwards the held bytes, and everything after them.
func (p *stallProxy) Release() {
	p.mu.Lock()
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *stallProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			return
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(up, c, false) })
		p.wg.Go(func() { p.pipe(c, up, true) })
	}
}

// pipe copies src to dst; holdable copies wait while the proxy holds. It closes both ends when done.
func (p *stallProxy) pipe(dst, src net.Conn, holdable bool) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && holdable {
			p.mu.Lock()
			for p.held && !p.closed {
				p.cond.Wait()
			}
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
