package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"idemshop/internal/events"
	"idemshop/internal/lab"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/points"
)

// consumer is measure 4: the points consumer with both dedup layers (Redis lease, ledger transaction,
// done marker; the production prefetch, batch size and batch wait) drains a backlog of order.paid
// events from a queue of this run's own, against a bare loop (same prefetch, one ack per message, no
// work) that drains the same number of messages from the same queue. One message in ten is a
// republish of an earlier order (the relay's at-least-once), so the dedup has duplicates to absorb.
//
// A drain of a few thousand messages lasts a few hundred milliseconds, so one drain per side, one
// after the other, weighed whatever the machine did in that moment. So: an untimed warm-up of one
// prefetch through each side first (the broker's queue, the database's and Redis' connections and
// prepared statements), then ABBA like the other measures (bare, dedup, dedup, bare, half the
// messages each), each side's rate being its messages over its summed drain time. A dedup round
// starts a fresh consumer on the backlog: its time includes the consumer's connect (dial, declare,
// prefetch, subscribe; a few milliseconds), which is part of what a consumer started on a backlog
// costs. A bare round pays the same: it dials, declares the same topology and subscribes in its timed
// section too, so that the ratio weighs the dedup and nothing else. (It used to subscribe on an open
// connection, which charged the dedup side with a connect the bare side did not make.)
//
// Both run in this process, like the lab's S6, on broker objects and Redis keys named after the run,
// so the demo points-consumer never sees these messages. The latency figures are completion times:
// how long after its round's drain started each message was credited (dedup) or acknowledged (bare).
func (r *runner) consumer(ctx context.Context) []Result {
	const name, title = "points_consumer", "points consumer msg/s: with dedup ÷ bare consume+ack"
	env, cfg := r.env, r.cfg
	n := int(min(max(2000, int64(5000*cfg.Duration.Seconds())), 40_000))
	n -= n % 20 // two rounds per side, each a whole number of ten-message groups
	unique := n - n/10
	def := config.DefaultPointsConsumer()
	warm := def.Prefetch // one prefetch through each side before the timed rounds

	f, err := env.NewFixture(ctx, "bench-consumer")
	if err != nil {
		return []Result{failed(name, title, err)}
	}
	defer f.Close(ctx)
	product, err := f.Product(ctx, 1_000_000, orderPrice)
	if err != nil {
		return []Result{failed(name, title, err)}
	}
	// Real orders, so that the ledger's biz_id (the order id) collides with nothing in a shared database.
	ids, err := insertOrders(ctx, env, f.UserID, product, unique+warm)
	if err != nil {
		return []Result{failed(name, title, err)}
	}
	body := func(id int64) ([]byte, error) {
		return json.Marshal(events.OrderPaid{EventID: uuid.NewString(), OrderID: id, UserID: f.UserID, AmountCents: orderPrice,
			Points: events.PointsFor(orderPrice), OccurredAt: time.Now().UTC()})
	}
	msgs := make([][]byte, 0, n)
	for i := range n {
		id := ids[min(i-i/10, unique-1)]
		if i%10 == 9 {
			id = ids[(i-i/10)-5] // a republish of an order five messages back
		}
		b, err := body(id)
		if err != nil {
			return []Result{failed(name, title, err)}
		}
		msgs = append(msgs, b)
	}
	warmMsgs := make([][]byte, 0, warm)
	for _, id := range ids[unique:] {
		b, err := body(id)
		if err != nil {
			return []Result{failed(name, title, err)}
		}
		warmMsgs = append(warmMsgs, b)
	}

	raw := make([]byte, 4)
	_, _ = rand.Read(raw)
	run := "bench-" + hex.EncodeToString(raw)
	top := rabbitmq.OrderPaidTopology().WithPrefix(env.AMQPPrefix + run + ":")
	conn, err := rabbitmq.Dial(ctx, env.AMQPURL)
	if err != nil {
		return []Result{failed(name, title, err)}
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return []Result{failed(name, title, err)}
	}
	if err := rabbitmq.Declare(ch, top); err != nil {
		return []Result{failed(name, title, err)}
	}
	defer rabbitmq.Delete(conn, top)
	redisPrefix := env.RedisPrefix + run + ":"
	defer deleteRedisPrefix(context.WithoutCancel(ctx), r, redisPrefix)

	within := max(env.Quiet, 10*time.Second)
	ccfg := points.ConsumerConfig{
		AMQPURL: env.AMQPURL, Topology: top, Prefetch: def.Prefetch, BatchSize: def.BatchSize, BatchWait: def.BatchWait,
		KeyPrefix: redisPrefix, LeaseTTL: def.LeaseTTL, DoneTTL: time.Hour, LeasePoll: def.LeasePoll,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second,
	}
	// The consumer's last acks can still be in the quorum queue's log when its connection closes;
	// the broker then returns those messages (at least once: a second consumer acks them as
	// duplicates). The round after a dedup round takes them too, so that the queue ends empty:
	// returned counts them (they count as that round's messages, on either side).
	var returned, leftover int64
	round := func(dedupSide bool, bodies [][]byte, into *sample) error {
		if err := publishAll(ctx, ch, top, bodies, within); err != nil {
			return err
		}
		want := len(bodies) + int(leftover)
		var s *sample
		var err error
		if dedupSide {
			s, err = r.drainDedup(ctx, ccfg, f.UserID, want, within)
		} else {
			s, err = drainBare(ctx, env.AMQPURL, top, def.Prefetch, want, within)
		}
		if err != nil {
			return err
		}
		// Either side closes its connection at the end of its round, and may leave messages behind.
		if leftover, err = stableReady(ctx, conn, top.Queue); err != nil {
			return err
		}
		returned += leftover
		if into != nil {
			into.merge(s)
		}
		return nil
	}
	dedup, bare := newSample(), newSample()
	half := n / 2
	for _, step := range []struct {
		dedup  bool
		bodies [][]byte
		into   *sample
	}{
		{true, warmMsgs, nil}, {false, warmMsgs, nil}, // warm-up, not counted
		{false, msgs[:half], bare}, {true, msgs[:half], dedup}, {true, msgs[half:], dedup}, {false, msgs[half:], bare},
	} {
		if err := round(step.dedup, step.bodies, step.into); err != nil {
			return []Result{failed(name, title, err)}
		}
	}
	late, err := drainRest(ctx, conn, top.Queue)
	if err != nil {
		return []Result{failed(name, title, err)}
	}

	res := ratioResult(name, title, dedup, bare, "bare consume+ack")
	res.Latency = "completion time since the drain started"
	res.atLeast(0.6) // issue 16
	res.Note = fmt.Sprintf("%d messages per side (%d orders, %d republished copies), ABBA in rounds of %d after a warm-up of %d per side; prefetch %d, batch %d; %d returned by the broker after a consumer stopped, taken by the next round; %d acked after the last",
		n, unique, n-unique, half, warm, def.Prefetch, def.BatchSize, returned, late)
	var c struct{ Rows, Balance int64 }
	err = env.DB.WithContext(ctx).Raw(`SELECT (SELECT count(*) FROM points_ledger WHERE user_id = @u) AS rows,
		(SELECT COALESCE((SELECT balance FROM points_accounts WHERE user_id = @u), 0)) AS balance`,
		map[string]any{"u": f.UserID}).Scan(&c).Error
	if err != nil {
		res.Error = fmt.Sprintf("check invariants: %v", err)
		return []Result{res}
	}
	if c.Rows != int64(unique+warm) {
		res.violate(fmt.Sprintf("%d ledger rows for %d orders", c.Rows, unique+warm))
	}
	if want := int64(unique+warm) * events.PointsFor(orderPrice); c.Balance != want {
		res.violate(fmt.Sprintf("balance %d, want %d", c.Balance, want))
	}
	for _, q := range []string{top.Queue, top.DeadLetterQueue} {
		// A quorum queue applies acks asynchronously (through its log): the count settles shortly after.
		var left int64
		_, err := lab.Eventually(ctx, 5*time.Second, func() (bool, error) {
			var err error
			left, err = rabbitmq.ReadyMessages(conn, q)
			return left == 0, err
		})
		if err != nil {
			res.Error = err.Error()
		} else if left != 0 {
			res.violate(fmt.Sprintf("%d messages left in %s", left, q))
		}
	}
	return []Result{res}
}

