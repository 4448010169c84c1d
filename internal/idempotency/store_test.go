package idempotency_test

// The pay record's guards, contested on the database alone: no Redis lock and no Go pre-check stand in
// front of Store.Claim and Store.Finish here, so each predicate of their WHERE clauses is the only
// thing that can refuse. Every test is the interleaving that needs one predicate. Leases are run out by
// an UPDATE, never by waiting on the clock.

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/idempotency"
	"idemshop/internal/testenv"
)

const (
	payPath = "/v1/orders/1/pay"
	payFP   = "fingerprint-of-the-pay-request"
	// lease is long enough that no lease runs out on its own during a test: expire does it.
	lease = time.Minute
)

// paySubject is the subject of the pay record at payPath.
var paySubject = idempotency.Subject{Kind: idempotency.KindPay, OrderID: 1}

func newStore(t *testing.T) (*idempotency.Store, *testenv.Env) {
	t.Helper()
	env := testenv.New(t)
	st, err := idempotency.NewStore(env.DB, idempotency.NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, err)
	return st, env
}

func claim(t *testing.T, st *idempotency.Store, key string, fence int64) idempotency.Claim {
	t.Helper()
	c, err := st.Claim(context.Background(), idempotency.Scope{UserID: 1, Key: key}, paySubject, "POST", payPath, payFP, fence, lease)
	require.NoError(t, err)
	return c
}

// expire runs the record's lease out, as if its holder had been paused (GC, swap, a slow call) past it.
func expire(t *testing.T, env *testenv.Env, id int64) {
	t.Helper()
	require.NoError(t, env.DB.Exec(`UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE id = ?`, id).Error)
}

func stored(t *testing.T, env *testenv.Env, key string) idempotency.Record {
	t.Helper()
	rec, err := idempotency.Find(context.Background(), env.DB, idempotency.Scope{UserID: 1, Key: key})
	require.NoError(t, err)
	require.NotNil(t, rec)
	return *rec
}

// A claim never takes over a record whose lease is live, whatever token it carries: a newer one from
// the Redis lock (which can be wrong: a failover, an expired lock) or none at all (Redis down).
func TestClaimLeavesALiveLeaseAlone(t *testing.T) {
	t.Parallel()
	st, env := newStore(t)
	a := claim(t, st, "live", 1)
	require.True(t, a.Claimed)
	require.EqualValues(t, 1, a.Record.Fence)

	for _, fence := range []int64{2, 0} {
		c := claim(t, st, "live", fence)
		assert.False(t, c.Claimed, "a claim with token %d took over a live lease", fence)
		assert.EqualValues(t, 1, c.Record.Fence, "the record answered is A's")
	}
	rec := stored(t, env, "live")
	assert.Equal(t, idempotency.StateProcessing, rec.State)
	assert.EqualValues(t, 1, rec.Fence)
	assert.Zero(t, rec.Attempts, "no takeover happened")

	expire(t, env, a.Record.ID)
	b := claim(t, st, "live", 2)
	assert.True(t, b.Claimed, "once the lease ran out, the newer token takes over")
	assert.EqualValues(t, 2, b.Record.Fence)
	assert.Equal(t, 1, b.Record.Attempts)
}

