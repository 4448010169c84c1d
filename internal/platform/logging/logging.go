// Package logging builds the process's log/slog logger and carries a request-scoped logger in the
// context, so that every line written while serving a request has its request_id.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"
)

// New returns a logger writing to w. format is "text" or "json"; level is debug, info, warn or error.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("LOG_LEVEL %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("LOG_FORMAT %q: want text or json", format)
	}
}

type ctxKey struct{}

// With returns a copy of ctx that carries lg.
func With(ctx context.Context, lg *slog.Logger) context.Context {
	return context.WithValue(ctx, ctxKey{}, lg)
}

// From returns the logger carried by ctx, or slog.Default() when there is none.
func From(ctx context.Context) *slog.Logger {
	if lg, ok := ctx.Value(ctxKey{}).(*slog.Logger); ok {
		return lg
	}
	return slog.Default()
}

// MaxValueBytes is how much of a value from outside (a message's event_id, say) Clip keeps for a log line.
const MaxValueBytes = 128

// Clip returns s for a log line: whole when it is at most MaxValueBytes bytes, otherwise its first
// MaxValueBytes bytes (cut at a rune's start) and how long it was. A value the process did not choose
// can be as long as the message carrying it (RabbitMQ's limit is 128 MB), and a line per delivery
// would write it again each time.
func Clip(s string) string {
	if len(s) <= MaxValueBytes {
		return s
	}
	n := MaxValueBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
