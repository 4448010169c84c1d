package callback

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every outcome is a series from the start, at 0: a dashboard shows "0 duplicates", not a gap.
func TestMetricsPrecreateEveryOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.count(OutcomeDuplicate)
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, families, 1)
	assert.Equal(t, "idemshop_payments_callbacks_total", families[0].GetName())
	got := map[string]float64{}
	for _, s := range families[0].GetMetric() {
		got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
	}
	assert.Equal(t, map[string]float64{"applied": 0, "duplicate": 1, "stale": 0, "recorded": 0, "rejected": 0}, got)
}
