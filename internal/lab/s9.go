package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/callback"
	"idemshop/internal/invariants"
	"idemshop/internal/ordersapp"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/redisx"
)

// s9DeadRedis is a loopback address where nothing listens: every Redis call fails at once with
// "connection refused", as when the Redis host is up but Redis is not.
const s9DeadRedis = "redis://127.0.0.1:1/0"

// runS9 is a callback storm while Redis is down. The lab starts an orders replica of its own whose
// Redis is unreachable (the running orders' Redis is up) and storms its callback route: 20 orders, each
// SUCCESS sent 3 times, all 60 at once. Then it sends the same storm to the running orders, with Redis,
// as the baseline. The callback path itself uses no Redis (the conditional UPDATE alone decides), so
// every order must still be paid exactly once, without a 5xx: a Redis dependency that crept back onto
// the path and failed closed would show here. The latency of both storms is reported side by side.
// There is no unsafe variant.
func runS9(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	u := Unsafe{NoTwin: true, Side: Side{Detail: "no unsafe twin: the guarded handler is run with Redis down, and with it up"}}
	var g Guarded
	url, stop, err := s9DegradedOrders(ctx, env)
	if err != nil {
		return u, g, err
	}
	degraded, err := s9Run(ctx, env, url, "S9-guarded-redis-down")
	stop()
	if err != nil {
		return u, g, err
	}
	normal, err := s9Run(ctx, env, env.OrdersURL, "S9-guarded-redis-up")
	if err != nil {
		return u, g, err
	}
	g.Measured = map[string]int64{}
	for prefix, m := range map[string]map[string]int64{"degraded_": degraded, "normal_": normal} {
		for k, v := range m {
			g.Measured[prefix+k] = v
		}
	}
	g.OK = len(s9Broken(g.Measured, s9Down))+len(s9Broken(g.Measured, s9Up)) == 0
	g.Detail = s9Detail(g.Measured)
	return u, g, nil
}

// The two storms' prefixes in Guarded.Measured: the lab's own orders with Redis down, and the orders
// under test, with its Redis.
const (
	s9Down = "degraded_"
	s9Up   = "normal_"
)

// s9StormName is how the report names a storm.
func s9StormName(prefix string) string {
	if prefix == s9Down {
		return "Redis down (the lab's orders)"
	}
	return "Redis up (the orders under test)"
}

// s9Broken lists what one storm broke, each with its figure, so that a failing report names the storm
// and the numbers that failed rather than the other storm's good ones.
func s9Broken(m map[string]int64, prefix string) []string {
	v := func(k string) int64 { return m[prefix+k] }
	orders := v("orders")
	var out []string
	if v("paid") != orders {
		out = append(out, fmt.Sprintf("%d of %d paid", v("paid"), orders))
	}
	if v("applied") != orders {
		out = append(out, fmt.Sprintf("%d callbacks applied for %d orders", v("applied"), orders))
	}
	if v("stock_delta") != -orders {
		out = append(out, fmt.Sprintf("stock %+d (want %+d)", v("stock_delta"), -orders))
	}
	if v("outbox_rows") != orders {
		out = append(out, fmt.Sprintf("%d order.paid events (want %d)", v("outbox_rows"), orders))
	}
	if v("violations") != 0 {
		out = append(out, fmt.Sprintf("%d invariant violations", v("violations")))
	}
	if v("status_5xx") != 0 {
		out = append(out, fmt.Sprintf("%d 5xx", v("status_5xx")))
	}
	if n := v("non_200") - v("status_5xx"); n != 0 {
		out = append(out, fmt.Sprintf("%d other non-200 answers", n))
	}
	return out
}

// s9Detail is the guarded side's sentence: what broke in which storm first, then both storms' latency.
func s9Detail(m map[string]int64) string {
	var broke []string
	for _, prefix := range []string{s9Down, s9Up} {
		if b := s9Broken(m, prefix); len(b) > 0 {
			broke = append(broke, s9StormName(prefix)+": "+strings.Join(b, ", "))
		}
	}
	latency := fmt.Sprintf("Redis down: p50 %.1f ms, p99 %.1f ms; Redis up: p50 %.1f ms, p99 %.1f ms",
		s9Millis(m[s9Down+"p50_us"]), s9Millis(m[s9Down+"p99_us"]), s9Millis(m[s9Up+"p50_us"]), s9Millis(m[s9Up+"p99_us"]))
	if len(broke) > 0 {
		return fmt.Sprintf("%d orders x %d callbacks per storm; %s (%s)", m[s9Down+"orders"], m[s9Down+"copies"],
			strings.Join(broke, "; "), latency)
	}
	return fmt.Sprintf("%d orders x %d callbacks; Redis down: %d paid once, %d 5xx; Redis up: %d paid once, %d 5xx (%s)",
		m[s9Down+"orders"], m[s9Down+"copies"], m[s9Down+"paid"], m[s9Down+"status_5xx"], m[s9Up+"paid"], m[s9Up+"status_5xx"], latency)
}

func s9Millis(us int64) float64 { return float64(us) / 1000 }

