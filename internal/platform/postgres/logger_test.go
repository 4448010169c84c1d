package postgres

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	gormlogger "gorm.io/gorm/logger"
)

// A statement cancelled by its caller (a SIGTERM's shutdown) is not an operator's ERROR line.
func TestHandledLoggerKeepsCancelledStatementsOutOfErrors(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := handledLogger{Interface: gormlogger.NewSlogLogger(logger, gormlogger.Config{LogLevel: gormlogger.Warn}), logger: logger}
	sql := func() (string, int64) { return "SELECT count(*) FROM outbox", 0 }
	l.Trace(context.Background(), time.Now(), sql, fmt.Errorf("query: %w", context.Canceled))
	assert.Contains(t, buf.String(), "level=DEBUG")
	assert.NotContains(t, buf.String(), "level=ERROR")
}

// A statement that succeeded quickly is never rendered (GORM's logger would build its SQL text only to
// drop it); a slow one is logged at WARN with its SQL.
func TestHandledLoggerRendersOnlyWhatItLogs(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := handledLogger{Interface: gormlogger.NewSlogLogger(logger, gormlogger.Config{LogLevel: gormlogger.Warn,
		SlowThreshold: 100 * time.Millisecond}), logger: logger, slow: 100 * time.Millisecond, level: gormlogger.Warn}
	rendered := 0
	sql := func() (string, int64) { rendered++; return "SELECT 1", 1 }

	l.Trace(context.Background(), time.Now(), sql, nil)
	assert.Zero(t, rendered, "a fast statement is not rendered")
	assert.Empty(t, buf.String())

	l.Trace(context.Background(), time.Now().Add(-time.Second), sql, nil)
	assert.Equal(t, 1, rendered)
	assert.Contains(t, buf.String(), "level=WARN")
	assert.Contains(t, buf.String(), "SELECT 1")

	buf.Reset()
	l.LogMode(gormlogger.Info).Trace(context.Background(), time.Now(), sql, nil)
	assert.Equal(t, 2, rendered, "db.Debug() logs every statement")
	assert.Contains(t, buf.String(), "SELECT 1")
}
