package ordersapp_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/idempotency"
	"idemshop/internal/testenv"
)

// noKeyLayer is the baseline: the same handler, the same transaction, no idempotency key.
type noKeyLayer struct{ db *gorm.DB }

func (n noKeyLayer) Run(c echo.Context, _ int64, work idempotency.Work) error {
	ctx := c.Request().Context()
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	var (
		status int
		v      any
	)
	err = n.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		status, v, err = work(ctx, tx, body)
		return err
	})
	if err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.Blob(status, echo.MIMEApplicationJSON, b)
}

// BenchmarkCreateOrder measures POST /v1/orders with fresh keys through the full Echo chain (auth, body
// limit, logging) against the same chain without the idempotency layer. Each iteration sends one request
// to each, interleaved, so both see the same machine state. The reported ratio is
// unguarded time ÷ guarded time: guarded throughput as a fraction of unguarded (target ≥ 0.85).
// "serial" is one client (latency-bound); "parallel" is 8 clients on the 2-core machine (CPU-bound).
func BenchmarkCreateOrder(b *testing.B) {
	env := testenv.New(b, testenv.Options{MaxConns: 16})
	guarded := newReplica(b, env, replicaOpts{}).app.Echo
	baseline := newReplica(b, env, replicaOpts{runner: noKeyLayer{db: env.DB}}).app.Echo
	var seq atomic.Int64

	send := func(b *testing.B, h http.Handler, key string) time.Duration {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{"product_id":1,"quantity":1}`))
		req.Header.Set("Authorization", "Bearer "+alice)
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		d := time.Since(start)
		if rec.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		return d
	}
	report := func(b *testing.B, guardedNs, baselineNs int64) {
		g, u := float64(guardedNs)/float64(b.N), float64(baselineNs)/float64(b.N)
		b.ReportMetric(g/1e3, "guarded-µs/req")
		b.ReportMetric(u/1e3, "unguarded-µs/req")
		b.ReportMetric(u/g, "guarded÷unguarded")
	}

	b.Run("serial", func(b *testing.B) {
		var g, u int64
		for b.Loop() {
			key := fmt.Sprintf("bench-%d", seq.Add(1))
			g += int64(send(b, guarded, key))
			u += int64(send(b, baseline, key))
		}
		report(b, g, u)
	})
	b.Run("parallel", func(b *testing.B) {
		var g, u atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := fmt.Sprintf("bench-%d", seq.Add(1))
				g.Add(int64(send(b, guarded, key)))
				u.Add(int64(send(b, baseline, key)))
			}
		})
		report(b, g.Load(), u.Load())
	})
}
