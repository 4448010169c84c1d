// Package migrations embeds the goose SQL migrations, so every binary carries its own schema.
package migrations

import "embed"

// FS holds the *.sql migrations, applied in version order by internal/platform/postgres.Migrate.
//
//go:embed *.sql
var FS embed.FS
