package keycount_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
	"idemshop/internal/lab/labtest"
)

// TestRedisKeysAfterOrders creates and pays KEYCOUNT_ORDERS orders (default 20) through the whole shop
// in-process (orders with its workers, payments-mock sending every callback twice, points-consumer),
// waits until every order is PAID and credited and every lock is released, then reads every key under
// the test's prefix. It fails on a key without a TTL and logs the count by pattern:
//
//	KEYCOUNT_ORDERS=1000 go test -count=1 -v -run TestRedisKeysAfterOrders ./internal/lock/keycount/
func TestRedisKeysAfterOrders(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL, Redis and RabbitMQ")
	}
	orders := 20
	if v := os.Getenv("KEYCOUNT_ORDERS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "KEYCOUNT_ORDERS")
		orders = n
	}
	env := labtest.NewEnv(t, nil)
	ctx := context.Background()
	f, err := env.NewFixture(ctx, "keycount")
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	product, err := f.Product(ctx, 1_000_000, 1000)
	require.NoError(t, err)

	start := time.Now()
	const workers = 8
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(orders) {
					return
				}
				if err := createAndPay(ctx, f, product, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	requests := time.Since(start)

	settled := func(q string, want int64) func() (bool, error) {
		return func() (bool, error) {
			var n int64
			err := env.DB.WithContext(ctx).Raw(q, f.UserID).Scan(&n).Error
			return n == want, err
		}
	}
	for _, c := range []struct{ what, q string }{
		{"every order PAID", `SELECT count(*) FROM orders WHERE user_id = ? AND status = 'PAID'`},
		{"every order credited", `SELECT count(*) FROM points_ledger WHERE user_id = ?`},
	} {
		ok, err := lab.Eventually(ctx, 2*time.Minute, settled(c.q, int64(orders)))
		require.NoError(t, err)
		require.True(t, ok, c.what)
	}
	// Locks are released at the end of each request and callback; wait for the
	// last ones, so that the count shows what stays, not what happens to be running.
	ok, err := lab.Eventually(ctx, time.Minute, func() (bool, error) {
		keys, err := scan(ctx, env.Redis, env.RedisPrefix)
		for _, k := range keys {
			if strings.HasPrefix(k, env.RedisPrefix+"lock:") {
				return false, err
			}
		}
		return true, err
	})
	require.NoError(t, err)
	require.True(t, ok, "locks released")

	keys, err := scan(ctx, env.Redis, env.RedisPrefix)
	require.NoError(t, err)
	byPattern := map[string]*group{}
	for _, k := range keys {
		ttl, err := env.Redis.PTTL(ctx, k).Result()
		require.NoError(t, err)
		if ttl == -2*time.Nanosecond {
			continue // expired between SCAN and PTTL
		}
		p := pattern(strings.TrimPrefix(k, env.RedisPrefix))
		g := byPattern[p]
		if g == nil {
			g = &group{min: ttl, max: ttl}
			byPattern[p] = g
		}
		g.add(ttl)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%d orders created and paid in %v; %d keys under the prefix\n", orders,
		requests.Round(time.Millisecond), len(keys))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pattern\tkeys\twithout TTL\tTTL min\tTTL max")
	names := make([]string, 0, len(byPattern))
	for p := range byPattern {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		g := byPattern[p]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", p, g.n, g.noTTL, ttlString(g.min), ttlString(g.max))
	}
	require.NoError(t, tw.Flush())
	t.Log("\n" + b.String())

	var forever []string
	for _, p := range names {
		if byPattern[p].noTTL > 0 {
			forever = append(forever, p)
		}
	}
	assert.Empty(t, forever, "keys without a TTL: Redis keeps them for ever")
	for p := range byPattern {
		assert.NotContains(t, p, "callback", "the payment callbacks write nothing to Redis")
	}
}

// createAndPay creates order i and pays it, retrying while the platform or the shop says "later".
func createAndPay(ctx context.Context, f *lab.Fixture, product, i int64) error {
	key := "keycount-" + strconv.FormatInt(i, 10)
	var o lab.Order
	if err := retry(ctx, func() (bool, error) {
		var r lab.Response
		var err error
		o, r, err = f.CreateOrder(ctx, "/v1/orders", key, product, 1)
		return r.Status == http.StatusCreated, err
	}); err != nil {
		return fmt.Errorf("create order %s: %w", key, err)
	}
	path := fmt.Sprintf("/v1/orders/%d/pay", o.ID)
	if err := retry(ctx, func() (bool, error) {
		r, err := f.Do(ctx, http.MethodPost, path, nil, "Idempotency-Key", key+"-pay")
		return r.Status == http.StatusCreated, err
	}); err != nil {
		return fmt.Errorf("pay order %d: %w", o.ID, err)
	}
	return nil
}

// retry calls try until it reports success, for at most 30 s; transport errors are retried too.
func retry(ctx context.Context, try func() (bool, error)) error {
	var last error
	ok, err := lab.Eventually(ctx, 30*time.Second, func() (bool, error) {
		ok, err := try()
		last = err
		return ok, nil
	})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no success within 30 s (last error: %v)", last)
	}
	return nil
}

func scan(ctx context.Context, rdb *redis.Client, prefix string) ([]string, error) {
	var keys []string
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

var digits = regexp.MustCompile(`[0-9]+`)

// pattern turns a key (without the prefix) into its pattern: every number becomes N.
func pattern(key string) string { return digits.ReplaceAllString(key, "N") }

type group struct {
	n, noTTL int
	min, max time.Duration
}

func (g *group) add(ttl time.Duration) {
	g.n++
	if ttl < 0 {
		g.noTTL++
	}
	g.min, g.max = min(g.min, ttl), max(g.max, ttl)
}

func ttlString(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return d.Round(time.Second).String()
}
