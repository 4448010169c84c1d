package outbox

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"idemshop/internal/platform/postgres"
)

// Reaper deletes outbox rows published more than the retention ago (OUTBOX_RETENTION; published_at,
// which the relay sets in the transaction that marks the broker's confirms), in bounded batches, so that the outbox holds the events still owed plus a window of recent history
// instead of every event ever sent. RunOnce and Run come from postgres.Reaper.
//
// A row that is not published is never deleted, however old: it is an event the relay still owes
// (at-least-once), waiting for a broker that is down or a queue that is not bound yet. Deleting it
// would lose the event in silence; the consumer's dedup cannot bring back what was never sent.
//
// Why it matters to the relay, not only to the disk: the relay marks a row published with an UPDATE,
// which leaves the row's old entry in the partial index of pending rows until VACUUM removes it, and
// every poll walks those entries (docs/performance.md). A bounded table keeps each vacuum of the
// outbox short; migration 00011 asks autovacuum to vacuum it after a fixed number of changes instead
// of a fifth of the table, and gives the reaper an index of the published rows by published_at
// (00012 brings a database migrated with 00011's first text, a BRIN index, to the same).
type Reaper struct{ *postgres.Reaper }

// NewReaper returns a Reaper that keeps published rows for at least retention and deletes at most
// batch rows per statement. It registers idemshop_outbox_reaped_total in reg.
func NewReaper(db *gorm.DB, logger *slog.Logger, reg prometheus.Registerer, retention time.Duration, batch int) (*Reaper, error) {
	if reg == nil {
		return nil, errors.New("outbox: NewReaper needs a registry")
	}
	reaped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idemshop_outbox_reaped_total",
		Help: "Published outbox rows deleted after OUTBOX_RETENTION.",
	})
	// The cutoff counts from the earlier of the database's clock (the one that wrote published_at) and
	// this process's (postgres.Reaper). published_at < cutoff is false for NULL: an unpublished row is
	// never reaped. The oldest first, through
	// outbox_published_idx (migrations 00011 and 00012), which holds published rows only. SKIP LOCKED:
	// several replicas reap at once without waiting on each other; a row another one holds is left to
	// it, or to the next run.
	r, err := postgres.NewReaper(postgres.Reaper{What: "published outbox rows", DB: db, Logger: logger,
		Retention: retention, Batch: batch, Deleted: func(n int64) { reaped.Add(float64(n)) },
		Delete: `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox
			WHERE published_at < LEAST(now(), ?) - make_interval(secs => ?)
			ORDER BY published_at
			LIMIT ?
			FOR UPDATE SKIP LOCKED)`,
		Args: []any{retention.Seconds()}})
	if err != nil {
		return nil, err
	}
	if err := reg.Register(reaped); err != nil {
		return nil, fmt.Errorf("outbox: register reaper metrics: %w", err)
	}
	return &Reaper{r}, nil
}
