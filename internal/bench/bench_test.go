package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"idemshop/internal/bench"
	"idemshop/internal/lab"
	"idemshop/internal/lab/labtest"
)

// TestRunShapeAndInvariants runs every measure, growth mode included, for a tiny duration against
// the shop in-process, and checks what does not depend on the machine: the JSON shape of DESIGN.md
// and zero violations. No figure is asserted.
func TestRunShapeAndInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL, Redis and RabbitMQ")
	}
	env := labtest.NewEnv(t, nil)
	rep, err := bench.Run(context.Background(), env, bench.Config{Duration: 300 * time.Millisecond, Concurrency: 4,
		OutboxRate: 100, Growth: true, GrowthSizes: []int64{200, 1000}})
	require.NoError(t, err)

	var text bytes.Buffer
	bench.WriteText(&text, rep)
	t.Log("\n" + text.String())
	for _, r := range rep.Results {
		require.Empty(t, r.Error, r.Name)
		require.Zero(t, r.Violations, "%s: %v", r.Name, r.ViolationDetails)
	}
	require.True(t, rep.Passed())

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var shape struct {
		Results []map[string]any `json:"results"`
	}
	require.NoError(t, json.Unmarshal(b, &shape))
	var names []string
	for _, r := range shape.Results {
		for _, k := range []string{"name", "rps", "baseline_rps", "ratio", "p50_ms", "p99_ms", "errors", "violations"} {
			require.Contains(t, r, k)
		}
		names = append(names, r["name"].(string))
	}
	require.Equal(t, []string{"create_order_fresh", "create_order_replay", "callback_storm", "points_consumer",
		"outbox_lag", "outbox_lag_external", "create_p99_growth"}, names)
	require.Len(t, rep.Growth, 2)

	var page bytes.Buffer
	require.NoError(t, bench.WriteHTML(&page, rep))
	require.Contains(t, page.String(), "<svg")
	require.NotContains(t, page.String(), "<script", "static report: no scripts, no CDN")
}

func TestRunRefusesRemoteTargets(t *testing.T) {
	t.Parallel()
	_, err := bench.Run(context.Background(), &lab.Env{OrdersURL: "http://example.com:8080"},
		bench.Config{Duration: time.Second})
	require.ErrorContains(t, err, "loopback")
}