// s9DegradedOrders starts an in-process orders (the real application, not in lab mode) on the lab's
// database, broker names and key prefix, with Redis pointing at s9DeadRedis, and serves it on loopback.
// Its workers are not started: the running orders' relay publishes the events it writes.
func s9DegradedOrders(ctx context.Context, env *Env) (string, func(), error) {
	cfg := config.DefaultOrders()
	cfg.Postgres.URL = env.DatabaseURL
	cfg.Redis.URL, cfg.Redis.KeyPrefix, cfg.Redis.Timeout = s9DeadRedis, env.RedisPrefix, 100*time.Millisecond
	cfg.AMQPURL, cfg.NamePrefix = env.AMQPURL, env.AMQPPrefix
	cfg.PaymentsURL = env.PaymentsURL
	cfg.PaymentWebhookSecret = string(env.Secret)
	// Its own pool, as a separate replica would have.
	db, err := postgres.Open(ctx, cfg.Postgres.URL, postgres.Options{LockTimeout: cfg.LockTimeout,
		StatementTimeout: cfg.StatementTimeout, MaxConns: 8, Logger: env.Log}) // enough for the storm, light on max_connections
	if err != nil {
		return "", nil, fmt.Errorf("S9: open database: %w", err)
	}
	rdb, err := redisx.Open(cfg.Redis.URL, cfg.Redis.Timeout)
	if err != nil {
		_ = postgres.Close(db)
		return "", nil, fmt.Errorf("S9: redis client: %w", err)
	}
	app, err := ordersapp.New(ordersapp.Deps{Config: cfg, Logger: env.Log, DB: db, Redis: rdb,
		Registry: prometheus.NewRegistry()})
	if err != nil {
		_ = rdb.Close()
		_ = postgres.Close(db)
		return "", nil, fmt.Errorf("S9: orders without Redis: %w", err)
	}
	srv := httptest.NewServer(app.Echo)
	return srv.URL, func() {
		srv.Close()
		_ = rdb.Close()
		_ = postgres.Close(db)
	}, nil
}

// s9Run storms the callback route at baseURL on a fixture of its own, named fixture, and measures it.
// Both storms are the guarded side (S9 has no unsafe variant): "S9-guarded-redis-down" and
// "S9-guarded-redis-up".
func s9Run(ctx context.Context, env *Env, baseURL, fixture string) (map[string]int64, error) {
	f, err := env.NewFixture(ctx, fixture)
	if err != nil {
		return nil, err
	}
	m, err := s9Storm(ctx, env, f, baseURL)
	if cerr := f.Close(ctx); err == nil {
		err = cerr
	}
	return m, err
}

func s9Storm(ctx context.Context, env *Env, f *Fixture, baseURL string) (map[string]int64, error) {
	const orderCount, copies, initial, price = 20, 3, 100, 1500
	product, err := f.Product(ctx, initial, price)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, orderCount)
	bodies := make([][]byte, orderCount)
	for i := range orderCount {
		o, r, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("s9-%d-%d", time.Now().UnixNano(), i), product, 1)
		if err != nil || r.Status != http.StatusCreated {
			return nil, notCreated("S9: create order", err, r)
		}
		ids[i] = o.ID
		// The copies of one callback are byte-identical, as a platform's resends are.
		if bodies[i], err = json.Marshal(Callback(o.ID, callback.StatusSuccess, o.AmountCents,
			fmt.Sprintf("lab-s9-%d", o.ID))); err != nil {
			return nil, err
		}
	}

	type answer struct {
		status int
		took   time.Duration
	}
	answers := Parallel(orderCount*copies, func(i int) answer {
		body := bodies[i/copies]
		start := time.Now()
		r, err := env.Do(ctx, http.MethodPost, baseURL+"/v1/payments/callback", body,
			paysig.Header, paysig.Sign(env.Secret, time.Now(), body))
		if err != nil {
			return answer{status: 0, took: time.Since(start)}
		}
		return answer{status: r.Status, took: time.Since(start)}
	})
	m := map[string]int64{"orders": orderCount, "copies": copies}
	took := make([]time.Duration, 0, len(answers))
	for _, a := range answers {
		took = append(took, a.took)
		if a.status != http.StatusOK {
			m["non_200"]++
		}
		if a.status >= 500 || a.status == 0 { // 0: no answer at all, as bad as a 5xx
			m["status_5xx"]++
		}
	}
	slices.Sort(took)
	m["p50_us"] = s9Percentile(took, 50).Microseconds()
	m["p99_us"] = s9Percentile(took, 99).Microseconds()
	m["max_us"] = took[len(took)-1].Microseconds()
	m["p50_ms"] = s9Percentile(took, 50).Milliseconds()
	m["p99_ms"] = s9Percentile(took, 99).Milliseconds()

	// Each paid order credits points through the running relay and points-consumer: let that finish
	// before the fixture goes, then read the rows.
	if err := payAwaitPoints(ctx, env, ids); err != nil {
		return nil, err
	}
	facts, err := invariants.Load(ctx, env.DB, ids)
	if err != nil {
		return nil, err
	}
	vs := invariants.PaidOnce(facts, false)
	for _, fa := range facts {
		if fa.Status == "PAID" {
			m["paid"]++
		}
		m["applied"] += fa.CallbacksApplied
		m["received"] += fa.CallbacksReceived
		m["outbox_rows"] += fa.OutboxRows
	}
	delta, sv, err := invariants.Stock(ctx, env.DB, product, initial, -orderCount)
	if err != nil {
		return nil, err
	}
	m["stock_delta"] = delta
	m["violations"] = int64(len(vs) + len(sv))
	return m, nil
}

// s9Percentile is the nearest-rank percentile p of sorted durations.
func s9Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
