package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// growth is the growth mode: idempotency_keys is pre-filled (on a filler lab user, by one INSERT ...
// SELECT generate_series per chunk) to each size, and create-order latency with fresh keys is measured
// at each. A key table that slows the guard down as it grows would turn the 24 h retention into a
// capacity limit. The filler rows are deleted at the end.
func (r *runner) growth(ctx context.Context) ([]Result, []GrowthPoint) {
	const name, title = "create_p99_growth", "create order p99 at the largest key table ÷ at the smallest"
	env, cfg := r.env, r.cfg
	filler, err := env.NewFixture(ctx, "bench-growth-filler")
	if err != nil {
		return []Result{failed(name, title, err)}, nil
	}
	defer filler.Close(ctx)
	pool, err := newPool(ctx, env, 2)
	if err != nil {
		return []Result{failed(name, title, err)}, nil
	}
	defer pool.Close()
	defer deleteFiller(context.WithoutCancel(ctx), pool, filler.UserID)

	g, err := env.NewFixture(ctx, "bench-growth")
	if err != nil {
		return []Result{failed(name, title, err)}, nil
	}
	defer g.Close(ctx)
	product, err := g.Product(ctx, 1_000_000, orderPrice)
	if err != nil {
		return []Result{failed(name, title, err)}, nil
	}

	var (
		points []GrowthPoint
		lats   [][]timeSeries
	)
	var filled int64
	var checkpointErr error
	c := &counter{limit: r.limit(cfg.Duration+time.Second) * int64(len(cfg.GrowthSizes))}
	targets := createTargets(env, g, guardedPath, "bench-growth", product, c)
	for _, size := range cfg.GrowthSizes {
		if ctx.Err() != nil {
			break
		}
		cfg.Progress(fmt.Sprintf("bench: growth: filling idempotency_keys to %d rows", size))
		var total int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&total); err != nil {
			return []Result{failed(name, title, err)}, points
		}
		t := time.Now()
		if add := size - total; add > 0 {
			if err := fill(ctx, pool, filler.UserID, filled, add); err != nil {
				return []Result{failed(name, title, err)}, points
			}
			filled += add
		}
		// A table of millions of rows in service has been vacuumed and checkpointed long ago; one that
		// was bulk-loaded a second ago has not, and autovacuum's pass over the new rows and the
		// checkpoints the load's WAL asks for would run during the measure. The measure is about the
		// size of the table, not about its loading. CHECKPOINT needs a superuser or pg_checkpoint;
		// without either the measure goes on and says so.
		if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) idempotency_keys`); err != nil {
			return []Result{failed(name, title, err)}, points
		}
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			checkpointErr = err
		}
		fillSec := time.Since(t).Seconds()
		cfg.Progress(fmt.Sprintf("bench: growth: create order at %d rows", size))
		attack(ctx, "growth-warm", targets, cfg.Concurrency, min(cfg.Duration/4, time.Second), env.HTTP.Timeout, nil)
		s := attack(ctx, "growth", targets, cfg.Concurrency, cfg.Duration, env.HTTP.Timeout, want201)
		st := s.stats()
		plan, err := explainKeyInsert(ctx, pool, g.UserID)
		if err != nil {
			plan = "explain failed: " + err.Error()
		}
		points = append(points, GrowthPoint{Rows: size, RPS: st.RPS, P50ms: st.P50ms, P99ms: st.P99ms,
			Errors: st.Errors, FillSec: round(fillSec), Explain: plan})
		lats = append(lats, []timeSeries{{fmt.Sprintf("%d rows", size), s.lat}})
	}
	if len(points) == 0 {
		return []Result{failed(name, title, ctx.Err())}, nil
	}
	first, last := points[0], points[len(points)-1]
	res := Result{Name: name, Title: title, RPS: last.RPS, BaselineRPS: first.RPS, P50ms: last.P50ms, P99ms: last.P99ms,
		Latency: "request round trip (guarded create, fresh keys)", Target: "p99 ratio <= 1.2"}
	for _, p := range points {
		res.Errors += p.Errors
	}
	p99Ratio := 0.0
	if first.P99ms > 0 {
		p99Ratio = round(last.P99ms / first.P99ms)
	}
	if first.RPS > 0 {
		res.Ratio = round(last.RPS / first.RPS)
	}
	res.TargetMet = p99Ratio > 0 && p99Ratio <= 1.2
	res.Note = fmt.Sprintf("p99 %.2f ms at %d rows, %.2f ms at %d rows: p99 ratio %.2f (ratio is rps at %d ÷ rps at %d)",
		first.P99ms, first.Rows, last.P99ms, last.Rows, p99Ratio, last.Rows, first.Rows)
	res.Note += "; the table is vacuumed and checkpointed after each fill"
	if checkpointErr != nil {
		res.Note += fmt.Sprintf(" (CHECKPOINT refused: %v; the checkpoints the fill asked for may fall in the measure)", checkpointErr)
	}
	// The guard's invariant at every size: one order per completed key.
	r.checkGrowth(ctx, &res, g.UserID)
	for _, l := range lats {
		res.series = append(res.series, l...)
	}
	return []Result{res}, points
}

// fill inserts add filler rows, in chunks that each stay well inside the statement timeout.
func fill(ctx context.Context, pool *pgxpool.Pool, userID, from, add int64) error {
	const chunk = 250_000
	for done := int64(0); done < add; done += chunk {
		n := min(chunk, add-done)
		_, err := pool.Exec(ctx, `INSERT INTO idempotency_keys
			(user_id, idempotency_key, method, path, fingerprint, state, response_status, response_body)
			SELECT $1, 'growth-' || g, 'POST', '/v1/orders', md5(g::text) || md5(g::text), 'COMPLETED', 201,
			       convert_to('{"id":0,"status":"PENDING"}', 'UTF8')
			FROM generate_series($2::bigint, $3::bigint) AS g`, userID, from+done+1, from+done+n)
		if err != nil {
			return fmt.Errorf("fill idempotency_keys: %w", err)
		}
	}
	return nil
}

// deleteFiller removes the filler rows in bounded batches.
func deleteFiller(ctx context.Context, pool *pgxpool.Pool, userID int64) {
	for range 1000 {
		tag, err := pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE id IN
			(SELECT id FROM idempotency_keys WHERE user_id = $1 LIMIT 250000)`, userID)
		if err != nil || tag.RowsAffected() == 0 {
			return
		}
	}
}

