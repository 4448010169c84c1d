package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"idemshop/internal/idempotency"
	"idemshop/internal/lab"
)

const (
	guardedPath  = "/v1/orders"
	baselinePath = "/lab/unsafe/v1/nokey/orders" // internal/ordersapp/lab_bench.go
	orderBody    = `{"product_id":%d,"quantity":1}`
	// maxRate bounds every targeter's request count: more than any path here can answer per second.
	maxRate = 5000
)

// createTargets posts fresh orders to path: every request carries a new Idempotency-Key.
func createTargets(env *lab.Env, f *lab.Fixture, path, keyPrefix string, productID int64, c *counter) vegeta.Targeter {
	body := fmt.Appendf(nil, orderBody, productID)
	return func(t *vegeta.Target) error {
		i, ok := c.next()
		if !ok {
			return vegeta.ErrNoTargets
		}
		t.Method, t.URL, t.Body = http.MethodPost, env.OrdersURL+path, body
		t.Header = http.Header{"Authorization": {"Bearer " + f.Token}, "Content-Type": {"application/json"},
			"Idempotency-Key": {fmt.Sprintf("%s-%d", keyPrefix, i)}}
		return nil
	}
}

// replayTargets re-sends completed requests: the same key and the same body, cycling over keys.
func replayTargets(env *lab.Env, f *lab.Fixture, keys []string, productID int64, c *counter) vegeta.Targeter {
	body := fmt.Appendf(nil, orderBody, productID)
	return func(t *vegeta.Target) error {
		i, ok := c.next()
		if !ok {
			return vegeta.ErrNoTargets
		}
		t.Method, t.URL, t.Body = http.MethodPost, env.OrdersURL+guardedPath, body
		t.Header = http.Header{"Authorization": {"Bearer " + f.Token}, "Content-Type": {"application/json"},
			"Idempotency-Key": {keys[i%int64(len(keys))]}}
		return nil
	}
}

// want201 counts any answer but 201 Created as an error.
func want201(res *vegeta.Result) error {
	if res.Code != http.StatusCreated {
		return fmt.Errorf("HTTP %d", res.Code)
	}
	return nil
}

func (r *runner) limit(d time.Duration) int64 { return int64(maxRate*d.Seconds()) + 100 }

// createOrder is measures 1 and 2.
//
// 1. Fresh keys, guarded vs the no-key baseline, in ABBA order (baseline, guarded, guarded, baseline,
// each half the duration) so that a drift of the machine during the run weighs on both sides alike.
// 2. Replay: the keys the guarded side completed, sent again with the same body, vs the fresh rate of 1.
func (r *runner) createOrder(ctx context.Context) []Result {
	const name1, title1 = "create_order_fresh", "create order, fresh keys: guarded ÷ no key layer"
	const name2, title2 = "create_order_replay", "create order: replay of completed keys ÷ fresh keys"
	env, cfg := r.env, r.cfg
	g, err := env.NewFixture(ctx, "bench-create")
	if err != nil {
		return []Result{failed(name1, title1, err), failed(name2, title2, err)}
	}
	defer g.Close(ctx)
	b, err := env.NewFixture(ctx, "bench-nokey")
	if err != nil {
		return []Result{failed(name1, title1, err), failed(name2, title2, err)}
	}
	defer b.Close(ctx)
	gp, err := g.Product(ctx, 1_000_000, 1250)
	if err != nil {
		return []Result{failed(name1, title1, err), failed(name2, title2, err)}
	}
	bp, err := b.Product(ctx, 1_000_000, 1250)
	if err != nil {
		return []Result{failed(name1, title1, err), failed(name2, title2, err)}
	}

	half := max(cfg.Duration/2, 50*time.Millisecond)
	gc := &counter{limit: r.limit(cfg.Duration + time.Second)}
	bc := &counter{limit: r.limit(cfg.Duration + time.Second)}
	timeout := env.HTTP.Timeout
	gTargets := createTargets(env, g, guardedPath, "bench-fresh", gp, gc)
	bTargets := createTargets(env, b, baselinePath, "bench-nokey", bp, bc)

	// Warm-up: connections, plans and caches of both routes; not measured.
	warm := min(half/2, time.Second)
	attack(ctx, "warm-guarded", gTargets, cfg.Concurrency, warm, timeout, nil)
	attack(ctx, "warm-nokey", bTargets, cfg.Concurrency, warm, timeout, nil)
	gc.limit += gc.issued()
	bc.limit += bc.issued()

	guarded, baseline := newSample(), newSample()
	// Each phase is also charged with the CPU every process used during it (read at its boundaries).
	meter := newCPUMeter(r.cfg.Processes)
	var guardedCPU, baselineCPU cpuAccount
	phase := func(into *sample, cpu *cpuAccount, name string, tr vegeta.Targeter) {
		before := meter.read(ctx)
		s := attack(ctx, name, tr, cfg.Concurrency, half, timeout, want201)
		cpu.add(before, meter.read(ctx), s.ok+s.errs)
		into.merge(s)
	}
	phase(baseline, &baselineCPU, "nokey", bTargets)
	phase(guarded, &guardedCPU, "guarded", gTargets)
	phase(guarded, &guardedCPU, "guarded", gTargets)
	phase(baseline, &baselineCPU, "nokey", bTargets)

	fresh := ratioResult(name1, title1, guarded, baseline, "no key layer")
	fresh.Latency = "request round trip"
	fresh.atLeast(0.85)
	if fresh.CPU = cpuCost(guardedCPU, baselineCPU); fresh.CPU != nil {
		fresh.Note = fresh.CPU.note("the no-key baseline")
	}
	r.checkCreate(ctx, &fresh, g.UserID, b.UserID, baseline)

	// 2. Replay.
	var keys []string
	err = env.DB.WithContext(ctx).Raw(`SELECT idempotency_key FROM idempotency_keys
		WHERE user_id = ? AND state = 'COMPLETED' ORDER BY id LIMIT 20000`, g.UserID).Scan(&keys).Error
	if err != nil || len(keys) == 0 {
		if err == nil {
			err = fmt.Errorf("no completed keys to replay")
		}
		return []Result{fresh, failed(name2, title2, err)}
	}
	ordersBefore, err := countOrders(ctx, env, g.UserID)
	if err != nil {
		return []Result{fresh, failed(name2, title2, err)}
	}
	notReplayed := 0
	rc := &counter{limit: r.limit(cfg.Duration)}
	replay := attack(ctx, "replay", replayTargets(env, g, keys, gp, rc), cfg.Concurrency, cfg.Duration, timeout,
		func(res *vegeta.Result) error {
			if err := want201(res); err != nil {
				return err
			}
			if res.Headers.Get(idempotency.ReplayedHeader) != "true" {
				notReplayed++ // single consumer of the result channel: no race
				return fmt.Errorf("answer without %s", idempotency.ReplayedHeader)
			}
			return nil
		})
	rep := ratioResult(name2, title2, replay, guarded, "fresh keys")
	rep.Latency = "request round trip"
	rep.atLeast(2)
	rep.Note = fmt.Sprintf("%d completed keys replayed in a cycle; baseline is the fresh guarded side of %s", len(keys), name1)
	ordersAfter, err := countOrders(ctx, env, g.UserID)
	if err != nil {
		rep.Error = err.Error()
	} else if ordersAfter != ordersBefore {
		rep.violate(fmt.Sprintf("replay created orders: %d before, %d after", ordersBefore, ordersAfter))
	}
	if notReplayed > 0 {
		rep.violate(fmt.Sprintf("%d replay answers without %s: true", notReplayed, idempotency.ReplayedHeader))
	}
	return []Result{fresh, rep}
}

