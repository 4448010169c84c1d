package points_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/testenv"
)

// BenchmarkConsumer drains the same queue twice per run: once through the consumer with both dedup
// layers (Redis lease, ledger transaction, done marker; default batch and prefetch), once with a bare
// consume+ack loop (same prefetch, one ack per message, no work). It reports both rates and their
// ratio; the target is >= 0.25. Run it with a fixed count, e.g.
//
//	go test -run '^$' -bench Consumer -benchtime 20000x ./internal/points/
func BenchmarkConsumer(b *testing.B) {
	for _, batch := range []int{100, 1} { // 100 is the default; 1 is one transaction per message
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchConsumer(b, batch) })
	}
}

func benchConsumer(b *testing.B, batch int) {
	env := testenv.New(b)
	top := topology(b, env)
	n := b.N
	cfg := testConfig(env.AMQPURL, env.Prefix, top)
	cfg.Prefetch, cfg.BatchSize, cfg.BatchWait = 200, batch, 5*time.Millisecond // the production defaults

	b.StopTimer()
	publishMany(b, env, top, 1, n)
	b.StartTimer()
	start := time.Now()
	c := startConsumer(b, env, cfg)
	deadline := time.Now().Add(2 * time.Minute)
	for c.handled() < n {
		if time.Now().After(deadline) {
			b.Fatalf("consumer handled %d of %d messages within 2 minutes", c.handled(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	dedup := time.Since(start)
	b.StopTimer()
	c.stop(b)
	require.EqualValues(b, n, state(b, env).Rows)

	publishMany(b, env, top, int64(n)+1, n)
	start = time.Now()
	bareConsume(b, env, top, cfg.Prefetch, n)
	bare := time.Since(start)

	dedupRate := float64(n) / dedup.Seconds()
	bareRate := float64(n) / bare.Seconds()
	b.ReportMetric(dedupRate, "dedup_msg/s")
	b.ReportMetric(bareRate, "bare_msg/s")
	b.ReportMetric(dedupRate/bareRate, "ratio")
	b.ReportMetric(0, "ns/op") // the wall time of both phases is not a per-message cost
}

// publishMany publishes n order.paid events for orders from, from+1, ... with asynchronous confirms.
func publishMany(b *testing.B, env *testenv.Env, top rabbitmq.Topology, from int64, n int) {
	b.Helper()
	p := newPublisher(b, env.AMQPURL, top)
	ctx := context.Background()
	for i := range n {
		ev := orderPaid(from+int64(i), int64(i%3+1), 1250)
		body, err := json.Marshal(ev)
		require.NoError(b, err)
		dc, err := p.ch.PublishWithDeferredConfirm(top.Exchange, top.RoutingKey, false, false, amqpPublishing(ev.EventID, body))
		require.NoError(b, err)
		if i == n-1 { // confirms arrive in order: the last one covers the batch
			ok, err := dc.WaitContext(ctx)
			require.NoError(b, err)
			require.True(b, ok)
		}
	}
}

func bareConsume(b *testing.B, env *testenv.Env, top rabbitmq.Topology, prefetch, n int) {
	b.Helper()
	ch := channel(b, env.AMQPURL)
	require.NoError(b, ch.Qos(prefetch, 0, false))
	ds, err := ch.Consume(top.Queue, fmt.Sprintf("bench-bare-%d", n), false, false, false, false, nil)
	require.NoError(b, err)
	for range n {
		d := <-ds
		require.NoError(b, d.Ack(false))
	}
}
