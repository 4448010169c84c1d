// Package formtoken implements one-time form tokens: the guard of the redeem-points form.
//
// The server issues a token with the form (a hidden field), bound to one user and one form. Submitting
// the form moves the token through a small state machine kept in Redis:
//
//	ISSUED ──Begin──▶ IN_FLIGHT ──Complete──▶ CONSUMED (the result is kept for replay)
//	   ▲                  │
//	   └────Release───────┘  (a business failure: the user fixes the form and submits again)
//	   ▲                  │
//	   └──lease expired───┘  (the submit crashed: the token counts as ISSUED again)
//
// The pitfall this package exists for: deleting the token when the submit starts ("consume first, then
// work"). If the process then crashes before the work commits, the token is gone and the work never
// happened, so the user can never submit that form again (lab scenario S4). Here the token is never
// deleted before the business succeeds: IN_FLIGHT carries a lease, and when the lease runs out the
// token can be taken again. Redis only keeps concurrent submits apart and remembers the answer; the
// database's unique index on the token id is what makes the effect happen at most once.
//
// docs/redeem.md walks through the keys and the crash windows.
package formtoken

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The states of a token, as stored in the "state" field of its hash.
const (
	StateIssued   = "ISSUED"
	StateInFlight = "IN_FLIGHT"
	StateConsumed = "CONSUMED"
)

// ErrInvalid means the token cannot be used for this submit: it is unknown, expired, malformed, or it
// was issued to another user or for another form. The caller answers 400 and writes nothing. The
// reasons are not told apart on purpose: a caller probing tokens learns nothing.
var ErrInvalid = errors.New("formtoken: unknown, expired or foreign token")

// idBytes is the entropy of a token: 192 bits from crypto/rand, so tokens cannot be guessed.
const idBytes = 24

// IDLen is the length of a token id: unpadded base64url of idBytes bytes.
const IDLen = idBytes * 4 / 3

