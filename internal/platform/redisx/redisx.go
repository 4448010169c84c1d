// Package redisx opens the go-redis client with short timeouts. Redis is an efficiency layer in
// idemshop: callers treat its errors as "skip the fast path", so a dead Redis must fail fast.
package redisx

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Open returns a client for url (redis://host:port/db). timeout bounds dial, read, write and the wait
// for a pooled connection. Retries are off: a caller that falls back to the database gains nothing from
// waiting twice.
func Open(url string, timeout time.Duration) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse REDIS_URL: %w", err)
	}
	opt.DialTimeout = timeout
	opt.ReadTimeout = timeout
	opt.WriteTimeout = timeout
	opt.PoolTimeout = timeout
	opt.MaxRetries = -1
	// go-redis otherwise re-dials a refused connection 5 times, 100 ms apart: half a second added to
	// every request while Redis is down, exactly when the fallback should be fast.
	opt.DialerRetries = 1
	return redis.NewClient(opt), nil
}

// slogAdapter sends go-redis's internal log lines (pool dial failures) to slog at warn level.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Printf(ctx context.Context, format string, v ...any) {
	a.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// UseLogger routes go-redis's package-wide logger to l. Call it once from main.
func UseLogger(l *slog.Logger) { redis.SetLogger(slogAdapter{l: l}) }

// DeletePrefix deletes every key that starts with prefix (a run's or a test's namespace): SCAN in pages
// of 1000, DEL each page. It is bounded by ctx, and returns the first error. The prefix is matched as
// text: SCAN's MATCH is a glob, and a prefix holding *, ?, [ or \ would otherwise match other
// namespaces' keys (a prefix of "*" every key).
func DeletePrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
	var page []string
	for iter.Next(ctx) {
		if page = append(page, iter.Val()); len(page) == 1000 {
			if err := rdb.Del(ctx, page...).Err(); err != nil {
				return fmt.Errorf("delete keys %s*: %w", prefix, err)
			}
			page = page[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan keys %s*: %w", prefix, err)
	}
	if len(page) > 0 {
		if err := rdb.Del(ctx, page...).Err(); err != nil {
			return fmt.Errorf("delete keys %s*: %w", prefix, err)
		}
	}
	return nil
}

// globEscape makes s match itself alone in a Redis glob pattern (KEYS, SCAN MATCH).
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// DeleteIfOwner deletes a lease key (KEYS[1]) only while it still holds the caller's owner value
// (ARGV[1]), and returns 1 if it did, 0 if not. A plain DEL after the caller's lease expired would
// delete the next holder's lease and let a third one in. The lock and the
// consumer's dedup lease all release this way: Run on a client, Eval inside a pipeline (where Run
// cannot fall back from EVALSHA to EVAL).
var DeleteIfOwner = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