// drainRest acks whatever the broker still returns (bounded: until 1 s passes without a message, at
// most 10 s), without counting it: copies of messages the dedup consumer already settled.
func drainRest(ctx context.Context, conn *amqp.Connection, queue string) (int64, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	ds, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	var n int64
	deadline := time.After(10 * time.Second)
	for {
		select {
		case d, ok := <-ds:
			if !ok {
				return n, nil
			}
			_ = d.Ack(false)
			n++
		case <-time.After(time.Second):
			return n, nil
		case <-deadline:
			return n, nil
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

// stableReady waits (bounded) until the queue's ready count stops changing and returns it.
func stableReady(ctx context.Context, conn *amqp.Connection, queue string) (int64, error) {
	last := int64(-1)
	for range 25 {
		n, err := rabbitmq.ReadyMessages(conn, queue)
		if err != nil {
			return 0, err
		}
		if n == last {
			return n, nil
		}
		last = n
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return last, nil
}

// drainDedup runs the real consumer until it has settled n messages (applied or duplicate).
func (r *runner) drainDedup(ctx context.Context, cfg points.ConsumerConfig, userID int64, n int, within time.Duration) (*sample, error) {
	reg := prometheus.NewRegistry()
	logger := r.env.Log
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c, err := points.NewConsumer(r.env.DB, r.env.Redis, cfg, logger, reg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); _ = c.Run(cctx) }()
	settled := func() int64 {
		return counterValue(reg, "idemshop_points_messages_total", points.OutcomeApplied, points.OutcomeDuplicate)
	}
	deadline := time.Now().Add(within)
	for settled() < int64(n) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	<-done
	got := settled()
	s := newSample()
	s.elapsed = elapsed
	// Completion times from the ledger rows' commit transactions (created_at is the transaction's
	// start, on this machine's clock); duplicates complete with the batch around them, not measured.
	var at []time.Time
	if err := r.env.DB.WithContext(ctx).Raw(`SELECT created_at FROM points_ledger WHERE user_id = ? AND created_at >= ? ORDER BY id`,
		userID, start).Scan(&at).Error; err != nil {
		return nil, err
	}
	for _, t := range at {
		s.add(max(0, t.Sub(start)), 0, nil)
	}
	s.ok = got
	if failed := counterValue(reg, "idemshop_points_messages_total", points.OutcomeFailed); failed > 0 || got < int64(n) {
		s.errs = int64(n) - min(got, int64(n)) + failed
		s.errMsgs = append(s.errMsgs, fmt.Sprintf("%d of %d settled within %s, %d failed", got, n, within, failed))
	}
	return s, nil
}

// drainBare consumes n messages and acks each one, doing nothing else: the broker's own ceiling.
func drainBare(ctx context.Context, amqpURL string, top rabbitmq.Topology, prefetch, n int, within time.Duration) (*sample, error) {
	s := newSample()
	start := time.Now()
	// Connected as points.Consumer's session connects: dial, channel, declare, prefetch, subscribe.
	conn, err := rabbitmq.Dial(ctx, amqpURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	if err := rabbitmq.Declare(ch, top); err != nil {
		return nil, err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, err
	}
	ds, err := ch.ConsumeWithContext(ctx, top.Queue, "", false, false, false, false, nil)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	for range n {
		select {
		case d, ok := <-ds:
			if !ok {
				return nil, errors.New("bare consumer: delivery channel closed")
			}
			err := d.Ack(false)
			s.add(time.Since(start), 0, err)
		case <-timer.C:
			s.elapsed = time.Since(start)
			s.errs += int64(n - len(s.lat))
			s.errMsgs = append(s.errMsgs, fmt.Sprintf("bare consumer: %d of %d within %s", len(s.lat), n, within))
			return s, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.elapsed = time.Since(start)
	return s, nil
}

// publishAll publishes bodies as the relay does (persistent, publisher confirms) and waits for the
// last confirm (confirms come in order, so it covers all).
func publishAll(ctx context.Context, ch *amqp.Channel, top rabbitmq.Topology, bodies [][]byte, within time.Duration) error {
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("publisher confirms: %w", err)
	}
	var last *amqp.DeferredConfirmation
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, top.Exchange, top.RoutingKey, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: uuid.NewString(), ContentType: "application/json", Body: b,
		})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		last = dc
	}
	if last == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	ok, err := last.WaitContext(wctx)
	if err != nil {
		return fmt.Errorf("confirm: %w", err)
	}
	if !ok {
		return errors.New("the broker refused a message (nack)")
	}
	return nil
}

// counterValue sums the counter name's series labelled with any of outcomes, in one Gather: drainDedup
// polls it every 2 ms beside the consumer it measures, in the same process.
func counterValue(reg prometheus.Gatherer, name string, outcomes ...string) int64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && slices.Contains(outcomes, l.GetValue()) {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int64(sum)
}

// deleteRedisPrefix deletes the run's Redis keys, best effort.
func deleteRedisPrefix(ctx context.Context, r *runner, prefix string) {
	_ = redisx.DeletePrefix(ctx, r.env.Redis, prefix)
}
