package outbox

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// How the relay wakes on commit (LISTEN/NOTIFY).
//
// A writer that calls Notify in its transaction (outbox.go) has PostgreSQL send a notification on
// NotifyChannel once that transaction commits, to every session of the same database that has run
// LISTEN NotifyChannel; a rollback drops it. The relay keeps one such session, on a connection of its
// own (not one of the pool's: a pooled connection goes back to other callers between statements, and a
// notification arrives whenever it likes). Each notification wakes the publishing loop, which drains
// the outbox as it would after a poll.
//
// A notification carries no data and may be lost (the listen connection drops, the relay starts after
// the commit, the writer did not notify): it is only a hint. The outbox table stays the truth, and the
// poll every PollInterval still finds every row, so no event depends on a notification arriving.
// No writer of the shop notifies (Notify says why): they run in the relay's process and wake it there
// after their commit (Relay.Wake), at no database cost; the relays of other replicas find those rows
// on their poll. The listener stays for writers of other processes that can afford to notify.

// NotifyChannel is the channel Notify notifies on and the relay listens on. NOTIFY is scoped to one
// database, so relays of other databases (other tests, other bench runs) never hear it.
const NotifyChannel = "outbox_inserted"

// ListenApplicationName is the application_name of the relay's listen connection, so that it can be
// found in pg_stat_activity: its own, whatever DATABASE_URL names the pool, with the process's pid, as
// every connection's (postgres.ApplicationName); two replicas' listeners looked alike (a verifier's
// finding, 2026-12-07).
var ListenApplicationName = fmt.Sprintf("idemshop-outbox-listener (pid %d)", os.Getpid())

// listen is one session of the listener: it opens the listen connection, runs LISTEN and turns every
// notification into a wake-up of the publishing loop, until the connection fails or ctx ends. Run
// starts it again after the reconnect backoff; meanwhile the relay goes on polling.
func (r *Relay) listen(ctx context.Context, progress func()) error {
	if r.beforeListen != nil {
		if err := r.beforeListen(); err != nil {
			return err
		}
	}
	cfg, err := r.listenConfig(ctx)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("outbox: open the listen connection: %w", err)
	}
	// Closing says goodbye to the server; on a connection that already failed it returns at once.
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fmt.Errorf("outbox: LISTEN %s: %w", NotifyChannel, err)
	}
	// Rows committed while nobody listened sent their notifications to no one: drain them now rather
	// than at the next poll. Before the gauge says listening, so that a reader of it knows this
	// wake-up was asked for.
	r.Wake()
	r.metrics.listening.Set(1)
	defer r.metrics.listening.Set(0)
	progress()
	r.logger.Info("outbox relay listening", "channel", NotifyChannel)
	for {
		// Blocks until a notification arrives, the connection fails (a terminated backend, a
		// restarted server) or ctx ends.
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("outbox: wait for a notification: %w", err)
		}
		r.metrics.notifications.Inc()
		r.Wake()
	}
}

// listenConfig returns the settings of the listen connection: the URL the pool connects with, plus an
// application_name. GORM does not keep that URL, so one pooled connection is borrowed just long enough
// to read it from pgx.
func (r *Relay) listenConfig(ctx context.Context) (*pgx.ConnConfig, error) {
	sqlDB, err := r.db.DB()
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	borrowed, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: borrow a connection to read its settings: %w", err)
	}
	defer borrowed.Close()
	var url string
	err = borrowed.Raw(func(driverConn any) error {
		c, ok := driverConn.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("outbox: LISTEN needs the pgx driver, the pool uses %T", driverConn)
		}
		url = c.Conn().Config().ConnString()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if url == "" {
		// An empty string would make pgx connect with the PG* environment defaults: maybe another
		// database, whose notifications are not ours.
		return nil, errors.New("outbox: the pool's connection string is unknown")
	}
	// A fresh parse, not a copy of the pooled connection's config: the copy would carry that
	// connection's notification handler, and pgx would deliver our notifications to it.
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("outbox: parse the pool's connection string: %w", err)
	}
	cfg.RuntimeParams["application_name"] = ListenApplicationName
	return cfg, nil
}