// A takeover needs a token newer than the stored one: a token that went backwards (a Redis counter
// restored from an old snapshot, or lost) or repeats the stored one is not a new holder. The claim says
// so (FenceBehindError, with the stored token), for the caller to raise its counter; a token refused
// by a live lease is no such error.
func TestClaimNeedsANewerFence(t *testing.T) {
	t.Parallel()
	st, env := newStore(t)
	a := claim(t, st, "fenced", 5)
	require.True(t, a.Claimed)
	_, err := st.Claim(context.Background(), idempotency.Scope{UserID: 1, Key: "fenced"}, paySubject, "POST", payPath, payFP, 3, lease)
	require.NoError(t, err, "refused by the live lease, not by the fence")
	expire(t, env, a.Record.ID)

	for _, fence := range []int64{4, 5} {
		c, err := st.Claim(context.Background(), idempotency.Scope{UserID: 1, Key: "fenced"}, paySubject, "POST", payPath, payFP, fence, lease)
		var behind *idempotency.FenceBehindError
		require.ErrorAs(t, err, &behind, "token %d", fence)
		assert.Equal(t, idempotency.FenceBehindError{Token: fence, Stored: 5}, *behind)
		assert.False(t, c.Claimed, "token %d took over a record fenced at 5", fence)
	}
	assert.EqualValues(t, 5, stored(t, env, "fenced").Fence, "tokens never go back in the row")

	c := claim(t, st, "fenced", 6)
	assert.True(t, c.Claimed)
	assert.EqualValues(t, 6, c.Record.Fence)
}

// Without Redis the database issues the token (the stored fence + 1), so a holder that lost its lease
// to a database-issued takeover is fenced out like any other stale holder.
func TestClaimWithoutRedisIssuesANewerFence(t *testing.T) {
	t.Parallel()
	st, env := newStore(t)
	a := claim(t, st, "no-redis", 0)
	require.True(t, a.Claimed)
	require.EqualValues(t, 1, a.Record.Fence)
	expire(t, env, a.Record.ID)

	b := claim(t, st, "no-redis", 0)
	require.True(t, b.Claimed)
	assert.EqualValues(t, 2, b.Record.Fence, "the takeover's token is newer than A's")

	err := st.Finish(context.Background(), env.DB, a.Record.ID, a.Record.Fence, idempotency.StateCompleted, 201, []byte(`{"by":"A"}`))
	assert.ErrorIs(t, err, idempotency.ErrFenced)
	rec := stored(t, env, "no-redis")
	assert.Equal(t, idempotency.StateProcessing, rec.State)
	assert.Nil(t, rec.ResponseStatus)
}

// The case the fence exists for: A claims (token 1), is paused past its lease, B takes over (token 2)
// and is still working (PROCESSING). A wakes up and writes its result: it must change nothing. Here
// `state = 'PROCESSING'` does not help (the record is PROCESSING, B's); only `fence <= token` refuses.
func TestFinishByAStaleHolderChangesNothing(t *testing.T) {
	t.Parallel()
	st, env := newStore(t)
	ctx := context.Background()
	a := claim(t, st, "stale", 1)
	require.True(t, a.Claimed)
	expire(t, env, a.Record.ID)
	b := claim(t, st, "stale", 2)
	require.True(t, b.Claimed)
	require.Equal(t, a.Record.ID, b.Record.ID)

	err := st.Finish(ctx, env.DB, a.Record.ID, 1, idempotency.StateCompleted, 201, []byte(`{"by":"A"}`))
	require.ErrorIs(t, err, idempotency.ErrFenced)
	rec := stored(t, env, "stale")
	assert.Equal(t, idempotency.StateProcessing, rec.State, "B is still working")
	assert.EqualValues(t, 2, rec.Fence)
	assert.Nil(t, rec.ResponseStatus)
	assert.Nil(t, rec.ResponseBody)
	require.NotNil(t, rec.LockedUntil, "B's lease is untouched")

	require.NoError(t, st.Finish(ctx, env.DB, b.Record.ID, 2, idempotency.StateCompleted, 201, []byte(`{"by":"B"}`)))
	rec = stored(t, env, "stale")
	assert.Equal(t, idempotency.StateCompleted, rec.State)
	assert.JSONEq(t, `{"by":"B"}`, string(rec.ResponseBody))
}