// explainKeyInsert runs the guard's key insert under EXPLAIN (ANALYZE, BUFFERS) and rolls it back.
func explainKeyInsert(ctx context.Context, pool *pgxpool.Pool, userID int64) (string, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) INSERT INTO idempotency_keys
		(user_id, idempotency_key, method, path, fingerprint, state)
		VALUES ($1, $2, 'POST', '/v1/orders', 'explain', 'PROCESSING')
		ON CONFLICT (user_id, idempotency_key) DO NOTHING RETURNING id`, userID, fmt.Sprintf("explain-%d", time.Now().UnixNano()))
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return "", err
		}
		lines = append(lines, strings.TrimSpace(l))
	}
	return strings.Join(lines, " | "), rows.Err()
}

// checkGrowth: every completed key of the growth user holds one order, and no order lacks its key.
func (r *runner) checkGrowth(ctx context.Context, res *Result, userID int64) {
	var c struct{ Orders, Keys int64 }
	err := r.env.DB.WithContext(ctx).Raw(`SELECT (SELECT count(*) FROM orders WHERE user_id = @u) AS orders,
		(SELECT count(*) FROM idempotency_keys WHERE user_id = @u AND state = 'COMPLETED') AS keys`,
		map[string]any{"u": userID}).Scan(&c).Error
	if err != nil {
		res.Error = err.Error()
		return
	}
	if c.Orders != c.Keys {
		res.violate(fmt.Sprintf("%d orders for %d completed keys", c.Orders, c.Keys))
	}
}
