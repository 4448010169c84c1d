package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/retry"
)

// Reaper deletes idempotency records older than the retention, in bounded batches so that one run never
// holds locks on millions of rows. PROCESSING records are never reaped: the outcome of their work is
// unknown, and the sweeper (pay flow) must resolve them first.
type Reaper struct {
	db        *gorm.DB
	metrics   *Metrics
	logger    *slog.Logger
	retention time.Duration
	batch     int
}

// NewReaper returns a Reaper keeping records for at least retention, deleting at most batch per statement.
func NewReaper(db *gorm.DB, metrics *Metrics, logger *slog.Logger, retention time.Duration, batch int) (*Reaper, error) {
	if db == nil || metrics == nil || logger == nil {
		return nil, errors.New("idempotency: NewReaper needs db, metrics and logger")
	}
	if retention <= 0 || batch <= 0 {
		return nil, fmt.Errorf("idempotency: reaper retention %s and batch %d must be > 0", retention, batch)
	}
	return &Reaper{db: db, metrics: metrics, logger: logger, retention: retention, batch: batch}, nil
}

// RunOnce deletes every reapable record created before now - retention and returns how many it deleted.
// SKIP LOCKED lets several replicas reap at once without waiting on each other.
func (r *Reaper) RunOnce(ctx context.Context) (int64, error) {
	// The cutoff is on the database's clock, the one that wrote created_at (and every lease): a
	// replica whose clock runs ahead must not reap keys a client may still retry.
	n, err := postgres.DeleteInBatches(ctx, r.db, r.batch, func(n int64) { r.metrics.reaped.Add(float64(n)) },
		`DELETE FROM idempotency_keys WHERE id IN (
			SELECT id FROM idempotency_keys
			WHERE created_at < now() - make_interval(secs => ?) AND state <> ?
			ORDER BY created_at
			LIMIT ?
			FOR UPDATE SKIP LOCKED)`, r.retention.Seconds(), StateProcessing)
	if err != nil {
		return n, fmt.Errorf("reap idempotency keys: %w", err)
	}
	return n, nil
}

// Run calls RunOnce every interval until ctx is done.
func (r *Reaper) Run(ctx context.Context, interval time.Duration) {
	retry.Every(ctx, interval, func() {
		n, err := r.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.logger.Error("idempotency reaper failed", "err", err)
		} else if n > 0 {
			r.logger.Info("idempotency keys reaped", "deleted", n, "retention", r.retention)
		}
	})
}