// A final record is never written again, not even with the token that finished it (a retried Finish,
// a token repeated after a Redis failover) or a higher one: `state = 'PROCESSING'` refuses.
func TestFinishNeverRewritesAFinalRecord(t *testing.T) {
	t.Parallel()
	st, env := newStore(t)
	ctx := context.Background()
	a := claim(t, st, "final", 3)
	require.True(t, a.Claimed)
	require.NoError(t, st.Finish(ctx, env.DB, a.Record.ID, 3, idempotency.StateCompleted, 201, []byte(`{"first":true}`)))

	for _, fence := range []int64{3, 4} {
		err := st.Finish(ctx, env.DB, a.Record.ID, fence, idempotency.StateFailedRetryable, 503, []byte(`{"second":true}`))
		assert.ErrorIs(t, err, idempotency.ErrFenced, "token %d", fence)
	}
	rec := stored(t, env, "final")
	assert.Equal(t, idempotency.StateCompleted, rec.State)
	require.NotNil(t, rec.ResponseStatus)
	assert.Equal(t, 201, *rec.ResponseStatus)
	assert.JSONEq(t, `{"first":true}`, string(rec.ResponseBody))
}

// The workers find pay records by their subject, in columns: the claim writes kind and order_id, and
// Stuck, Unfinished and CountUnfinished look at the kind only, whatever the path says.
func TestRecordsAreFoundByKind(t *testing.T) {
	st, env := newStore(t)
	ctx := context.Background()
	a := claim(t, st, "key-pay", 1)
	require.True(t, a.Claimed)
	assert.Equal(t, idempotency.KindPay, a.Record.Kind)
	require.NotNil(t, a.Record.OrderID)
	assert.Equal(t, int64(1), *a.Record.OrderID)

	// A pay-looking path of another kind is none of the pay workers' business.
	other, err := st.Claim(ctx, idempotency.Scope{UserID: 1, Key: "key-other"}, idempotency.Subject{Kind: "lab_s8"},
		"POST", payPath, payFP, 1, lease)
	require.NoError(t, err)
	require.True(t, other.Claimed)
	assert.Nil(t, other.Record.OrderID, "no order: NULL")
	expire(t, env, a.Record.ID)
	expire(t, env, other.Record.ID)

	stuck, err := st.Stuck(ctx, idempotency.KindPay, 5, 10)
	require.NoError(t, err)
	require.Len(t, stuck, 1)
	assert.Equal(t, a.Record.ID, stuck[0].ID)
	unfinished, err := st.Unfinished(ctx, idempotency.KindPay, 0, 10)
	require.NoError(t, err)
	require.Len(t, unfinished, 1)
	assert.Equal(t, a.Record.ID, unfinished[0].ID)
	counts, err := st.CountUnfinished(ctx, idempotency.KindPay)
	require.NoError(t, err)
	assert.Equal(t, map[idempotency.State]int64{idempotency.StateProcessing: 1}, counts)

	// A finished record is not counted (the count reads the partial index of unfinished records).
	require.NoError(t, st.Finish(ctx, env.DB, a.Record.ID, a.Record.Fence, idempotency.StateCompleted, 201, []byte(`{}`)))
	counts, err = st.CountUnfinished(ctx, idempotency.KindPay)
	require.NoError(t, err)
	assert.Empty(t, counts)
}

