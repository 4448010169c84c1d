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
