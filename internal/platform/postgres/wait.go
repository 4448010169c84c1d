package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"gorm.io/gorm"

	"idemshop/internal/platform/retry"
	"idemshop/migrations"
)

// Wait says how OpenWhenUp waits (docs/reliability.md, "Start-up order").
type Wait struct {
	Backoff retry.Backoff
	Logger  *slog.Logger
	// Failed, when non-nil, gets each failed attempt's error (a readiness endpoint shows it).
	Failed func(error)
	// Create makes each attempt create the database when it is missing (orders, which owns the
	// schema); without it a missing database is waited for, like a server that does not answer yet.
	Create bool
	// Migrated makes each attempt also require every embedded migration to be applied: a process that
	// only uses the schema (points-consumer) waits for the one that migrates it (orders).
	Migrated bool
}

// CheckURL refuses a DATABASE_URL that no amount of waiting makes usable (malformed, or naming no
// database), so that a configuration mistake stops the process at once.
func CheckURL(url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if cfg.Database == "" {
		return errors.New("DATABASE_URL names no database")
	}
	return nil
}

// OpenWhenUp is Open, retried until the server answers and the database exists (and, with w.Migrated,
// is migrated), or ctx ends. A refused password or a missing role stops it at once: waiting would not
// fix them.
func OpenWhenUp(ctx context.Context, url string, o Options, w Wait) (*gorm.DB, error) {
	if err := CheckURL(url); err != nil {
		return nil, err
	}
	var db *gorm.DB
	err := retry.Until(ctx, w.Logger, "postgres", w.Backoff, w.Failed, func(ctx context.Context) error {
		if w.Create {
			if err := EnsureDatabase(ctx, url); err != nil {
				return classify(err)
			}
		}
		d, err := Open(ctx, url, o)
		if err != nil {
			return classify(err)
		}
		if w.Migrated {
			if err := pending(ctx, d); err != nil {
				_ = Close(d)
				return err
			}
		}
		db = d
		return nil
	})
	if err != nil {
		return nil, err
	}
	return db, nil
}

// classify marks the failures that are configuration, not timing: invalid_password (28P01) and
// invalid_authorization_specification (28000: no such role, no pg_hba.conf entry).
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000") {
		return retry.Permanent(err)
	}
	return err
}

// pending fails while some embedded migration is not applied yet. It takes no migration lock, so it
// neither waits for nor delays the process that migrates.
func pending(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return migrationsPending(ctx, sqlDB)
}

func migrationsPending(ctx context.Context, db *sql.DB) error {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return retry.Permanent(fmt.Errorf("migration provider: %w", err))
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("database not migrated yet: read schema version: %w", err)
	}
	if current < target {
		return fmt.Errorf("database not migrated yet: schema version %d, want %d", current, target)
	}
	return nil
}