// A takeover is of the same request only: a FAILED_RETRYABLE record, or one PROCESSING past its lease,
// is not taken over by a claim of its key with another fingerprint, whatever token it carries (a newer
// one from the lock, or none). The claim answers the record as it is, for the caller's 422, and the row
// keeps its state, fence, fingerprint and attempts. Without `fingerprint = ?` no test failed, and the
// other request ran under the first one's record (a helper's finding, 2026-12-06).
func TestClaimNeverTakesOverTheRecordOfAnotherRequest(t *testing.T) {
	t.Parallel()
	st, env := newStore(t)
	ctx := context.Background()
	const otherFP = "fingerprint-of-another-pay-request"
	other := func(key string, fence int64) idempotency.Claim {
		t.Helper()
		c, err := st.Claim(ctx, idempotency.Scope{UserID: 1, Key: key}, paySubject, "POST", payPath, otherFP, fence, lease)
		require.NoError(t, err, "token %d", fence)
		return c
	}

	retryable := claim(t, st, "retryable", 1)
	require.True(t, retryable.Claimed)
	require.NoError(t, st.Finish(ctx, env.DB, retryable.Record.ID, 1, idempotency.StateFailedRetryable, 503, []byte(`{"first":true}`)))
	expired := claim(t, st, "expired", 1)
	require.True(t, expired.Claimed)
	expire(t, env, expired.Record.ID)

	for key, state := range map[string]idempotency.State{
		"retryable": idempotency.StateFailedRetryable, "expired": idempotency.StateProcessing,
	} {
		for _, fence := range []int64{2, 0} {
			c := other(key, fence)
			assert.False(t, c.Claimed, "%s: another request took the record over with token %d", key, fence)
			assert.Equal(t, payFP, c.Record.Fingerprint, "%s: the record answered is the first request's", key)
		}
		rec := stored(t, env, key)
		assert.Equal(t, state, rec.State, key)
		assert.EqualValues(t, 1, rec.Fence, "%s: no token written", key)
		assert.Equal(t, payFP, rec.Fingerprint, key)
		assert.Zero(t, rec.Attempts, "%s: no takeover happened", key)
	}

	// The same request takes it over.
	c := claim(t, st, "retryable", 2)
	assert.True(t, c.Claimed)
	assert.EqualValues(t, 2, c.Record.Fence)
}

// The sweeper's count of unanswered questions is fenced like every other write of the record: a sweeper
// whose question was about a holder since replaced must not add to the new holder's count, or the
// sweeper would give that holder up before it had asked about it SWEEP_MAX_UNANSWERED times.
// Guards the note-unanswered-fence mutant (internal/mutants).
//
// The refusal is counted in idemshop_idempotency_fence_rejections_total like a refused final write: a
// frozen sweeper's note went uncounted (a helper's finding, 2026-12-07). Mutant note-unanswered-count.
func TestNoteUnansweredByAStaleAskerChangesNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	reg := prometheus.NewRegistry()
	st, err := idempotency.NewStore(env.DB, idempotency.NewMetrics(reg))
	require.NoError(t, err)
	ctx := context.Background()
	a := claim(t, st, "asked", 1)
	require.True(t, a.Claimed)
	n, err := st.NoteUnanswered(ctx, a.Record.ID, 1)
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	expire(t, env, a.Record.ID)
	b := claim(t, st, "asked", 2)
	require.True(t, b.Claimed)
	n, err = st.NoteUnanswered(ctx, a.Record.ID, 1)
	require.ErrorIs(t, err, idempotency.ErrFenced)
	assert.Zero(t, n)
	assert.Equal(t, 1, stored(t, env, "asked").Sweeps, "the newer holder's count is untouched")
	assert.Equal(t, 1.0, counted(t, reg, "idemshop_idempotency_fence_rejections_total"), "the refused note is counted")

	n, err = st.NoteUnanswered(ctx, b.Record.ID, 2)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

// Stuck returns the records whose lease ran out, not the live ones: a batch of live records would be
// asked about (and counted unanswered) while their holders are still at work, and would crowd the
// stuck ones out of the batch. Guards the stuck-lease-out mutant (internal/mutants).
func TestStuckLeavesLiveLeasesAlone(t *testing.T) {
	t.Parallel()
	st, env := newStore(t)
	ctx := context.Background()
	live := claim(t, st, "live", 1)
	require.True(t, live.Claimed)
	out := claim(t, st, "out", 1)
	require.True(t, out.Claimed)
	expire(t, env, out.Record.ID)

	stuck, err := st.Stuck(ctx, idempotency.KindPay, 5, 1)
	require.NoError(t, err)
	require.Len(t, stuck, 1)
	assert.Equal(t, out.Record.ID, stuck[0].ID, "the one whose lease ran out")
	stuck, err = st.Stuck(ctx, idempotency.KindPay, 5, 10)
	require.NoError(t, err)
	assert.Len(t, stuck, 1, "never the live one")
}

// counted is the value of the counter name in reg (0 when it was never set).
func counted(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