// checkCreate: on the guarded side every completed key holds exactly one order and every order has
// its key; on the baseline side (no keys) one order per 201.
func (r *runner) checkCreate(ctx context.Context, res *Result, guardedUser, baselineUser int64, baseline *sample) {
	var c struct {
		Orders, Keys, Referenced, Other int64
	}
	err := r.env.DB.WithContext(ctx).Raw(`SELECT
		(SELECT count(*) FROM orders WHERE user_id = @u) AS orders,
		(SELECT count(*) FROM idempotency_keys WHERE user_id = @u AND state = 'COMPLETED') AS keys,
		(SELECT count(DISTINCT (convert_from(response_body, 'UTF8')::jsonb->>'id')::bigint)
		   FROM idempotency_keys k JOIN orders o
		     ON o.id = (convert_from(k.response_body, 'UTF8')::jsonb->>'id')::bigint AND o.user_id = k.user_id
		  WHERE k.user_id = @u AND k.state = 'COMPLETED') AS referenced,
		(SELECT count(*) FROM idempotency_keys WHERE user_id = @u AND state <> 'COMPLETED') AS other`,
		map[string]any{"u": guardedUser}).Scan(&c).Error
	if err != nil {
		res.Error = fmt.Sprintf("check invariants: %v", err)
		return
	}
	if c.Orders != c.Keys || c.Referenced != c.Keys {
		res.violate(fmt.Sprintf("guarded: %d orders, %d completed keys, %d distinct orders referenced by keys (want all equal)",
			c.Orders, c.Keys, c.Referenced))
	}
	if c.Other != 0 {
		res.violate(fmt.Sprintf("guarded: %d keys left in a state other than COMPLETED", c.Other))
	}
	n, err := countOrders(ctx, r.env, baselineUser)
	if err != nil {
		res.Error = fmt.Sprintf("check invariants: %v", err)
		return
	}
	// The baseline's warm-up created orders too; it can only have more orders than measured 201s.
	if n < baseline.ok {
		res.violate(fmt.Sprintf("no-key baseline: %d orders for %d answers 201", n, baseline.ok))
	}
}

func countOrders(ctx context.Context, env *lab.Env, userID int64) (int64, error) {
	var n int64
	err := env.DB.WithContext(ctx).Raw(`SELECT count(*) FROM orders WHERE user_id = ?`, userID).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count orders: %w", err)
	}
	return n, nil
}
