package idempotency

import (
	"errors"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
)

// Reaper deletes idempotency records older than the retention, in bounded batches so that one run never
// holds locks on millions of rows. PROCESSING records are never reaped: the outcome of their work is
// unknown, and the sweeper (pay flow) must resolve them first. RunOnce and Run come from
// postgres.Reaper.
type Reaper struct{ *postgres.Reaper }

// NewReaper returns a Reaper keeping records for at least retention, deleting at most batch per statement.
func NewReaper(db *gorm.DB, metrics *Metrics, logger *slog.Logger, retention time.Duration, batch int) (*Reaper, error) {
	if metrics == nil {
		return nil, errors.New("idempotency: NewReaper needs metrics")
	}
	// The cutoff counts from the earlier of the database's clock (the one that wrote created_at) and
	// this process's: a key is reaped only when both say it is past its retention (postgres.Reaper).
	// SKIP LOCKED lets several replicas reap at once without waiting on each other.
	r, err := postgres.NewReaper(postgres.Reaper{What: "idempotency keys", DB: db, Logger: logger,
		Retention: retention, Batch: batch, Deleted: func(n int64) { metrics.reaped.Add(float64(n)) },
		Delete: `DELETE FROM idempotency_keys WHERE id IN (
			SELECT id FROM idempotency_keys
			WHERE created_at < LEAST(now(), ?) - make_interval(secs => ?) AND state <> ?
			ORDER BY created_at
			LIMIT ?
			FOR UPDATE SKIP LOCKED)`,
		Args: []any{retention.Seconds(), StateProcessing}})
	if err != nil {
		return nil, err
	}
	return &Reaper{r}, nil
}
