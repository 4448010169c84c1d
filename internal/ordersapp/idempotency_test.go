package ordersapp_test

// One test per row of DESIGN.md's "Idempotency-Key semantics" table, through the real route
// POST /v1/orders on real PostgreSQL and Redis, plus the concurrency and failure-injection proofs.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/testenv"
)

const (
	alice      = "alice-token"
	bob        = "bob-token"
	carolToken = "carol-token"
	aliceID    = 1
	mugOrder   = `{"product_id":1,"quantity":2}`
)

func TestKeyMissingIs400AndStoresNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	r := rp.createOrder(alice, "", mugOrder)
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, "idempotency_key_missing", r.problem(t).Code)
	assert.Zero(t, count(t, env.DB, "orders"))
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))
}

func TestKeyInvalidIs400AndStoresNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	cases := map[string]string{
		"empty":     "",
		"too long":  strings.Repeat("k", 256),
		"non-ASCII": "clé-1",
		"tab":       "a\tb",
	}
	for name, key := range cases {
		t.Run(name, func(t *testing.T) {
			// An empty key must still be sent as a header line, so add it by hand.
			r := rp.call(http.MethodPost, "/v1/orders", alice, "", []byte(mugOrder), "Idempotency-Key", key)
			assert.Equal(t, http.StatusBadRequest, r.Status)
			assert.Equal(t, "idempotency_key_invalid", r.problem(t).Code)
		})
	}
	assert.Zero(t, count(t, env.DB, "orders"))
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))
	assert.Equal(t, float64(len(cases)), idemCount(t, rp, "/v1/orders", "invalid"))
}

func TestFirstRequestRunsAndStoresResponse(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	r := rp.createOrder(alice, "first-1", mugOrder)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	assert.Empty(t, r.Header.Get("Idempotent-Replayed"))
	var o map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &o))
	assert.Equal(t, "PENDING", o["status"])
	assert.EqualValues(t, 1, o["product_id"])
	assert.EqualValues(t, 2, o["quantity"])
	assert.EqualValues(t, 2500, o["amount_cents"])
	assert.Equal(t, "EUR", o["currency"])
	assert.NotEmpty(t, o["created_at"])

	var rec struct {
		State          string
		ResponseStatus int
		ResponseBody   []byte
		UserID         int64
	}
	require.NoError(t, env.DB.Raw(`SELECT state, response_status, response_body, user_id
		FROM idempotency_keys WHERE idempotency_key = 'first-1'`).Scan(&rec).Error)
	assert.Equal(t, "COMPLETED", rec.State)
	assert.Equal(t, http.StatusCreated, rec.ResponseStatus)
	assert.Equal(t, r.Body, rec.ResponseBody)
	assert.EqualValues(t, aliceID, rec.UserID)
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
	var stock int64
	require.NoError(t, env.DB.Raw(`SELECT stock FROM products WHERE id = 1`).Scan(&stock).Error)
	assert.EqualValues(t, 100, stock, "creating an order checks stock but does not deduct it")
}

func TestSameKeySameRequestReplaysExactly(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	first := rp.createOrder(alice, "replay-1", mugOrder)
	require.Equal(t, http.StatusCreated, first.Status)
	for i := 0; i < 3; i++ {
		again := rp.createOrder(alice, "replay-1", mugOrder)
		assert.Equal(t, first.Status, again.Status)
		assert.Equal(t, string(first.Body), string(again.Body), "replay must be byte-identical")
		assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	}
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
	assert.Equal(t, 3.0, idemCount(t, rp, "/v1/orders", "replayed"))
	assert.Equal(t, 1.0, idemCount(t, rp, "/v1/orders", "executed"))
}

func TestReorderedKeysAndWhitespaceReplay(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	first := rp.createOrder(alice, "layout-1", mugOrder)
	require.Equal(t, http.StatusCreated, first.Status)
	again := rp.createOrder(alice, "layout-1", "{\n  \"quantity\" : 2 ,\t\"product_id\":1\n}\n")
	assert.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, string(first.Body), string(again.Body))
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
}

