package ordersapp_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lock"
	"idemshop/internal/pay"
	"idemshop/internal/platform/fault"
	"idemshop/internal/testenv"
)

// hold pauses one call of a pay-flow hook (the nth) until released; the other calls pass. Register its
// release with t.Cleanup after the replica is built: cleanups run last-in first-out, so a failed
// assertion then never leaves a request hanging while the test server waits for it to close.
type hold struct {
	n       int32
	calls   atomic.Int32
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
}

func holdCall(n int32) *hold {
	return &hold{n: n, reached: make(chan struct{}), open: make(chan struct{})}
}

func (h *hold) hook(context.Context) {
	if h.calls.Add(1) == h.n {
		close(h.reached)
		<-h.open
	}
}

func (h *hold) wait(t *testing.T) {
	t.Helper()
	select {
	case <-h.reached:
	case <-time.After(patience):
		t.Fatal("the pay flow never reached the held call")
	}
}

func (h *hold) release() { h.once.Do(func() { close(h.open) }) }

// The interleaving the pay record's fence exists for. A claims the record (token 1), calls the
// platform, passes its lease check and stops right before its write; its lease runs out (row and Redis
// lock); a retry B takes the record over (token 2) and is still working when A writes. A must change
// nothing: the record is PROCESSING, so `state = 'PROCESSING'` lets A through, and only `fence <= token`
// in the write refuses it. (TestPayStaleHolderIsFencedOut lets B finish first, where either predicate
// alone refuses A.) Leases are run out by hand, never by waiting on the clock.
func TestPayStaleHolderFencedWhileNewerWorks(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	mock := newMock(t, nil)
	aWrites := holdCall(1)  // A's BeforeWrite
	bClaimed := holdCall(2) // B's AfterClaim (A's is the first)
	// A lease far longer than the test: B, held after its claim, must still hold its own when released.
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease),
		fault: fault.On(map[fault.Point]func(context.Context){pay.CrashBeforeWrite: aWrites.hook, pay.CrashAfterClaim: bClaimed.hook})})
	t.Cleanup(aWrites.release) // after the replica's: runs before its server closes
	t.Cleanup(bClaimed.release)
	id, _ := rp.newOrder(alice, 1, 1)
	locker, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)

	aDone := make(chan response, 1)
	go func() { aDone <- rp.pay(alice, id, "pay-stale") }()
	aWrites.wait(t)
	a := recordOf(t, env, "pay-stale")
	require.Equal(t, "PROCESSING", a.State)

	// A is paused past its lease: both leases run out.
	require.NoError(t, env.DB.Exec(`UPDATE idempotency_keys SET locked_until = now() - interval '1 second'
		WHERE idempotency_key = 'pay-stale'`).Error)
	require.NoError(t, env.Redis.Del(ctx, locker.LockKey(pay.LockName(id))).Err())

	bDone := make(chan response, 1)
	go func() { bDone <- rp.pay(alice, id, "pay-stale") }()
	bClaimed.wait(t)
	b := recordOf(t, env, "pay-stale")
	require.Equal(t, "PROCESSING", b.State)
	require.Greater(t, b.Fence, a.Fence, "B took the record over with a newer token")

	aWrites.release()
	ra := recv(t, aDone)
	assert.Equal(t, http.StatusConflict, ra.Status, "the stale holder's result is dropped: %s", ra.Body)
	mid := recordOf(t, env, "pay-stale")
	assert.Equal(t, "PROCESSING", mid.State, "B is still working")
	assert.Equal(t, b.Fence, mid.Fence)
	assert.Nil(t, mid.ResponseStatus, "A stored nothing")
	assert.Equal(t, "PENDING", statusOf(t, env.DB, id), "A's order change rolled back with its refused write")
	assert.Equal(t, 1.0, metricValue(t, rp.reg, "idemshop_idempotency_fence_rejections_total", nil))

	bClaimed.release()
	rb := recv(t, bDone)
	require.Equal(t, http.StatusCreated, rb.Status, "%s", rb.Body)
	final := recordOf(t, env, "pay-stale")
	assert.Equal(t, "COMPLETED", final.State)
	assert.Equal(t, b.Fence, final.Fence)
	assert.Equal(t, string(rb.Body), string(final.ResponseBody), "B's result is the one stored")
	assert.Equal(t, "PAYING", statusOf(t, env.DB, id))
	assert.EqualValues(t, 2, mock.creates(t), "both called the platform; it made one payment")
}
