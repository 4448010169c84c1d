package ordersapp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/config"
	"idemshop/internal/testenv"
)

// The running shop reaps three tables on REAPER_INTERVAL: idempotency keys after
// IDEMPOTENCY_RETENTION, published outbox rows after OUTBOX_RETENTION, the callback audit after
// CALLBACK_AUDIT_RETENTION; what is younger stays.
func TestWorkersReapKeysOutboxRowsAndCallbackAuditAfterTheirRetention(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	woken := relayOnlyWoken(env)
	rp := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) {
		woken(c)
		c.ReaperInterval = 20 * time.Millisecond
		c.IdempotencyRetention = time.Hour
		c.OutboxRetention = 2 * time.Hour
		c.CallbackAuditRetention = 3 * time.Hour
	}})
	require.NoError(t, env.DB.Exec(`
		INSERT INTO outbox (event_id, routing_key, payload, created_at, published_at) VALUES
		  (gen_random_uuid(), 'order.paid', '{"tag":"old"}', now() - interval '3 hours', now() - interval '3 hours'),
		  (gen_random_uuid(), 'order.paid', '{"tag":"young"}', now() - interval '1 hour', now() - interval '1 hour');
		INSERT INTO idempotency_keys (user_id, idempotency_key, method, path, fingerprint, state, created_at) VALUES
		  (1, 'old', 'POST', '/v1/orders', 'fp', 'COMPLETED', now() - interval '2 hours'),
		  (1, 'young', 'POST', '/v1/orders', 'fp', 'COMPLETED', now() - interval '30 minutes');
		INSERT INTO payment_callbacks (event_id, signature_ok, applied, outcome, reason, received_at) VALUES
		  ('old', false, false, 'rejected', 'signature', now() - interval '4 hours'),
		  ('young', false, false, 'rejected', 'signature', now() - interval '2 hours');`).Error)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { rp.app.RunWorkers(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	eventually(t, 10*time.Second, "the old outbox row, the old key and the old audit row reaped", func() bool {
		return count(t, env.DB, "outbox", "payload->>'tag' = 'old'") == 0 &&
			count(t, env.DB, "idempotency_keys", "idempotency_key = 'old'") == 0 &&
			count(t, env.DB, "payment_callbacks", "event_id = 'old'") == 0
	})
	assert.EqualValues(t, 1, count(t, env.DB, "outbox", "payload->>'tag' = 'young'"))
	assert.EqualValues(t, 1, count(t, env.DB, "idempotency_keys", "idempotency_key = 'young'"))
	assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks", "event_id = 'young'"))
	assert.EqualValues(t, 1, metricValue(t, rp.reg, "idemshop_outbox_reaped_total", nil))
	assert.EqualValues(t, 1, metricValue(t, rp.reg, "idemshop_callback_audit_reaped_total", nil))
}

// A row is reaped only when both clocks say it is past its retention, the database's (which stamped
// it) and the process's: the database's alone, stepped forward two hours, reaped every key at once,
// and a retry a minute old created a second order (a clock-skew helper's finding, 2026-12-07). Here
// the process's clock is three hours behind the database's, as if the database had stepped forward:
// nothing goes until the process's clock agrees. Guards the reap-keys-2-clocks,
// reap-outbox-2-clocks and reap-audit-2-clocks mutants (internal/mutants).
func TestReapersWaitForBothClocks(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) {
		c.IdempotencyRetention = time.Hour
		c.OutboxRetention = 2 * time.Hour
		c.CallbackAuditRetention = 3 * time.Hour
	}})
	require.NoError(t, env.DB.Exec(`
		INSERT INTO outbox (event_id, routing_key, payload, created_at, published_at) VALUES
		  (gen_random_uuid(), 'order.paid', '{"tag":"old"}', now() - interval '3 hours', now() - interval '3 hours');
		INSERT INTO idempotency_keys (user_id, idempotency_key, method, path, fingerprint, state, created_at) VALUES
		  (1, 'old', 'POST', '/v1/orders', 'fp', 'COMPLETED', now() - interval '2 hours');
		INSERT INTO payment_callbacks (event_id, signature_ok, applied, outcome, reason, received_at) VALUES
		  ('old', false, false, 'rejected', 'signature', now() - interval '4 hours');`).Error)
	left := func() [3]int64 {
		return [3]int64{count(t, env.DB, "idempotency_keys", "idempotency_key = 'old'"),
			count(t, env.DB, "outbox", "payload->>'tag' = 'old'"),
			count(t, env.DB, "payment_callbacks", "event_id = 'old'")}
	}
	ctx := context.Background()
	reapers := []interface {
		RunOnce(context.Context) (int64, error)
	}{rp.app.Reaper, rp.app.OutboxReaper, rp.app.AuditReaper}
	behind := func() time.Time { return time.Now().Add(-3 * time.Hour) }
	rp.app.Reaper.Now, rp.app.OutboxReaper.Now, rp.app.AuditReaper.Now = behind, behind, behind
	for _, r := range reapers {
		n, err := r.RunOnce(ctx)
		require.NoError(t, err)
		assert.Zero(t, n)
	}
	assert.Equal(t, [3]int64{1, 1, 1}, left(), "key, outbox row and audit row kept while the process's clock says they are young")

	rp.app.Reaper.Now, rp.app.OutboxReaper.Now, rp.app.AuditReaper.Now = nil, nil, nil
	for _, r := range reapers {
		n, err := r.RunOnce(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
	}
	assert.Equal(t, [3]int64{0, 0, 0}, left(), "reaped once both clocks agree")
}