func TestSameKeyDifferentRequestIs422(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	require.Equal(t, http.StatusCreated, rp.createOrder(alice, "reuse-1", mugOrder).Status)
	r := rp.createOrder(alice, "reuse-1", `{"product_id":1,"quantity":3}`)
	assert.Equal(t, http.StatusUnprocessableEntity, r.Status)
	assert.Equal(t, "idempotency_key_reused", r.problem(t).Code)
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
	assert.EqualValues(t, 0, count(t, env.DB, "orders", "quantity = 3"))
	assert.Equal(t, 1.0, idemCount(t, rp, "/v1/orders", "mismatch"))
}

// A retry whose body names a field twice is refused as malformed, not answered from the key's record:
// decoding keeps the last value (here the first request's), while a reader that keeps the first sees
// another order in it. The same body under a new key is refused the same way.
func TestSameKeyWithAFieldTwiceIsMalformed(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	require.Equal(t, http.StatusCreated, rp.createOrder(alice, "twice-1", mugOrder).Status)
	for _, tc := range []struct{ key, body string }{
		{"twice-1", `{"product_id":2,"product_id":1,"quantity":2}`},
		{"twice-1", `{"product_id":1,"quantity":9,"quantity":2}`},
		{"twice-2", `{"product_id":2,"product_id":1,"quantity":2}`},
	} {
		r := rp.createOrder(alice, tc.key, tc.body)
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.body, r.Body)
		assert.Equal(t, "malformed_body", r.problem(t).Code)
		assert.Contains(t, r.problem(t).Detail, "appears twice in one object")
		assert.Empty(t, r.Header.Get("Idempotent-Replayed"))
	}
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
	assert.EqualValues(t, 1, count(t, env.DB, "idempotency_keys"))
}

