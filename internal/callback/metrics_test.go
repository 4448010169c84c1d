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
	m.reject(RejectedSignature)
	require.Len(t, families, 2)
	got := map[string]map[string]float64{}
	families, err = reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		got[f.GetName()] = map[string]float64{}
		for _, s := range f.GetMetric() {
			got[f.GetName()][s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
		}
	}
	assert.Equal(t, map[string]map[string]float64{
		"idemshop_payments_callbacks_total": {"applied": 0, "duplicate": 1, "stale": 0, "recorded": 0, "rejected": 1},
		"idemshop_payments_callbacks_rejected_total": {"signature_invalid": 1, "malformed": 0, "order_not_found": 0,
			"amount_mismatch": 0, "payment_mismatch": 0, "event_id_reused": 0, "not_applied": 0},
	}, got)
}