// idPattern is what a token id looks like. Ids are checked before they reach a Redis key: a '}' in an
// id would move the key's hash tag.
var idPattern = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9_-]{%d}$`, IDLen))

// Token is an issued token.
type Token struct {
	ID        string
	UserID    int64
	Form      string
	ExpiresAt time.Time
}

// Options configure a Store.
type Options struct {
	// KeyPrefix starts every key (the configured REDIS_KEY_PREFIX). It must not contain '{' or '}'.
	KeyPrefix string
	// TTL is how long an issued token stays usable (FORM_TOKEN_TTL, 30 minutes).
	TTL time.Duration
	// Lease is how long an IN_FLIGHT token stays locked to its submit (FORM_TOKEN_INFLIGHT_LEASE). After
	// it a crashed submit no longer blocks the token. Make it longer than a redeem transaction can take.
	Lease time.Duration
	// ResultTTL is how long a CONSUMED token keeps its result for replay, counted from the success
	// (0: TTL).
	ResultTTL time.Duration
}

// Store keeps tokens in Redis. It is safe for concurrent use; all its state is in Redis, so any number
// of replicas can share it.
type Store struct {
	rdb *redis.Client
	o   Options
}

// New returns a Store. rdb must not be nil and the durations must be positive.
func New(rdb *redis.Client, o Options) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("formtoken: nil redis client")
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		return nil, fmt.Errorf("formtoken: prefix %q contains a brace, which would move the keys' hash tag", o.KeyPrefix)
	}
	if o.TTL <= 0 || o.Lease <= 0 {
		return nil, fmt.Errorf("formtoken: TTL (%s) and Lease (%s) must be > 0", o.TTL, o.Lease)
	}
	if o.ResultTTL <= 0 {
		o.ResultTTL = o.TTL
	}
	return &Store{rdb: rdb, o: o}, nil
}

// TokenKey is the hash holding the token's user, form, state, attempt and result:
// "<prefix>formtoken:{<id>}". LeaseKey is the IN_FLIGHT lease: "<prefix>formtoken:{<id>}:lease".
// Both carry the id as a Redis Cluster hash tag, so they live in one slot and one script may touch both.
func (s *Store) TokenKey(id string) string { return s.o.KeyPrefix + "formtoken:{" + id + "}" }

// LeaseKey is the key of the in-flight lease of token id; see TokenKey.
func (s *Store) LeaseKey(id string) string { return s.TokenKey(id) + ":lease" }

// ValidID reports whether id has the shape of an issued token id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

func randomString(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Issue creates an ISSUED token for userID and form, valid for the configured TTL.
func (s *Store) Issue(ctx context.Context, userID int64, form string) (Token, error) {
	if form == "" {
		return Token{}, errors.New("formtoken: empty form name")
	}
	id, err := randomString(idBytes)
	if err != nil {
		return Token{}, fmt.Errorf("issue form token: %w", err)
	}
	key := s.TokenKey(id)
	// MULTI/EXEC: the hash never exists without its TTL, so a crash here cannot leave a token for ever.
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "user", strconv.FormatInt(userID, 10), "form", form, "state", StateIssued)
		p.PExpire(ctx, key, s.o.TTL)
		return nil
	})
	if err != nil {
		return Token{}, fmt.Errorf("issue form token: %w", err)
	}
	return Token{ID: id, UserID: userID, Form: form, ExpiresAt: time.Now().Add(s.o.TTL).UTC()}, nil
}

// Outcome is what Begin found.
type Outcome int

const (
	// Acquired: the token moved to IN_FLIGHT for this submit. The caller runs the business and must then
	// call Complete (success) or Release (business failure).
	Acquired Outcome = iota + 1
	// Replay: the token is CONSUMED; Claim.Result holds the stored answer of the successful submit.
	Replay
	// Busy: another submit holds the token right now; Claim.RetryAfter is what is left of its lease.
	Busy
)

// Claim is the answer of Begin.
type Claim struct {
	Outcome Outcome
	// Attempt identifies this submit's hold on the token (Acquired only); Release needs it.
	Attempt string
	// Result is the stored answer (Replay only).
	Result []byte
	// RetryAfter is the remaining in-flight lease (Busy only).
	RetryAfter time.Duration
}

// beginScript is the ISSUED -> IN_FLIGHT transition. It is one script because Redis runs a script
// without interleaving other commands: of 20 submits arriving together exactly one finds the token
// takeable, and every other one sees IN_FLIGHT (or, later, CONSUMED). A GET followed by a SET from Go
// would let two submits read ISSUED before either wrote IN_FLIGHT.
//
// KEYS[1] token hash, KEYS[2] lease; ARGV[1] user, ARGV[2] form, ARGV[3] attempt, ARGV[4] lease in ms.
// An IN_FLIGHT token whose lease key is gone (PTTL -2) is treated as ISSUED: its submit crashed or
// stalled, and the database will refuse a second effect if it had in fact committed.
var beginScript = redis.NewScript(`
local t = redis.call('HMGET', KEYS[1], 'user', 'form', 'state', 'result')
if not t[1] or t[1] ~= ARGV[1] or t[2] ~= ARGV[2] then
  return {'INVALID'}
end
if t[3] == 'CONSUMED' then
  return {'CONSUMED', t[4] or ''}
end
if t[3] == 'IN_FLIGHT' then
  local left = redis.call('PTTL', KEYS[2])
  if left > 0 then
    return {'IN_FLIGHT', tostring(left)}
  end
