package callback

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
)

// AuditReaper deletes payment_callbacks rows received more than the retention ago
// (CALLBACK_AUDIT_RETENTION), in bounded batches. RunOnce and Run come from postgres.Reaper.
//
// Why the audit needs one: every POST to the callback route leaves a row, a rejected one too, and the
// route is open to anyone who can reach it (a forged signature is recorded as such). Without a reaper
// the table grows with every copy the platform sends and every forgery, for ever. Nothing decides from
// an old audit row: the business tables carry every guard (the state machine, the refund events'
// unique index), so deleting the log changes no answer, only what an operator can still read
// ("3 received, 1 applied" on an order older than the retention reads 0 and 0).
type AuditReaper struct{ *postgres.Reaper }

// NewAuditReaper returns an AuditReaper that keeps audit rows for at least retention and deletes at most
// batch rows per statement. It registers idemshop_callback_audit_reaped_total in reg.
func NewAuditReaper(db *gorm.DB, logger *slog.Logger, reg prometheus.Registerer, retention time.Duration, batch int) (*AuditReaper, error) {
	if reg == nil {
		return nil, errors.New("callback: NewAuditReaper needs a registry")
	}
	reaped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idemshop_callback_audit_reaped_total",
		Help: "payment_callbacks audit rows deleted after CALLBACK_AUDIT_RETENTION.",
	})
	// The oldest first, through payment_callbacks_received_idx (migration 00015); the cutoff counts
	// from the earlier of the database's clock (the one that wrote received_at) and this process's
	// (postgres.Reaper).
	r, err := postgres.NewReaper(postgres.Reaper{What: "payment callback audit rows", DB: db, Logger: logger,
		Retention: retention, Batch: batch, Deleted: func(n int64) { reaped.Add(float64(n)) },
		Delete: `DELETE FROM payment_callbacks WHERE id IN (
			SELECT id FROM payment_callbacks
			WHERE received_at < LEAST(now(), ?) - make_interval(secs => ?)
			ORDER BY received_at
			LIMIT ?
			FOR UPDATE SKIP LOCKED)`,
		Args: []any{retention.Seconds()}})
	if err != nil {
		return nil, err
	}
	if err := reg.Register(reaped); err != nil {
		return nil, fmt.Errorf("callback: register audit reaper metrics: %w", err)
	}
	return &AuditReaper{r}, nil
}
