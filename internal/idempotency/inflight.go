package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"idemshop/internal/platform/redisx"
)

// inflight is the Redis marker "a request with this key is running, with this fingerprint".
//
// Why it exists: in a one-transaction route the first request's key row is invisible to others until it
// commits, so the database alone cannot tell a concurrent duplicate whether it carries the same request
// (409, retry later) or a different one (422, which must be reported before the in-flight answer). The
// marker makes the running request's fingerprint visible. It is only an efficiency and reporting layer:
// if Redis is down the database path still admits exactly one request per key.
type inflight struct {
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
}

// claim is a held marker; release it when the request has finished.
type claim struct {
	key   string
	value string
}

func (m *inflight) redisKey(s Scope) string {
	return m.prefix + "idem:inflight:" + strconv.FormatInt(s.UserID, 10) + ":" + s.Key
}

// acquire sets the marker for s if nobody holds it. It returns the claim when it did, or the holder's
// fingerprint when somebody else holds it. One round trip: SET NX GET answers with the old value.
//
// On an error it still returns the claim it tried to set: a timeout may come after Redis applied the
// SET, and a marker nobody releases would refuse a corrected retry (422, another fingerprint) for a whole
// lease. Releasing a claim that was never set is harmless: the release compares the unique value.
func (m *inflight) acquire(ctx context.Context, s Scope, fingerprint string) (*claim, string, error) {
	owner := make([]byte, 8)
	_, _ = rand.Read(owner)
	c := &claim{key: m.redisKey(s), value: fingerprint + "|" + hex.EncodeToString(owner)}
	old, err := m.rdb.SetArgs(ctx, c.key, c.value, redis.SetArgs{Mode: "NX", Get: true, TTL: m.ttl}).Result()
	if errors.Is(err, redis.Nil) {
		return c, "", nil // there was no value, so NX set ours
	}
	if err != nil {
		return c, "", fmt.Errorf("acquire in-flight marker: %w", err)
	}
	heldFP, _, _ := strings.Cut(old, "|")
	return nil, heldFP, nil
}

// release deletes the marker only if it is still ours: after our lease expired another request may hold
// it, and deleting theirs would let a third one in.
func (m *inflight) release(ctx context.Context, c *claim) error {
	if err := redisx.DeleteIfOwner.Run(ctx, m.rdb, []string{c.key}, c.value).Err(); err != nil {
		return fmt.Errorf("release in-flight marker: %w", err)
	}
	return nil
}
