package formtoken_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/formtoken"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/testenv"
)

func newStore(t *testing.T, env *testenv.Env, ttl, lease time.Duration) *formtoken.Store {
	t.Helper()
	s, err := formtoken.New(env.Redis, formtoken.Options{KeyPrefix: env.Prefix, TTL: ttl, Lease: lease})
	require.NoError(t, err)
	return s
}

// expiryWait bounds the wait for a TTL of a few hundred milliseconds to run out in Redis. It is only a
// deadline for a failing run: Redis expires the key on its own clock, whatever the load on the machine,
// and the poll returns as soon as it has.
const expiryWait = time.Minute

// waitFor polls cond every 10 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewRefusesBadDeps(t *testing.T) {
	t.Parallel()
	_, err := formtoken.New(nil, formtoken.Options{TTL: time.Minute, Lease: time.Second})
	assert.Error(t, err)
	rdb, err := redisx.Open("redis://127.0.0.1:1/0", 100*time.Millisecond)
	require.NoError(t, err)
	defer rdb.Close()
	_, err = formtoken.New(rdb, formtoken.Options{KeyPrefix: "a{b}:", TTL: time.Minute, Lease: time.Second})
	assert.Error(t, err, "a brace in the prefix would move the hash tag")
	_, err = formtoken.New(rdb, formtoken.Options{TTL: 0, Lease: time.Second})
	assert.Error(t, err)
}

func TestStateMachine(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	s := newStore(t, env, time.Minute, time.Minute)
	ctx := context.Background()

	tok, err := s.Issue(ctx, 1, "redeem")
	require.NoError(t, err)
	assert.True(t, formtoken.ValidID(tok.ID), tok.ID)

	first, err := s.Begin(ctx, tok.ID, 1, "redeem")
	require.NoError(t, err)
	require.Equal(t, formtoken.Acquired, first.Outcome, "ISSUED -> IN_FLIGHT")

	busy, err := s.Begin(ctx, tok.ID, 1, "redeem")
	require.NoError(t, err)
	assert.Equal(t, formtoken.Busy, busy.Outcome, "IN_FLIGHT with a live lease")
	assert.Greater(t, busy.RetryAfter, time.Duration(0))

	// a business failure: back to ISSUED, the token is never deleted
	require.NoError(t, s.Release(ctx, tok.ID, first.Attempt))
	again, err := s.Begin(ctx, tok.ID, 1, "redeem")
	require.NoError(t, err)
	require.Equal(t, formtoken.Acquired, again.Outcome, "released token is usable again")

	// a stale holder's Release must not free the token another attempt holds now
	require.NoError(t, s.Release(ctx, tok.ID, first.Attempt))
	stillBusy, err := s.Begin(ctx, tok.ID, 1, "redeem")
	require.NoError(t, err)
	assert.Equal(t, formtoken.Busy, stillBusy.Outcome)

	require.NoError(t, s.Complete(ctx, tok.ID, 1, "redeem", []byte(`{"ok":1}`)))
	replay, err := s.Begin(ctx, tok.ID, 1, "redeem")
	require.NoError(t, err)
	assert.Equal(t, formtoken.Replay, replay.Outcome)
	assert.Equal(t, `{"ok":1}`, string(replay.Result))

	// the first stored result wins; a late Complete of another attempt changes nothing
	require.NoError(t, s.Complete(ctx, tok.ID, 1, "redeem", []byte(`{"ok":2}`)))
	replay, err = s.Begin(ctx, tok.ID, 1, "redeem")
	require.NoError(t, err)
	assert.Equal(t, `{"ok":1}`, string(replay.Result))

	// both keys of the token carry its hash tag (one cluster slot, so one script can touch both)
	assert.Equal(t, env.Prefix+"formtoken:{"+tok.ID+"}", s.TokenKey(tok.ID))
	assert.Equal(t, env.Prefix+"formtoken:{"+tok.ID+"}:lease", s.LeaseKey(tok.ID))
	keys, err := env.Redis.Keys(ctx, env.Prefix+"*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, env.Prefix), k)
		assert.Contains(t, k, "{"+tok.ID+"}")
	}
}

func TestLeaseExpiryMakesTokenUsableAgain(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	s := newStore(t, env, time.Minute, 200*time.Millisecond)
	ctx := context.Background()
	tok, err := s.Issue(ctx, 7, "redeem")
	require.NoError(t, err)

	crashed, err := s.Begin(ctx, tok.ID, 7, "redeem")
	require.NoError(t, err)
	require.Equal(t, formtoken.Acquired, crashed.Outcome)
	// the holder "crashes": it never calls Complete or Release. The token must not stay locked.
	var next formtoken.Claim
	waitFor(t, expiryWait, "the in-flight lease to expire", func() bool {
		next, err = s.Begin(ctx, tok.ID, 7, "redeem")
		require.NoError(t, err)
		return next.Outcome != formtoken.Busy
	})
	assert.Equal(t, formtoken.Acquired, next.Outcome)
	assert.NotEqual(t, crashed.Attempt, next.Attempt)
}

