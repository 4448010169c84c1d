package outbox_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/outbox"
	"idemshop/internal/testenv"
)

// The reaper deletes what was published more than the retention ago, in batches, and nothing else:
// an unpublished row is an event still owed, however old; a row another replica's reaper holds is
// left to it (or to the next run), without waiting for it.
func TestReaperDeletesOnlyRowsPublishedBeforeTheRetention(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	// 25 published 8 days ago, 3 never published (created 30 days ago, the broker refused them), 4
	// published a day ago, 1 published 8 days ago that another reaper holds locked.
	require.NoError(t, env.DB.Exec(`
		INSERT INTO outbox (event_id, routing_key, payload, created_at, published_at)
		SELECT gen_random_uuid(), 'order.paid', jsonb_build_object('tag', 'old-' || g), now() - interval '9 days', now() - interval '8 days'
		FROM generate_series(1, 25) g;
		INSERT INTO outbox (event_id, routing_key, payload, created_at, attempts, last_error)
		SELECT gen_random_uuid(), 'order.paid', jsonb_build_object('tag', 'owed-' || g), now() - interval '30 days', 7, 'unroutable'
		FROM generate_series(1, 3) g;
		INSERT INTO outbox (event_id, routing_key, payload, created_at, published_at)
		SELECT gen_random_uuid(), 'order.paid', jsonb_build_object('tag', 'recent-' || g), now() - interval '2 days', now() - interval '1 day'
		FROM generate_series(1, 4) g;
		INSERT INTO outbox (event_id, routing_key, payload, created_at, published_at)
		VALUES (gen_random_uuid(), 'order.paid', '{"tag":"held"}', now() - interval '9 days', now() - interval '8 days');`).Error)

	held := env.DB.Begin()
	require.NoError(t, held.Error)
	defer held.Rollback()
	require.NoError(t, held.Exec(`SELECT id FROM outbox WHERE payload->>'tag' = 'held' FOR UPDATE`).Error)

	r, err := outbox.NewReaper(env.DB, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), 7*24*time.Hour, 10)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := r.RunOnce(ctx)
	require.NoError(t, err, "a held row is skipped, not waited for")
	assert.EqualValues(t, 25, n, "three batches of at most 10")
	assert.ElementsMatch(t, []string{"held", "owed-1", "owed-2", "owed-3", "recent-1", "recent-2", "recent-3", "recent-4"}, tags(t, env))

	require.NoError(t, held.Rollback().Error)
	n, err = r.RunOnce(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the held row, once the other reaper let go")
	assert.ElementsMatch(t, []string{"owed-1", "owed-2", "owed-3", "recent-1", "recent-2", "recent-3", "recent-4"}, tags(t, env))
}

func tags(t *testing.T, env *testenv.Env) []string {
	t.Helper()
	var left []string
	require.NoError(t, env.DB.Raw(`SELECT payload->>'tag' FROM outbox`).Scan(&left).Error)
	return left
}

func TestNewReaperRefusesBadArguments(t *testing.T) {
	t.Parallel()
	_, err := outbox.NewReaper(nil, slog.Default(), prometheus.NewRegistry(), time.Hour, 1)
	assert.Error(t, err)
	_, err = outbox.NewReaper(&gorm.DB{}, slog.Default(), prometheus.NewRegistry(), 0, 1)
	assert.ErrorContains(t, err, "retention 0s")
}

// Autovacuum vacuums the outbox after a fixed number of dead rows (migration 00011), not after a fifth
// of a table that holds OUTBOX_RETENTION of events.
func TestOutboxAutovacuumThresholdIsFixed(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var opts []string
	require.NoError(t, env.DB.Raw(`SELECT unnest(reloptions) FROM pg_class WHERE oid = 'outbox'::regclass`).Scan(&opts).Error)
	assert.ElementsMatch(t, []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000"}, opts)
}
