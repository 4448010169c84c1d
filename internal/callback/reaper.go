package callback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/retry"
)

// AuditReaper deletes payment_callbacks rows received more than the retention ago
// (CALLBACK_AUDIT_RETENTION), in bounded batches.
//
// Why the audit needs one: every POST to the callback route leaves a row, a rejected one too, and the
// route is open to anyone who can reach it (a forged signature is recorded as such). Without a reaper
// the table grows with every copy the platform sends and every forgery, for ever. Nothing decides from
// an old audit row: the business tables carry every guard (the state machine, the refund events'
// unique index), so deleting the log changes no answer, only what an operator can still read
// ("3 received, 1 applied" on an order older than the retention reads 0 and 0).
type AuditReaper struct {
	db        *gorm.DB
	logger    *slog.Logger
	retention time.Duration
	batch     int
	reaped    prometheus.Counter
}

// NewAuditReaper returns an AuditReaper that keeps audit rows for at least retention and deletes at most
// batch rows per statement. It registers idemshop_callback_audit_reaped_total in reg.
func NewAuditReaper(db *gorm.DB, logger *slog.Logger, reg prometheus.Registerer, retention time.Duration, batch int) (*AuditReaper, error) {
	if db == nil || logger == nil || reg == nil {
		return nil, errors.New("callback: NewAuditReaper needs db, logger and a registry")
	}
	if retention <= 0 || batch <= 0 {
		return nil, fmt.Errorf("callback: audit reaper retention %s and batch %d must be > 0", retention, batch)
	}
	reaped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idemshop_callback_audit_reaped_total",
		Help: "payment_callbacks audit rows deleted after CALLBACK_AUDIT_RETENTION.",
	})
	if err := reg.Register(reaped); err != nil {
		return nil, fmt.Errorf("callback: register audit reaper metrics: %w", err)
	}
	return &AuditReaper{db: db, logger: logger, retention: retention, batch: batch, reaped: reaped}, nil
}

// RunOnce deletes every audit row received before now - retention, the oldest first through
// payment_callbacks_received_idx (migration 00015), and returns how many it deleted. The cutoff is on
// the database's clock, the one that wrote received_at; SKIP LOCKED lets replicas reap at once.
func (r *AuditReaper) RunOnce(ctx context.Context) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, r.db, r.batch, func(n int64) { r.reaped.Add(float64(n)) },
		`DELETE FROM payment_callbacks WHERE id IN (
			SELECT id FROM payment_callbacks
			WHERE received_at < now() - make_interval(secs => ?)
			ORDER BY received_at
			LIMIT ?
			FOR UPDATE SKIP LOCKED)`, r.retention.Seconds())
	if err != nil {
		return n, fmt.Errorf("reap payment callback audit: %w", err)
	}
	return n, nil
}

// Run calls RunOnce every interval until ctx is done.
func (r *AuditReaper) Run(ctx context.Context, interval time.Duration) {
	retry.Every(ctx, interval, func() {
		n, err := r.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.logger.Error("callback audit reaper failed", "err", err)
		} else if n > 0 {
			r.logger.Info("payment callback audit rows reaped", "deleted", n, "retention", r.retention)
		}
	})
}