func TestInvalidTokens(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	s := newStore(t, env, time.Minute, time.Minute)
	short := newStore(t, env, 100*time.Millisecond, time.Minute)
	ctx := context.Background()
	tok, err := s.Issue(ctx, 1, "redeem")
	require.NoError(t, err)
	expired, err := short.Issue(ctx, 1, "redeem")
	require.NoError(t, err)
	waitFor(t, expiryWait, "the short token to expire", func() bool {
		n, err := env.Redis.Exists(ctx, short.TokenKey(expired.ID)).Result()
		require.NoError(t, err)
		return n == 0
	})
	cases := []struct {
		name, id, form string
		user           int64
	}{
		{"unknown", strings.Repeat("A", 32), "redeem", 1},
		{"malformed", "not-a-token}", "redeem", 1},
		{"empty", "", "redeem", 1},
		{"another user's", tok.ID, "redeem", 2},
		{"another form's", tok.ID, "newsletter", 1},
		{"expired", expired.ID, "redeem", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Begin(ctx, tc.id, tc.user, tc.form)
			assert.ErrorIs(t, err, formtoken.ErrInvalid)
		})
	}
	// none of the refusals touched the real token
	c, err := s.Begin(ctx, tok.ID, 1, "redeem")
	require.NoError(t, err)
	assert.Equal(t, formtoken.Acquired, c.Outcome)
}

// A malformed id is refused before it reaches Redis: it is the caller's fault (400) whatever Redis's
// state, never a 503, and never part of a key (a '}' would move the key's hash tag). Guards the
// formtoken-begin-id mutant (internal/mutants).
func TestBeginRefusesAMalformedIDWithoutAskingRedis(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	s := newStore(t, env, time.Minute, time.Minute)
	// The same store's keys, on a Redis that is down: a refusal that asked Redis would be its error.
	down, err := redisx.Open("redis://127.0.0.1:1/0", 100*time.Millisecond)
	require.NoError(t, err)
	defer down.Close()
	offline, err := formtoken.New(down, formtoken.Options{KeyPrefix: env.Prefix, TTL: time.Minute, Lease: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()

	for _, id := range []string{
		"", "not-a-token}", strings.Repeat("A", formtoken.IDLen-1), strings.Repeat("A", formtoken.IDLen+1),
		strings.Repeat("A", formtoken.IDLen-1) + "}", strings.Repeat("A", formtoken.IDLen-1) + "=",
	} {
		require.False(t, formtoken.ValidID(id), id)
		_, err := s.Begin(ctx, id, 1, "redeem")
		assert.ErrorIs(t, err, formtoken.ErrInvalid, "%q", id)
		_, err = offline.Begin(ctx, id, 1, "redeem")
		assert.ErrorIs(t, err, formtoken.ErrInvalid, "%q with Redis down", id)
	}
	keys, err := env.Redis.Keys(ctx, env.Prefix+"*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "no key of the store's prefix written")
}

func TestConcurrentBeginAdmitsOne(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	s := newStore(t, env, time.Minute, time.Minute)
	ctx := context.Background()
	tok, err := s.Issue(ctx, 1, "redeem")
	require.NoError(t, err)

	const n = 20
	start := make(chan struct{})
	outcomes := make([]formtoken.Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			c, err := s.Begin(ctx, tok.ID, 1, "redeem")
			assert.NoError(t, err)
			outcomes[i] = c.Outcome
		})
	}
	close(start)
	wg.Wait()
	acquired := 0
	for _, o := range outcomes {
		if o == formtoken.Acquired {
			acquired++
		} else {
			assert.Equal(t, formtoken.Busy, o)
		}
	}
	assert.Equal(t, 1, acquired)
}

func TestRedisDownIsAnErrorNotInvalid(t *testing.T) {
	t.Parallel()
	rdb, err := redisx.Open("redis://127.0.0.1:1/0", 100*time.Millisecond)
	require.NoError(t, err)
	defer rdb.Close()
	s, err := formtoken.New(rdb, formtoken.Options{TTL: time.Minute, Lease: time.Second})
	require.NoError(t, err)
	_, err = s.Issue(context.Background(), 1, "redeem")
	assert.Error(t, err)
	_, err = s.Begin(context.Background(), strings.Repeat("A", 32), 1, "redeem")
	require.Error(t, err)
	assert.NotErrorIs(t, err, formtoken.ErrInvalid, "a dead Redis must not look like a bad token")
}
