package idempotency_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/idempotency"
	"idemshop/internal/testenv"
)

func TestReaperDeletesOnlyExpiredFinishedKeysInBatches(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	// 25 expired COMPLETED, 3 expired PROCESSING (outcome unknown: kept for the sweeper), 5 fresh.
	require.NoError(t, env.DB.Exec(`
		INSERT INTO idempotency_keys (user_id, idempotency_key, method, path, fingerprint, state, created_at)
		SELECT 1, 'old-' || g, 'POST', '/v1/orders', 'fp', 'COMPLETED', now() - interval '25 hours' FROM generate_series(1, 25) g;
		INSERT INTO idempotency_keys (user_id, idempotency_key, method, path, fingerprint, state, created_at)
		SELECT 1, 'stuck-' || g, 'POST', '/v1/orders/1/pay', 'fp', 'PROCESSING', now() - interval '25 hours' FROM generate_series(1, 3) g;
		INSERT INTO idempotency_keys (user_id, idempotency_key, method, path, fingerprint, state, created_at)
		SELECT 2, 'new-' || g, 'POST', '/v1/orders', 'fp', 'COMPLETED', now() - interval '23 hours' FROM generate_series(1, 5) g;`).Error)

	m := idempotency.NewMetrics(prometheus.NewRegistry())
	r, err := idempotency.NewReaper(env.DB, m, slog.New(slog.DiscardHandler), 24*time.Hour, 10)
	require.NoError(t, err)
	n, err := r.RunOnce(context.Background())
	require.NoError(t, err)
	assert.EqualValues(t, 25, n, "three batches of at most 10")

	var left []string
	require.NoError(t, env.DB.Raw(`SELECT idempotency_key FROM idempotency_keys ORDER BY idempotency_key`).Scan(&left).Error)
	assert.Equal(t, []string{"new-1", "new-2", "new-3", "new-4", "new-5", "stuck-1", "stuck-2", "stuck-3"}, left)

	n, err = r.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n, "a second run finds nothing")
}

func TestNewReaperRefusesBadArguments(t *testing.T) {
	t.Parallel()
	m := idempotency.NewMetrics(prometheus.NewRegistry())
	_, err := idempotency.NewReaper(nil, m, slog.Default(), time.Hour, 1)
	assert.Error(t, err)
}
