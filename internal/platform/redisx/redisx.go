// Package redisx opens the go-redis client with short timeouts. Redis is an efficiency layer in
// idemshop: callers treat its errors as "skip the fast path", so a dead Redis must fail fast.
package redisx

import (
	"fmt"
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
	return redis.NewClient(opt), nil
}