end
redis.call('HSET', KEYS[1], 'state', 'IN_FLIGHT', 'attempt', ARGV[3])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return {'ACQUIRED'}`)

// Begin tries to take token id for a submit by userID on form. It returns ErrInvalid for a token that
// cannot be used, a Claim otherwise, and a wrapped error when Redis fails (the caller must then not run
// the business: it answers 503 and nothing is written).
func (s *Store) Begin(ctx context.Context, id string, userID int64, form string) (Claim, error) {
	if !ValidID(id) {
		return Claim{}, ErrInvalid
	}
	attempt, err := randomString(12)
	if err != nil {
		return Claim{}, fmt.Errorf("begin form token: %w", err)
	}
	res, err := beginScript.Run(ctx, s.rdb, []string{s.TokenKey(id), s.LeaseKey(id)},
		strconv.FormatInt(userID, 10), form, attempt, s.o.Lease.Milliseconds()).StringSlice()
	if err != nil {
		return Claim{}, fmt.Errorf("begin form token: %w", err)
	}
	switch {
	case len(res) == 1 && res[0] == "ACQUIRED":
		return Claim{Outcome: Acquired, Attempt: attempt}, nil
	case len(res) == 1 && res[0] == "INVALID":
		return Claim{}, ErrInvalid
	case len(res) == 2 && res[0] == "CONSUMED":
		return Claim{Outcome: Replay, Result: []byte(res[1])}, nil
	case len(res) == 2 && res[0] == "IN_FLIGHT":
		ms, err := strconv.ParseInt(res[1], 10, 64)
		if err != nil {
			return Claim{}, fmt.Errorf("begin form token: lease %q: %w", res[1], err)
		}
		return Claim{Outcome: Busy, RetryAfter: time.Duration(ms) * time.Millisecond}, nil
	}
	return Claim{}, fmt.Errorf("begin form token: unexpected script answer %q", res)
}

// completeScript is IN_FLIGHT -> CONSUMED: it stores the result and drops the lease. It does not check
// the attempt: any submit that holds a committed result may record it, because the database allows one
// effect per token, so every such result describes the same effect. The first stored result wins.
// The token's user and form are written again because the hash may have expired while the submit ran;
// the committed effect must still be replayable. CONSUMED lives ResultTTL from now.
//
// KEYS[1] token hash, KEYS[2] lease; ARGV[1] user, ARGV[2] form, ARGV[3] result, ARGV[4] TTL in ms.
var completeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'state') == 'CONSUMED' then
  redis.call('DEL', KEYS[2])
  return 0
end
redis.call('HSET', KEYS[1], 'user', ARGV[1], 'form', ARGV[2], 'state', 'CONSUMED', 'result', ARGV[3])
redis.call('HDEL', KEYS[1], 'attempt')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
return 1`)

// Complete marks token id CONSUMED with result, the answer to replay to every later submit.
func (s *Store) Complete(ctx context.Context, id string, userID int64, form string, result []byte) error {
	err := completeScript.Run(ctx, s.rdb, []string{s.TokenKey(id), s.LeaseKey(id)},
		strconv.FormatInt(userID, 10), form, result, s.o.ResultTTL.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("complete form token: %w", err)
	}
	return nil
}

// releaseScript is IN_FLIGHT -> ISSUED after a business failure (too few points): the same token can be
// submitted again once the user fixed the cause. It acts only while the token is still held by this
// attempt: if our lease ran out and another submit took the token, that submit owns it now.
//
// KEYS[1] token hash, KEYS[2] lease; ARGV[1] attempt.
var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'state') == 'IN_FLIGHT' and redis.call('HGET', KEYS[1], 'attempt') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'state', 'ISSUED')
  redis.call('HDEL', KEYS[1], 'attempt')
  redis.call('DEL', KEYS[2])
  return 1
end
return 0`)

// Release puts token id back to ISSUED if attempt still holds it. It never deletes the token.
func (s *Store) Release(ctx context.Context, id, attempt string) error {
	if err := releaseScript.Run(ctx, s.rdb, []string{s.TokenKey(id), s.LeaseKey(id)}, attempt).Err(); err != nil {
		return fmt.Errorf("release form token: %w", err)
	}
	return nil
}