// waitersOnLocks counts backends of this database waiting for a lock.
func waitersOnLocks(t *testing.T, db *gorm.DB) int64 {
	var n int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE NOT l.granted AND a.datname = current_database()`).Scan(&n).Error)
	return n
}

// holdInserts makes every INSERT INTO table wait, after its row is written and before its transaction
// goes on, until the returned function is called: a trigger takes an advisory lock (lockID) that the
// test holds. holdKeyRows holds a create request with its key row written and not committed, the last
// moment at which a duplicate must still wait for it; holdOrderRows, inside its work, its order written
// and its key row not yet.
func holdInserts(t *testing.T, db *gorm.DB, table string, lockID int) func() {
	t.Helper()
	require.NoError(t, db.Exec(fmt.Sprintf(`
		CREATE FUNCTION hold_%[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_advisory_xact_lock(%[2]d);
			RETURN NEW;
		END $$;
		CREATE TRIGGER %[1]s_held AFTER INSERT ON %[1]s FOR EACH ROW EXECUTE FUNCTION hold_%[1]s();`, table, lockID)).Error)
	tx := db.Begin()
	require.NoError(t, tx.Error)
	require.NoError(t, tx.Exec(`SELECT pg_advisory_xact_lock(?)`, lockID).Error)
	var once sync.Once
	release := func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

func holdKeyRows(t *testing.T, db *gorm.DB) func() {
	return holdInserts(t, db, "idempotency_keys", 4242)
}

func holdOrderRows(t *testing.T, db *gorm.DB) func() { return holdInserts(t, db, "orders", 4343) }

// A duplicate that arrives while the first request is inside its transaction, its key row written,
// waits for it (on the key's lock) and answers from what the first one committed: the same body with
// Idempotent-Replayed, or 422 for another body; its own order rolls back. The first request is held
// after its key row by holdKeyRows.
func TestInFlightDuplicateWaitsThenReplaysOr422(t *testing.T) {
	t.Parallel()
	duplicatesWhileTheFirstIsHeld(t, holdKeyRows, false)
}

// A duplicate that arrives while the first request is still in its work, before its key row exists,
// waits for it too (the key's lock), and answers from what the first committed: here the product sold
// out meanwhile, and the duplicate's own work would have answered 409 insufficient_stock at once
// while the first request's order was created under the key. Another body under the key gets 422.
func TestADuplicateWaitsForAFirstRequestStillInItsWork(t *testing.T) {
	t.Parallel()
	duplicatesWhileTheFirstIsHeld(t, holdOrderRows, true)
}

// duplicatesWhileTheFirstIsHeld holds alice's first create (hold), sells the product out if soldOut,
// sends a duplicate and one with another body under the same key, lets the first go, and checks that
// the first got 201, the duplicate its replay and the other 422, with one order and one key row. Every
// pool here has no lock or statement timeout (patientDB), so nothing gives up while the test looks.
func duplicatesWhileTheFirstIsHeld(t *testing.T, hold func(*testing.T, *gorm.DB) func(), soldOut bool) {
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{db: patientDB(t, env)})
	release := hold(t, env.DB)

	firstDone := make(chan response, 1)
	go func() { firstDone <- rp.createOrder(alice, "busy-1", mugOrder) }()
	eventually(t, patience, "the first request to block inside its transaction", func() bool {
		return waitersOnLocks(t, env.DB) >= 1
	})
	if soldOut {
		require.NoError(t, env.DB.Exec(`UPDATE products SET stock = 0 WHERE id = 1`).Error)
	}
	dupDone, otherDone := make(chan response, 1), make(chan response, 1)
	go func() { dupDone <- rp.createOrder(alice, "busy-1", mugOrder) }()
	go func() { otherDone <- rp.createOrder(alice, "busy-1", `{"product_id":1,"quantity":5}`) }()
	// Or to have answered already: without the wait they do, at once.
	eventually(t, patience, "both duplicates to wait for the first request", func() bool {
		return waitersOnLocks(t, env.DB) >= 3 || len(dupDone)+len(otherDone) == 2
	})
	assert.Zero(t, count(t, env.DB, "orders"), "nothing is committed while the first request is held")

	release()
	first := recv(t, firstDone)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	dup := recv(t, dupDone)
	assert.Equal(t, http.StatusCreated, dup.Status, "%s", dup.Body)
	assert.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"), "the waiting duplicate replays")
	assert.Equal(t, string(first.Body), string(dup.Body))
	other := recv(t, otherDone)
	assert.Equal(t, http.StatusUnprocessableEntity, other.Status, "%s", other.Body)
	assert.Equal(t, "idempotency_key_reused", other.problem(t).Code)

	assert.Equal(t, 1.0, idemCount(t, rp, "/v1/orders", "executed"))
	assert.Equal(t, 1.0, idemCount(t, rp, "/v1/orders", "replayed"))
	assert.Equal(t, 1.0, idemCount(t, rp, "/v1/orders", "mismatch"))
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
	assert.EqualValues(t, 1, count(t, env.DB, "idempotency_keys"))
}

// takeKey writes alice's key row for key as a pay request does (its own claim, PROCESSING, kind pay),
// in a transaction of the test's: committed at once when commit is true, otherwise left open until
// the returned function ends it. The pay route does not take the create route's lock on the key, so
// only the unique index stands between the two.
func takeKey(t *testing.T, db *gorm.DB, key string, commit bool) func() {
	t.Helper()
	tx := db.Begin()
	require.NoError(t, tx.Error)
	require.NoError(t, tx.Exec(`INSERT INTO idempotency_keys (user_id, idempotency_key, kind, order_id, method, path, fingerprint, state, locked_until)
		VALUES (1, ?, 'pay', 1, 'POST', '/v1/orders/1/pay', 'pay-fingerprint', 'PROCESSING', now() + interval '1 minute')`, key).Error)
	if commit {
		require.NoError(t, tx.Commit().Error)
		return func() {}
	}
	var once sync.Once
	end := func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(end)
	return end
}

// The unique index is the guard's last word: a key that another route (pay) takes while a create's work
// runs fails the create's key INSERT, its order rolls back with it, and the create answers from the
// key's record (422: another request's). Without the INSERT's failure (ON CONFLICT DO NOTHING, or the
// COMMIT sent first) the order would commit without its key row.
func TestAKeyTakenByAnotherRouteDuringTheWorkRollsTheWorkBack(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{db: patientDB(t, env)})
	release := holdOrderRows(t, env.DB)

	done := make(chan response, 1)
	go func() { done <- rp.createOrder(alice, "both-routes", mugOrder) }()
	eventually(t, patience, "the create to block inside its work", func() bool {
		return waitersOnLocks(t, env.DB) >= 1
	})
	takeKey(t, env.DB, "both-routes", true)
	release()

	r := recv(t, done)
	assert.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	assert.Equal(t, "idempotency_key_reused", r.problem(t).Code)
	assert.Zero(t, count(t, env.DB, "orders"), "the create's order rolled back with its key INSERT")
	assert.EqualValues(t, 1, count(t, env.DB, "idempotency_keys"))
}

// A key row that another route has written and not yet committed makes the create's key INSERT wait,
// at most DB_LOCK_TIMEOUT: then 409 idempotency_key_in_use with Retry-After, and nothing committed.
func TestAnUncommittedKeyRowOfAnotherRoutePastTheLockTimeoutIs409(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{db: testenv.OpenDB(t, env.DatabaseURL, 300*time.Millisecond)})
	end := takeKey(t, env.DB, "held-by-pay", false)

	r := rp.createOrder(alice, "held-by-pay", mugOrder)
	assert.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Equal(t, "idempotency_key_in_use", r.problem(t).Code)
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	end()
	assert.Zero(t, count(t, env.DB, "orders"))
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))
}

// A duplicate waits for the first request (the key's lock) for at most DB_LOCK_TIMEOUT, then gets 409
// with Retry-After.
// Two replicas share the database, as in production. The first request is held after writing its key
// row (holdKeyRows) on a pool without timeouts (patientDB): only the duplicate's DB_LOCK_TIMEOUT can
// run out, and it waits on a key row that stays uncommitted until the test lets go.
func TestInFlightPastTheLockTimeoutIs409(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	slow := newReplica(t, env, replicaOpts{db: patientDB(t, env)})
	impatient := testenv.OpenDB(t, env.DatabaseURL, 300*time.Millisecond)
	fast := newReplica(t, env, replicaOpts{db: impatient})
	release := holdKeyRows(t, env.DB)

	firstDone := make(chan response, 1)
	go func() { firstDone <- slow.createOrder(alice, "busy-db", mugOrder) }()
	eventually(t, patience, "the first request to block inside its transaction", func() bool {
		return waitersOnLocks(t, env.DB) > 0
	})
	dup := fast.createOrder(alice, "busy-db", mugOrder)
	assert.Equal(t, http.StatusConflict, dup.Status, "%s", dup.Body)
	assert.Equal(t, "idempotency_key_in_use", dup.problem(t).Code)
	assert.NotEmpty(t, dup.Header.Get("Retry-After"))
	assert.Zero(t, count(t, env.DB, "orders"), "the duplicate's order rolled back with its key row")

	release()
	first := recv(t, firstDone)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	after := fast.createOrder(alice, "busy-db", mugOrder)
	assert.Equal(t, string(first.Body), string(after.Body))
	assert.Equal(t, "true", after.Header.Get("Idempotent-Replayed"))
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
}

// A retry is answered from the key's record before the work runs: when the work would now refuse
// (the product sold out since), the retry still gets the first answer, replayed, not a new 409.
func TestRetryIsAnsweredBeforeTheWorkRuns(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	first := rp.createOrder(alice, "sold-out-later", mugOrder)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	require.NoError(t, env.DB.Exec(`UPDATE products SET stock = 0 WHERE id = 1`).Error)

	again := rp.createOrder(alice, "sold-out-later", mugOrder)
	assert.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
	assert.Equal(t, string(first.Body), string(again.Body))
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
}

func TestFailedValidationStoresNothingSoCorrectedRetryRuns(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	bad := rp.createOrder(alice, "fix-1", `{"product_id":1,"quantity":0}`)
	require.Equal(t, http.StatusBadRequest, bad.Status)
	assert.Equal(t, "validation_failed", bad.problem(t).Code)
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))

	require.NoError(t, env.DB.Exec(`UPDATE products SET stock = 1 WHERE id = 2`).Error)
	short := rp.createOrder(alice, "fix-2", `{"product_id":2,"quantity":2}`)
	require.Equal(t, http.StatusConflict, short.Status)
	assert.Equal(t, "insufficient_stock", short.problem(t).Code)
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))

	fixed := rp.createOrder(alice, "fix-1", mugOrder)
	assert.Equal(t, http.StatusCreated, fixed.Status, "a corrected retry with the same key runs: %s", fixed.Body)
	fixed2 := rp.createOrder(alice, "fix-2", `{"product_id":2,"quantity":1}`)
	assert.Equal(t, http.StatusCreated, fixed2.Status, "%s", fixed2.Body)
	assert.Empty(t, fixed2.Header.Get("Idempotent-Replayed"))
	assert.EqualValues(t, 2, count(t, env.DB, "orders"))
}

func TestFailedAuthStoresNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	r := rp.createOrder("mallory-token", "auth-1", mugOrder)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	assert.Equal(t, "unauthorized", r.problem(t).Code)
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))
	ok := rp.createOrder(alice, "auth-1", mugOrder)
	assert.Equal(t, http.StatusCreated, ok.Status)
	assert.Empty(t, ok.Header.Get("Idempotent-Replayed"))
}

// A request has one credential: two Authorization lines, or two session cookies, are refused (401)
// rather than authenticated as the first (bob's order was created with alice's token beside it); an
// Authorization header that is sent is the credential even when empty, never the cookie instead.
func TestAuthTakesOneCredential(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	r := rp.call(http.MethodPost, "/v1/orders", alice, "two-auth-1", []byte(mugOrder), "Authorization", "Bearer "+bob)
	require.Equal(t, http.StatusUnauthorized, r.Status, "body %s", r.Body)
	assert.Contains(t, r.problem(t).Detail, "Authorization sent 2 times")
	assert.Zero(t, count(t, env.DB, "orders"))
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))

	both := "idemshop_session=" + alice + "; idemshop_session=" + bob
	r = rp.call(http.MethodGet, "/v1/points", "", "", nil, "Cookie", both)
	require.Equal(t, http.StatusUnauthorized, r.Status, "body %s", r.Body)
	assert.Contains(t, r.problem(t).Detail, "sent 2 times")
	r = rp.call(http.MethodGet, "/v1/points", "", "", nil, "Authorization", "", "Cookie", "idemshop_session="+alice)
	assert.Equal(t, http.StatusUnauthorized, r.Status, "an empty Authorization is judged alone: body %s", r.Body)
	r = rp.call(http.MethodGet, "/v1/points", "", "", nil, "Cookie", "idemshop_session="+alice)
	assert.Equal(t, http.StatusOK, r.Status, "one cookie: body %s", r.Body)
	copies := "idemshop_session=" + alice + "; idemshop_session=" + alice
	r = rp.call(http.MethodGet, "/v1/points", "", "", nil, "Cookie", copies)
	assert.Equal(t, http.StatusOK, r.Status, "two copies of one token are that token: body %s", r.Body)

	page := func(cookie string) response {
		req, err := http.NewRequest(http.MethodGet, rp.srv.URL+"/", nil)
		require.NoError(t, err)
		req.Header.Set("Cookie", cookie)
		resp, err := browser(t).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return response{Status: resp.StatusCode, Header: resp.Header}
	}
	r = page(both)
	assert.Equal(t, http.StatusSeeOther, r.Status)
	assert.Equal(t, "/login", r.Header.Get("Location"))
	assert.Equal(t, http.StatusOK, page("idemshop_session="+alice).Status)
	assert.Equal(t, http.StatusOK, page(copies).Status, "no login loop for a copy left under another path")

	ok := rp.createOrder(alice, "two-auth-1", mugOrder)
	require.Equal(t, http.StatusCreated, ok.Status, "body %s", ok.Body)
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "user_id = ?", 1))
}

func TestUsersWithTheSameKeyGetIndependentOrders(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	a := rp.createOrder(alice, "shared-key", mugOrder)
	b := rp.createOrder(bob, "shared-key", mugOrder)
	require.Equal(t, http.StatusCreated, a.Status)
	require.Equal(t, http.StatusCreated, b.Status)
	assert.Empty(t, b.Header.Get("Idempotent-Replayed"))
	assert.NotEqual(t, orderID(t, a), orderID(t, b))
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "user_id = ?", 1))
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "user_id = ?", 2))
	// Each user still sees only their own order.
	assert.Equal(t, http.StatusNotFound, rp.call(http.MethodGet, fmt.Sprintf("/v1/orders/%d", orderID(t, a)), bob, "", nil).Status)
}

func orderID(t testing.TB, r response) int64 {
	t.Helper()
	var o struct{ ID int64 }
	require.NoError(t, json.Unmarshal(r.Body, &o))
	require.NotZero(t, o.ID)
	return o.ID
}

// 50 goroutines behind a barrier send the same key and body: one order, and every answer the same
// 201 body (the losers wait for the winner's commit and replay it) or, for a loser that waited past
// DB_LOCK_TIMEOUT on a slow machine, 409; never a 5xx.
func TestConcurrentSameKeyCreatesOneOrder(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{MaxConns: 12})
	rp := newReplica(t, env, replicaOpts{})
	const n = 50
	start := make(chan struct{})
	results := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = rp.createOrder(alice, "storm-1", mugOrder)
		})
	}
	close(start)
	wg.Wait()

	var created []string
	conflicts, replayed := 0, 0
	for _, r := range results {
		switch r.Status {
		case http.StatusCreated:
			created = append(created, string(r.Body))
			if r.Header.Get("Idempotent-Replayed") == "true" {
				replayed++
			}
		case http.StatusConflict:
			conflicts++
			assert.Equal(t, "idempotency_key_in_use", r.problem(t).Code)
		default:
			t.Errorf("unexpected status %d: %s", r.Status, r.Body)
		}
	}
	require.NotEmpty(t, created)
	for _, b := range created {
		assert.Equal(t, created[0], b, "every 201 carries the same body")
	}
	assert.Equal(t, len(created)-1, replayed, "one 201 executed, every other one replayed")
	t.Logf("%d×201 (%d replayed), %d×409", len(created), replayed, conflicts)
	assert.EqualValues(t, 1, count(t, env.DB, "orders"), "exactly one order row")
	assert.EqualValues(t, 1, count(t, env.DB, "idempotency_keys"))
}

// S3, guarded: a failure after the key row is written, inside the same transaction, rolls back both;
// the retry with the same key creates the order. The failure is a trigger that raises on the first
// INSERT INTO orders only (a sequence is not rolled back, so it counts attempts).
func TestFailureAfterKeyRowRollsBackBothAndRetrySucceeds(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	require.NoError(t, env.DB.Exec(`
		CREATE SEQUENCE fail_once;
		CREATE FUNCTION fail_first_order() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('fail_once') = 1 THEN
				RAISE EXCEPTION 'injected failure after the idempotency key row was written';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER orders_fail_once BEFORE INSERT ON orders
			FOR EACH ROW EXECUTE FUNCTION fail_first_order();`).Error)

	r := rp.createOrder(alice, "s3-1", mugOrder)
	require.Equal(t, http.StatusInternalServerError, r.Status)
	assert.Equal(t, "internal", r.problem(t).Code)
	assert.NotContains(t, string(r.Body), "injected", "the cause is logged, not shown")
	assert.Zero(t, count(t, env.DB, "idempotency_keys"), "the key row rolled back with the work")
	assert.Zero(t, count(t, env.DB, "orders"))

	retry := rp.createOrder(alice, "s3-1", mugOrder)
	require.Equal(t, http.StatusCreated, retry.Status, "%s", retry.Body)
	assert.Empty(t, retry.Header.Get("Idempotent-Replayed"))
	assert.EqualValues(t, 1, count(t, env.DB, "orders"))
	assert.EqualValues(t, 1, count(t, env.DB, "idempotency_keys", "state = 'COMPLETED'"))
}
