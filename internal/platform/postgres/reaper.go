package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"idemshop/internal/platform/retry"
)

// Reaper runs one retention DELETE in batches (DeleteInBatches), once or every interval. The key, outbox
// and callback-audit reapers are each one: which rows may go is theirs to say, in their own statement
// (idempotency.NewReaper, outbox.NewReaper, callback.NewAuditReaper); the loop, the batching and the
// logging are the same and live here.
//
// A retention is a promise to clients ("a retry within 24 h replays"), so a row's age is the smaller
// of what two clocks say: Delete's first parameter is this process's clock, and each statement counts
// from LEAST(now(), it). The database's clock alone, stepped forward by two hours (NTP, a restored VM),
// reaped every key at once, and a retry a minute old created a second order (a clock-skew helper's
// finding, 2026-12-07); the process's clock alone, running ahead, would do the same. A clock behind
// only keeps rows longer.
type Reaper struct {
	What      string // the rows, for logs and errors: "idempotency keys"
	DB        *gorm.DB
	Logger    *slog.Logger
	Retention time.Duration    // rows are kept at least this long; Args carry it into Delete
	Batch     int              // rows per DELETE, the statement's last parameter
	Delete    string           // DeleteInBatches' del
	Args      []any            // del's parameters but the first (Now's reading) and the last
	Deleted   func(n int64)    // each statement's count (a metric)
	Now       func() time.Time // this process's clock (nil: time.Now); tests set one stepped back
}

// NewReaper checks r and returns it: a DB, Logger and Deleted, and a Retention and Batch > 0.
func NewReaper(r Reaper) (*Reaper, error) {
	if r.DB == nil || r.Logger == nil || r.Deleted == nil {
		return nil, fmt.Errorf("reaper of %s needs a db, a logger and a counter", r.What)
	}
	if r.Retention <= 0 || r.Batch <= 0 {
		return nil, fmt.Errorf("reaper of %s: retention %s and batch %d must be > 0", r.What, r.Retention, r.Batch)
	}
	if r.Delete == "" {
		return nil, errors.New("reaper of " + r.What + " needs its DELETE")
	}
	return &r, nil
}

// RunOnce deletes every row the statement picks, Batch at a time, and returns how many it deleted.
func (r *Reaper) RunOnce(ctx context.Context) (int64, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	n, err := DeleteInBatches(ctx, r.DB, r.Batch, r.Deleted, r.Delete, append([]any{now()}, r.Args...)...)
	if err != nil {
		return n, fmt.Errorf("reap %s: %w", r.What, err)
	}
	return n, nil
}

// Run calls RunOnce every interval until ctx is done.
func (r *Reaper) Run(ctx context.Context, interval time.Duration) {
	retry.Every(ctx, interval, func() {
		n, err := r.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.Logger.Error("reaper failed", "rows", r.What, "err", err)
		} else if n > 0 {
			r.Logger.Info("rows reaped", "rows", r.What, "deleted", n, "retention", r.Retention)
		}
	})
}
