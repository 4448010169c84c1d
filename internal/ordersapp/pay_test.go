package ordersapp_test

// The pay flow beyond the transaction boundary (ladder steps 2-4), against real PostgreSQL and Redis
// and payments-mock on loopback.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/idempotency"
	"idemshop/internal/lock"
	"idemshop/internal/pay"
	"idemshop/internal/payclient"
	"idemshop/internal/paymock"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/fault"
	"idemshop/internal/sweeper"
	"idemshop/internal/testenv"
)

// longLease is a pay lease far longer than any test: a lease that must run out is run out by hand
// (expireLease, and a DEL of the Redis lock), never by waiting on the clock, and a lease that must hold
// holds however slowly the machine runs the test.
const longLease = time.Hour

// platformHangs is how long payments-mock holds the answer of a create chosen by create_timeout_rate:
// longer than any test, so the pay flow's own PAYMENTS_TIMEOUT (2 s, payTo) always ends the call. The
// mock lets go as soon as the caller hangs up.
const platformHangs = time.Hour

// committingButSilent is a platform that commits every payment and then holds its answer (S7): the
// pay flow's PAYMENTS_TIMEOUT ends the call, and the payment exists.
func committingButSilent(t testing.TB) *mockPlatform {
	return newMock(t, func(c *paymock.Config) {
		c.Chaos.CreateTimeoutRate = 1
		c.CreateTimeoutDelay = platformHangs
	})
}

// payOutcomeUnknown starts a replica whose platform commits each payment and never answers, and pays a
// new order of quantity units of product 1 with key: the answer is 503 payment_outcome_unknown, and the
// key's record stays PROCESSING for the sweeper.
func payOutcomeUnknown(t *testing.T, key string, quantity int) (*testenv.Env, *replica, *mockPlatform, int64, response) {
	t.Helper()
	env := testenv.New(t)
	mock := committingButSilent(t)
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	id, _ := rp.newOrder(alice, 1, quantity)
	first := rp.pay(alice, id, key)
	require.Equal(t, http.StatusServiceUnavailable, first.Status, "%s", first.Body)
	require.Equal(t, "payment_outcome_unknown", first.problem(t).Code)
	require.Equal(t, "PROCESSING", recordOf(t, env, key).State)
	return env, rp, mock, id, first
}

func payTo(m *mockPlatform, lease time.Duration) func(*config.Orders) {
	return func(c *config.Orders) {
		c.PaymentsURL = m.srv.URL
		c.PayLease = lease
		c.PaymentsTimeout = 2 * time.Second
	}
}

func (rp *replica) pay(token string, orderID int64, key string) response {
	rp.t.Helper()
	return rp.call(http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", orderID), token, key, nil)
}

type payRecord struct {
	State          string
	Fence          int64
	ResponseStatus *int
	ResponseBody   []byte
	LockedUntil    *time.Time
}

func recordOf(t testing.TB, env *testenv.Env, key string) payRecord {
	t.Helper()
	var r payRecord
	require.NoError(t, env.DB.Raw(`SELECT state, fence, response_status, response_body, locked_until
		FROM idempotency_keys WHERE idempotency_key = ?`, key).Scan(&r).Error)
	return r
}

func paymentID(t testing.TB, r response) string {
	t.Helper()
	var b struct {
		OrderID   int64  `json:"order_id"`
		PaymentID string `json:"payment_id"`
		Status    string `json:"status"`
		PayURL    string `json:"pay_url"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &b), "%s", r.Body)
	require.NotEmpty(t, b.PaymentID)
	require.Equal(t, "PAYING", b.Status)
	require.Contains(t, b.PayURL, b.PaymentID)
	return b.PaymentID
}

// expireLock runs the Redis pay lock of order id out by hand, as if its TTL had passed.
func expireLock(t testing.TB, env *testenv.Env, id int64) {
	t.Helper()
	locker, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)
	require.NoError(t, env.Redis.Del(context.Background(), locker.LockKey(pay.LockName(id))).Err())
}

func TestPayOnceWithParallelRetriesOfOneKey(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{MaxConns: 12, LockTimeout: queued.LockTimeout})
	mock := newMock(t, nil)
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	id, _ := rp.newOrder(alice, 1, 1)

	rs := parallel(20, func(int) response { return rp.pay(alice, id, "pay-storm") })
	var bodies []string
	for _, r := range rs {
		switch r.Status {
		case http.StatusCreated:
			bodies = append(bodies, string(r.Body))
		case http.StatusConflict:
			assert.Equal(t, "idempotency_key_in_use", r.problem(t).Code)
			assert.NotEmpty(t, r.Header.Get("Retry-After"))
		default:
			t.Errorf("unexpected %d: %s", r.Status, r.Body)
		}
	}
	require.NotEmpty(t, bodies)
	for _, b := range bodies {
		assert.Equal(t, bodies[0], b)
	}
	assert.EqualValues(t, 1, mock.creates(t), "one create call reached the platform")
	assert.Equal(t, "PAYING", statusOf(t, env.DB, id))
	assert.Equal(t, "COMPLETED", recordOf(t, env, "pay-storm").State)
	again := rp.pay(alice, id, "pay-storm")
	assert.Equal(t, bodies[0], string(again.Body))
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
}

func TestPayAnotherKeyForAPaidOrderIsRefused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, nil)
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, 5*time.Second)})
	id, _ := rp.newOrder(alice, 1, 1)

	require.Equal(t, http.StatusCreated, rp.pay(alice, id, "k-a").Status)
	other := rp.pay(alice, id, "k-b")
	assert.Equal(t, http.StatusConflict, other.Status)
	assert.Equal(t, "order_not_payable", other.problem(t).Code)
	assert.EqualValues(t, 1, mock.creates(t))
	assert.Zero(t, count(t, env.DB, "idempotency_keys", "idempotency_key = 'k-b'"), "a refused request stores nothing")

	notMine := rp.pay(bob, id, "k-c")
	assert.Equal(t, http.StatusNotFound, notMine.Status)
}

// S7, guarded: the platform commits the payment but the call times out. The client is told to retry;
// the sweeper finds the payment; one payment; the key then replays it. The platform holds its answer
// until the pay flow's PAYMENTS_TIMEOUT (2 s) ends the call; the lease is run out by hand.
func TestPayTimeoutIsResolvedBySweeper(t *testing.T) {
	t.Parallel()
	env, rp, mock, id, first := payOutcomeUnknown(t, "pay-timeout", 2)
	assert.NotEmpty(t, first.Header.Get("Retry-After"))
	_, found, err := mock.client.FindByMerchantOrderNo(context.Background(), fmt.Sprint(id))
	require.NoError(t, err)
	require.True(t, found, "the platform committed the payment despite the timeout")

	expireLease(t, env, "pay-timeout")
	done, err := rp.app.Sweeper.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]int{sweeper.RepairCompleted: 1}, done)
	assert.Equal(t, "COMPLETED", recordOf(t, env, "pay-timeout").State)
	assert.Equal(t, "PAYING", statusOf(t, env.DB, id))
	assert.EqualValues(t, 1, mock.creates(t), "the sweeper asked; it did not pay again")

	replay := rp.pay(alice, id, "pay-timeout")
	assert.Equal(t, http.StatusCreated, replay.Status)
	assert.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	p, found, err := mock.client.FindByMerchantOrderNo(context.Background(), fmt.Sprint(id))
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, p.ID, paymentID(t, replay))
	assert.Equal(t, 1.0, metricValue(t, rp.reg, "idemshop_sweeper_repairs_total", map[string]string{"result": "completed"}))
}

func TestPayPlatform5xxIsRetryable(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, func(c *paymock.Config) { c.Chaos.ErrorRate = 1 })
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	id, _ := rp.newOrder(alice, 1, 1)

	r := rp.pay(alice, id, "pay-5xx")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "payment_unavailable", r.problem(t).Code)
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, "FAILED_RETRYABLE", recordOf(t, env, "pay-5xx").State)
	assert.Equal(t, "PENDING", statusOf(t, env.DB, id))

	mock.setChaos(t, `{"error_rate":0}`)
	retry := rp.pay(alice, id, "pay-5xx")
	require.Equal(t, http.StatusCreated, retry.Status, "%s", retry.Body)
	assert.Empty(t, retry.Header.Get("Idempotent-Replayed"), "a FAILED_RETRYABLE record runs again")
	paymentID(t, retry)
	assert.Equal(t, "COMPLETED", recordOf(t, env, "pay-5xx").State)
	assert.Equal(t, "PAYING", statusOf(t, env.DB, id))
}

func TestPayPlatform4xxIsPermanent(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, nil)
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	id, amount := rp.newOrder(alice, 1, 1)
	// Somebody already created a payment for this order number with another amount: the platform
	// refuses ours with 409.
	_, _, err := mock.client.CreatePayment(context.Background(), payclient.CreatePaymentRequest{
		MerchantOrderNo: fmt.Sprint(id), AmountCents: amount + 1, Currency: "EUR", NotifyURL: "http://127.0.0.1:9/none"})
	require.NoError(t, err)

	r := rp.pay(alice, id, "pay-4xx")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	assert.Equal(t, "payment_refused", r.problem(t).Code)
	assert.Equal(t, fmt.Sprintf("/v1/orders/%d/pay", id), r.problem(t).Instance, "a stored problem names its instance too")
	assert.Equal(t, "FAILED_PERMANENT", recordOf(t, env, "pay-4xx").State)

	again := rp.pay(alice, id, "pay-4xx")
	assert.Equal(t, http.StatusUnprocessableEntity, again.Status)
	assert.Equal(t, string(r.Body), string(again.Body), "the stored error is replayed")
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.EqualValues(t, 2, mock.creates(t), "ours was sent once; the replay sent nothing")
	assert.Equal(t, "PENDING", statusOf(t, env.DB, id))
}

// gate blocks the first call of a hook until opened, and tells the test when it got there.
type gate struct {
	once      sync.Once
	closeOnce sync.Once
	reached   chan struct{}
	open      chan struct{}
}

func newGate() *gate { return &gate{reached: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) hook(context.Context) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.reached)
		<-g.open
	}
}

// release opens the gate (once): the held call goes on.
func (g *gate) release() { g.closeOnce.Do(func() { close(g.open) }) }

func (g *gate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(patience):
		t.Fatal("the pay flow never reached the fault point")
	}
}

// S8, guarded: holder A is paused before its write, past its lease; B takes over with a higher token and
// writes; A's late write is rejected by the fence in the UPDATE, and counted, and A's client gets B's
// stored answer, replayed, as any retry would (not 409: nothing is in flight). A's leases (the record's
// and the Redis lock) are run out by hand while A is held: a short lease would also run out under A
// before it reached its hook on a slow machine, and A would then stop without ever trying to write.
func TestPayStaleHolderIsFencedOut(t *testing.T) {
	t.Parallel()
	mock, id, b := staleHolderAnswersWithTheNewerResult(t, pay.CrashBeforeWrite)
	assert.EqualValues(t, 2, mock.creates(t), "both called the platform; it made one payment")
	p, found, err := mock.client.FindByMerchantOrderNo(context.Background(), fmt.Sprint(id))
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, p.ID, paymentID(t, b))
}

// A holder paused right after its claim, past its lease, finds on waking that the order has its payment
// (B took the record over and completed it): it would record that payment, and the fence refuses the
// write. It answers with B's stored 201, replayed, and never calls the platform.
func TestPayStaleHolderThatFindsThePaymentReplaysTheNewerResult(t *testing.T) {
	t.Parallel()
	mock, _, _ := staleHolderAnswersWithTheNewerResult(t, pay.CrashAfterClaim)
	assert.EqualValues(t, 1, mock.creates(t), "only B called the platform")
}

// staleHolderAnswersWithTheNewerResult holds pay A at hold, runs its leases out by hand, lets B take
// the record over and complete it, releases A, and asserts that A's write was refused by the fence
// and A answered with B's stored 201, replayed. It returns the platform, the order and B's answer.
func staleHolderAnswersWithTheNewerResult(t *testing.T, hold fault.Point) (*mockPlatform, int64, response) {
	t.Helper()
	env := testenv.New(t)
	mock := newMock(t, nil)
	g := newGate()
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease),
		fault: fault.On(map[fault.Point]func(context.Context){hold: g.hook})})
	t.Cleanup(g.release) // after the replica's: runs before its server closes
	id, _ := rp.newOrder(alice, 1, 1)

	aDone := make(chan response, 1)
	go func() { aDone <- rp.pay(alice, id, "pay-stale") }()
	g.wait(t)
	aFence := recordOf(t, env, "pay-stale").Fence
	// A is paused past its lease: both leases run out.
	expireLease(t, env, "pay-stale")
	expireLock(t, env, id)

	b := rp.pay(alice, id, "pay-stale")
	require.Equal(t, http.StatusCreated, b.Status, "%s", b.Body)
	bRec := recordOf(t, env, "pay-stale")
	require.Greater(t, bRec.Fence, aFence)
	require.Equal(t, "COMPLETED", bRec.State)

	g.release()
	a := recv(t, aDone)
	assert.Equal(t, http.StatusCreated, a.Status, "the stale holder answers with B's result: %s", a.Body)
	assert.Equal(t, "true", a.Header.Get(idempotency.ReplayedHeader))
	assert.Equal(t, string(b.Body), string(a.Body))
	assert.Equal(t, 1.0, metricValue(t, rp.reg, "idemshop_idempotency_fence_rejections_total", nil))
	after := recordOf(t, env, "pay-stale")
	assert.Equal(t, bRec.Fence, after.Fence)
	assert.Equal(t, string(b.Body), string(after.ResponseBody), "B's result stands")
	return mock, id, b
}

// A holder whose lease renewal fails stops before it writes.
func TestPayHolderThatLostItsLeaseDoesNotWrite(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, nil)
	g := newGate()
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease),
		fault: fault.On(map[fault.Point]func(context.Context){pay.CrashAfterRPC: g.hook})})
	t.Cleanup(g.release)
	id, _ := rp.newOrder(alice, 1, 1)
	locker, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)

	done := make(chan response, 1)
	go func() { done <- rp.pay(alice, id, "pay-lost") }()
	g.wait(t)
	// Another owner holds the lease now (as after an expiry and a takeover).
	require.NoError(t, env.Redis.Set(context.Background(), locker.LockKey(pay.LockName(id)), "intruder", time.Hour).Err())
	g.release()

	r := recv(t, done)
	assert.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	rec := recordOf(t, env, "pay-lost")
	assert.Equal(t, "PROCESSING", rec.State, "nothing was written")
	assert.Nil(t, rec.ResponseStatus)
	assert.Equal(t, "PENDING", statusOf(t, env.DB, id))
	assert.Zero(t, metricValue(t, rp.reg, "idemshop_idempotency_fence_rejections_total", nil), "it stopped before trying")
}

// With Redis unreachable the database lease and fence alone guard the payment.
func TestPayWithRedisDown(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{MaxConns: 12, LockTimeout: queued.LockTimeout})
	mock := newMock(t, nil)
	rp := newReplica(t, env, replicaOpts{redis: deadRedis(t), cfg: payTo(mock, longLease)})
	id, _ := rp.newOrder(alice, 1, 1)

	rs := parallel(10, func(int) response { return rp.pay(alice, id, "pay-noredis") })
	var created []string
	for _, r := range rs {
		switch r.Status {
		case http.StatusCreated:
			created = append(created, string(r.Body))
		case http.StatusConflict:
			assert.Equal(t, "idempotency_key_in_use", r.problem(t).Code)
		default:
			t.Errorf("unexpected %d: %s", r.Status, r.Body)
		}
	}
	require.NotEmpty(t, created)
	for _, b := range created {
		assert.Equal(t, created[0], b)
	}
	assert.EqualValues(t, 1, mock.creates(t))

	// Different keys for one order, at once: however many pass the local check, one payment.
	id2, _ := rp.newOrder(alice, 1, 1)
	rs = parallel(5, func(i int) response { return rp.pay(alice, id2, fmt.Sprintf("pay-noredis-%d", i)) })
	ids := map[string]bool{}
	for _, r := range rs {
		if r.Status == http.StatusCreated {
			ids[paymentID(t, r)] = true
		} else {
			assert.Contains(t, []int{http.StatusConflict}, r.Status, "%s", r.Body)
		}
	}
	assert.Len(t, ids, 1, "one payment for the order")
}

// payOutOfStock pays a new order of bob's at mock, under Idempotency-Key key, after its product's stock
// is gone, and waits for the order to need a refund (REFUND_REQUIRED, with a refund request). It returns
// the replica, the order's id and amount, and the pay response.
func payOutOfStock(t *testing.T, env *testenv.Env, mock *mockPlatform, key string) (*replica, int64, int64, response) {
	t.Helper()
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	id, amount := rp.newOrder(bob, 2, 1)
	require.NoError(t, env.DB.Exec(`UPDATE products SET stock = 0 WHERE id = 2`).Error)
	r := rp.pay(bob, id, key)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	eventually(t, patience, "the order to need a refund", func() bool {
		return statusOf(t, env.DB, id) == "REFUND_REQUIRED"
	})
	return rp, id, amount, r
}

// REFUND_REQUIRED ends REFUNDED with one refund at the platform, though every callback comes 3 times.
func TestRefundRequiredEndsRefundedOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, queued) // a 503 would add an audit row to the 3 counted
	mock := newMock(t, func(c *paymock.Config) {
		c.AutoApproveDelay = 20 * time.Millisecond
		c.Chaos.Duplicates = 3
	})
	rp, id, amount, r := payOutOfStock(t, env, mock, "pay-refund")
	for range 2 { // a second sweep must not refund again
		_, err := rp.app.Sweeper.RunOnce(context.Background())
		require.NoError(t, err)
	}
	eventually(t, patience, "the order to be refunded", func() bool {
		return statusOf(t, env.DB, id) == "REFUNDED"
	})
	p, err := mock.client.GetPayment(context.Background(), paymentID(t, r))
	require.NoError(t, err)
	assert.Equal(t, amount, p.RefundedCents, "refunded once, in full")
	// The platform logs a delivery after the receiver answered, so wait for all three copies.
	events := map[string]bool{}
	eventually(t, patience, "the 3 refund deliveries to be logged", func() bool {
		n := 0
		clear(events)
		for _, a := range mock.Deliveries() {
			if a.Source == "refund" && a.Final {
				events[a.EventID] = true
				n++
			}
		}
		return n == 3
	})
	assert.Len(t, events, 1, "one refund event")
	assert.EqualValues(t, 1, count(t, env.DB, "refund_requests", "order_id = ? AND status = 'DONE'", id))
	eventually(t, patience, "all refund callbacks to arrive", func() bool {
		return count(t, env.DB, "payment_callbacks", "order_id = ? AND status = 'REFUNDED'", id) == 3
	})
	assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks", "order_id = ? AND status = 'REFUNDED' AND applied", id))
}

// An out-of-stock order owes its whole payment back, and a refund made at the platform after that was
// recorded (here an operator's partial refund, whose callback the shop records) leaves less to refund.
// The request is capped at the rest, so the sweeper asks for what is left and the order ends REFUNDED,
// with the payment refunded exactly in full. Asked for the whole amount, the platform refused it
// (refund_exceeds_payment) at every try, and the order stayed REFUND_REQUIRED for ever.
func TestRefundMadeAfterTheRequestIsNotAskedAgain(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, func(c *paymock.Config) { c.AutoApproveDelay = 20 * time.Millisecond })
	rp, id, amount, r := payOutOfStock(t, env, mock, "pay-then-ops-refund")
	require.EqualValues(t, 1, count(t, env.DB, "refund_requests", "order_id = ? AND status = 'PENDING' AND amount_cents = ?", id, amount))

	part := amount / 4
	_, created, err := mock.client.Refund(context.Background(), payclient.RefundRequest{PaymentID: paymentID(t, r),
		RefundNo: fmt.Sprintf("ops-%d", id), AmountCents: part})
	require.NoError(t, err)
	require.True(t, created)
	eventually(t, patience, "the operator's refund to be recorded", func() bool {
		return count(t, env.DB, "orders", "id = ? AND refunded_cents = ?", id, part) == 1
	})
	require.EqualValues(t, 1, count(t, env.DB, "refund_requests", "order_id = ? AND status = 'PENDING' AND amount_cents = ?", id, amount-part),
		"the request asks for what the platform has not refunded yet")

	done, err := rp.app.Sweeper.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]int{sweeper.RefundRequested: 1}, done, "one refund sent, and the platform took it")
	eventually(t, patience, "the order to be refunded", func() bool {
		return statusOf(t, env.DB, id) == "REFUNDED"
	})
	p, err := mock.client.GetPayment(context.Background(), paymentID(t, r))
	require.NoError(t, err)
	assert.Equal(t, amount, p.RefundedCents, "refunded exactly in full: the operator's part and the rest")
	assert.EqualValues(t, 1, count(t, env.DB, "refund_requests", "order_id = ? AND status = 'DONE'", id))
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "id = ? AND refunded_cents = ?", id, amount))
}

// A FAILED callback that arrives while the order is still PENDING (the pay call timed out, so nobody
// recorded PAYING yet) closes the order at once: answered "stale", it would never be resent. The
// sweeper then completes the record, and leaves the order FAILED.
func TestFailedCallbackBeforePayRecordedStillEndsFailed(t *testing.T) {
	t.Parallel()
	env, rp, mock, id, _ := payOutcomeUnknown(t, "pay-race", 1)
	mock.setChaos(t, `{"create_timeout_rate":0}`)
	p, found, err := mock.client.FindByMerchantOrderNo(context.Background(), fmt.Sprint(id))
	require.NoError(t, err)
	require.True(t, found)
	_, err = mock.client.Decline(context.Background(), p.ID)
	require.NoError(t, err)
	eventually(t, patience, "the FAILED callback to arrive", func() bool {
		return count(t, env.DB, "payment_callbacks", "order_id = ? AND status = 'FAILED'", id) == 1
	})
	require.Equal(t, "FAILED", statusOf(t, env.DB, id), "a decline that overtakes the pay flow applies to the PENDING order")

	expireLease(t, env, "pay-race")
	_, err = rp.app.Sweeper.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "COMPLETED", recordOf(t, env, "pay-race").State)
	assert.Equal(t, "FAILED", statusOf(t, env.DB, id))
}

func TestPayBodyAndBusyOrder(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, nil)
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	id, _ := rp.newOrder(alice, 1, 1)

	// The order says what to pay; a body with fields is refused, not ignored.
	r := rp.call(http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", id), alice, "pay-body", []byte(`{"amount_cents":1}`))
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, "malformed_body", r.problem(t).Code)
	assert.Zero(t, count(t, env.DB, "idempotency_keys", "idempotency_key = 'pay-body'"))
	// null is not an object either (encoding/json would take it as {}).
	r = rp.call(http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", id), alice, "pay-null", []byte(`null`))
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, "malformed_body", r.problem(t).Code)
	assert.Zero(t, count(t, env.DB, "idempotency_keys", "idempotency_key = 'pay-null'"))
	// A no-break space is not JSON whitespace: not "no body" (a helper's finding, 2026-12-06: it paid).
	r = rp.call(http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", id), alice, "pay-nbsp", []byte("\u00a0"))
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, "malformed_body", r.problem(t).Code)
	assert.Zero(t, count(t, env.DB, "idempotency_keys", "idempotency_key = 'pay-nbsp'"))
	assert.Equal(t, "PENDING", statusOf(t, env.DB, id))

	// Another request holds the order's pay lock: a new key is told the order is busy.
	locker, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)
	lease, err := locker.Acquire(context.Background(), pay.LockName(id), time.Hour)
	require.NoError(t, err)
	busy := rp.pay(alice, id, "pay-busy")
	assert.Equal(t, http.StatusConflict, busy.Status)
	bp := busy.problem(t)
	assert.Equal(t, "idempotency_key_in_use", bp.Code)
	assert.Contains(t, bp.Detail, "another request", "the detail does not claim this key was used before")
	assert.NotEmpty(t, busy.Header.Get("Retry-After"))
	require.NoError(t, locker.Release(context.Background(), lease))

	ok := rp.call(http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", id), alice, "pay-busy", []byte(`{}`))
	assert.Equal(t, http.StatusCreated, ok.Status, "%s", ok.Body)
	// The retry sends no body where the first sent {}: the same request (pay takes either), replayed.
	again := rp.pay(alice, id, "pay-busy")
	assert.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, string(ok.Body), string(again.Body))
	assert.EqualValues(t, 1, mock.creates(t))
}

// A client that hangs up during the platform call does not leave its payment unrecorded: after the
// claim the work no longer follows the request's context.
func TestPayClientHangUpStillRecordsThePayment(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, nil)
	g := newGate()
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease), fault: fault.On(map[fault.Point]func(context.Context){pay.CrashAfterRPC: g.hook})})
	t.Cleanup(g.release)
	id, _ := rp.newOrder(alice, 1, 1)

	ctx, hangUp := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/v1/orders/%d/pay", rp.srv.URL, id), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header.Set("Idempotency-Key", "pay-hangup")
	sent := rp.sendInBackground(req)
	g.wait(t)
	hangUp()
	require.Error(t, <-sent, "the client gave up")
	g.release()

	eventually(t, patience, "the record to be completed anyway", func() bool {
		return recordOf(t, env, "pay-hangup").State == "COMPLETED"
	})
	assert.Equal(t, "PAYING", statusOf(t, env.DB, id))
	replay := rp.pay(alice, id, "pay-hangup")
	assert.Equal(t, http.StatusCreated, replay.Status)
	assert.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	assert.EqualValues(t, 1, mock.creates(t))
}

// The sweeper leaves a stuck record alone while its order's Redis lock is held: a live retry of the pay
// holds it and is about to take the record over itself. Taking it over anyway would be safe (the fence
// decides) but would race that retry for nothing and make it answer 409. Once the lock is free, the
// sweeper completes the record. Guards the takeover-lock-busy mutant (internal/mutants).
func TestSweeperLeavesARecordWhoseOrderLockIsHeld(t *testing.T) {
	t.Parallel()
	env, rp, mock, id, _ := payOutcomeUnknown(t, "pay-busy", 1)
	before := recordOf(t, env, "pay-busy")
	expireLease(t, env, "pay-busy")
	expireLock(t, env, id)

	ctx := context.Background()
	locker, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)
	retry, err := locker.Acquire(ctx, pay.LockName(id), time.Minute) // a live retry's
	require.NoError(t, err)
	_, err = rp.app.Sweeper.RunOnce(ctx)
	require.NoError(t, err)
	after := recordOf(t, env, "pay-busy")
	assert.Equal(t, "PROCESSING", after.State, "left to the retry that holds the lock")
	assert.Equal(t, before.Fence, after.Fence, "not taken over")

	require.NoError(t, locker.Release(ctx, retry))
	done, err := rp.app.Sweeper.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{sweeper.RepairCompleted: 1}, done)
	assert.Equal(t, "COMPLETED", recordOf(t, env, "pay-busy").State)
	assert.EqualValues(t, 1, mock.creates(t))
}

// A pay held up after its claim (here the order's row, locked by another transaction for longer than
// the work time) still answers within HTTP_WRITE_TIMEOUT: its work follows the request's deadline, though
// not its client's hang-up. Until 2026-12-07 it ran on until the lock was free, and its client got no
// answer (the server could no longer write one; a helper's finding). The record stays PROCESSING, and the
// sweeper finishes it once the row is free: one payment, which the key then replays.
// Guards the pay-work-deadline mutant (internal/mutants).
func TestPayHeldUpAfterItsClaimAnswersWithinTheWriteTimeout(t *testing.T) {
	t.Parallel()
	// lock_timeout a minute: only the work's deadline ends the wait. No callback meanwhile.
	env := testenv.New(t, queued)
	mock := newMock(t, func(c *paymock.Config) { c.AutoApproveDelay = platformHangs })
	rp := newReplica(t, env, replicaOpts{cfg: func(c *config.Orders) {
		payTo(mock, longLease)(c)
		c.PaymentsTimeout = time.Second
		c.HTTP.WriteTimeout = 2 * time.Second // work time 1.5 s
	}})
	id, _ := rp.newOrder(alice, 1, 1)

	holder := env.DB.Begin()
	require.NoError(t, holder.Error)
	require.NoError(t, holder.Exec(`SELECT id FROM orders WHERE id = ? FOR UPDATE`, id).Error)
	released := make(chan struct{})
	release := sync.OnceFunc(func() { holder.Rollback(); close(released) })
	t.Cleanup(release)
	// The lock is held until the answer came, or 6 s at most: without the deadline the pay waits for it,
	// and its client then gets the end of the connection, not an answer.
	stop := time.AfterFunc(6*time.Second, release)
	defer stop.Stop()

	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/orders/%d/pay", rp.srv.URL, id), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header.Set("Idempotency-Key", "pay-held")
	resp, err := rp.srv.Client().Do(req)
	select {
	case <-released:
		t.Fatalf("the pay waited for the row lock past its work time (answer: %v, %v)", resp, err)
	default:
	}
	release()
	require.NoError(t, err, "an answer within HTTP_WRITE_TIMEOUT")
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `"code":"payment_outcome_unknown"`, "the payment may exist")
	assert.Equal(t, "PROCESSING", recordOf(t, env, "pay-held").State, "left for the sweeper, as after a crash")
	assert.Equal(t, "PENDING", statusOf(t, env.DB, id))
	assert.EqualValues(t, 1, mock.creates(t))

	expireLease(t, env, "pay-held")
	done, err := rp.app.Sweeper.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]int{sweeper.RepairCompleted: 1}, done)
	assert.Equal(t, "PAYING", statusOf(t, env.DB, id))
	replay := rp.pay(alice, id, "pay-held")
	assert.Equal(t, http.StatusCreated, replay.Status, "%s", replay.Body)
	assert.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	assert.EqualValues(t, 1, mock.creates(t), "one payment")
}

// The lease is set on the database's clock: locked_until is the database's now() plus PAY_LEASE, so
// an application clock that runs ahead or behind cannot move it (the claim also compares it with now()).
// The lease is an hour, so the minute the bounds allow for the request and the query is far more than a
// slow machine takes, and far less than the lease.
func TestPayLeaseIsOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, func(c *paymock.Config) {
		c.Chaos.CreateTimeoutRate = 1
		c.CreateTimeoutDelay = 50 * time.Millisecond
	})
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	id, _ := rp.newOrder(alice, 1, 1)
	require.Equal(t, http.StatusServiceUnavailable, rp.pay(alice, id, "pay-clock").Status)
	var left float64
	require.NoError(t, env.DB.Raw(`SELECT EXTRACT(EPOCH FROM locked_until - now()) FROM idempotency_keys
		WHERE idempotency_key = 'pay-clock'`).Scan(&left).Error)
	assert.Greater(t, left, (longLease - time.Minute).Seconds())
	assert.LessOrEqual(t, left, longLease.Seconds())
}

// A retry of a pay whose first call's outcome was unknown, after that payment's callback settled the
// order and the platform forgot it (payments-mock keeps its payments in memory: a restart): the retry
// answers with the order's own payment and calls nobody. It called create again, and the platform, which
// no longer knew the order, charged it a second time (a newcomer's finding, 2026-12-06). Whatever the
// callback made of the order: PAID; REFUND_REQUIRED, the money taken and out of stock; FAILED, declined.
// The second payment's SUCCESS could never be applied to either of the last two (payment_mismatch), so
// nothing would have refunded it (a helper's finding, the same day).
func TestPayRetryAfterThePlatformForgotAnswersWithTheOrdersPayment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		callback, order string
		soldOut         bool
	}{
		{callback: "SUCCESS", order: "PAID"},
		{callback: "SUCCESS", order: "REFUND_REQUIRED", soldOut: true},
		{callback: "FAILED", order: "FAILED"},
	} {
		t.Run(tc.order, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			before := committingButSilent(t)
			rp := newReplica(t, env, replicaOpts{cfg: payTo(before, longLease)})
			id, amount := rp.newOrder(alice, 1, 1)
			first := rp.pay(alice, id, "pay-forgotten")
			require.Equal(t, http.StatusServiceUnavailable, first.Status, "%s", first.Body)
			require.Equal(t, "payment_outcome_unknown", first.problem(t).Code)
			payment, found, err := before.client.FindByMerchantOrderNo(context.Background(), fmt.Sprint(id))
			require.NoError(t, err)
			require.True(t, found, "the first call created the payment")
			if tc.soldOut {
				require.NoError(t, env.DB.Exec(`UPDATE products SET stock = 0 WHERE id = 1`).Error)
			}
			cb := callbackFor(id, tc.callback, amount, "evt-forgotten")
			cb.PaymentID = payment.ID
			require.Equal(t, http.StatusOK, rp.postCallback(cb).Status)
			require.Equal(t, tc.order, statusOf(t, env.DB, id))

			after := newMock(t, nil) // the platform restarted: it knows nothing of the order
			retrier := newReplica(t, env, replicaOpts{cfg: payTo(after, longLease)})
			expireLease(t, env, "pay-forgotten")
			expireLock(t, env, id)
			again := retrier.pay(alice, id, "pay-forgotten")
			require.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
			var b struct {
				PaymentID string `json:"payment_id"`
			}
			require.NoError(t, json.Unmarshal(again.Body, &b))
			assert.Equal(t, payment.ID, b.PaymentID, "the order's own payment")
			assert.Zero(t, after.creates(t), "no second charge")
			assert.Equal(t, "COMPLETED", recordOf(t, env, "pay-forgotten").State)
			assert.Equal(t, tc.order, statusOf(t, env.DB, id))
			replay := retrier.pay(alice, id, "pay-forgotten")
			assert.Equal(t, string(again.Body), string(replay.Body))
			assert.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
		})
	}
}

// Redis came back empty (the soak's redis-restart): its fencing counter for the order starts again at 1,
// below the token the record stored (the reconciler's takeovers had raised it to 50). A retry that may
// run again raises the counter past the record's token and runs: it got 409 idempotency_key_in_use at
// every attempt until the counter caught up, one acquisition at a time (a newcomer's finding; 78 s in
// their run). The sweeper's takeover raises it too: its next sweep repairs the record.
func TestAFencingCounterBehindTheRecordIsRaised(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, func(c *paymock.Config) { c.Chaos.ErrorRate = 1 })
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	locker, err := lock.New(env.Redis, env.Prefix)
	require.NoError(t, err)
	lostCounter := func(id int64, key string) {
		require.NoError(t, env.DB.Exec(`UPDATE idempotency_keys SET fence = 50 WHERE idempotency_key = ?`, key).Error)
		require.NoError(t, env.Redis.Del(context.Background(), locker.FenceKey(pay.LockName(id))).Err())
	}

	id, _ := rp.newOrder(alice, 1, 1)
	require.Equal(t, http.StatusServiceUnavailable, rp.pay(alice, id, "pay-behind").Status)
	require.Equal(t, "FAILED_RETRYABLE", recordOf(t, env, "pay-behind").State)
	lostCounter(id, "pay-behind")
	mock.setChaos(t, `{"error_rate":0}`)
	r := rp.pay(alice, id, "pay-behind")
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	rec := recordOf(t, env, "pay-behind")
	assert.Equal(t, "COMPLETED", rec.State)
	assert.Greater(t, rec.Fence, int64(50), "a token above the record's")

	// The sweeper: a record left PROCESSING by a create that timed out, the counter lost the same way.
	mock.setChaos(t, `{"create_timeout_rate":1}`)
	id2, _ := rp.newOrder(alice, 1, 1)
	require.Equal(t, http.StatusServiceUnavailable, rp.pay(alice, id2, "pay-behind-2").Status)
	require.Equal(t, "PROCESSING", recordOf(t, env, "pay-behind-2").State)
	mock.setChaos(t, `{"create_timeout_rate":0}`)
	lostCounter(id2, "pay-behind-2")
	expireLease(t, env, "pay-behind-2")
	expireLock(t, env, id2)
	for range 2 { // the first sweep raises the counter, the second repairs
		_, err := rp.app.Sweeper.RunOnce(context.Background())
		require.NoError(t, err)
	}
	assert.Equal(t, "COMPLETED", recordOf(t, env, "pay-behind-2").State)
}

// A pay request refused for its order id or its body is answered as a reused key when its key already
// names another request (422, as design.md says "whatever the first request's state"), as on create,
// whose body is read after the key's lookup; with a key of its own it gets its 404 or 400. Nothing is
// written either way. The body was checked first, and the client never learned the key was spent (a
// key adversary's finding, 2026-12-07).
func TestAPayRefusedForItsRequestIsAReusedKeyFirst(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, nil)
	rp := newReplica(t, env, replicaOpts{cfg: payTo(mock, longLease)})
	paid, _ := rp.newOrder(alice, 1, 1)
	other, _ := rp.newOrder(alice, 1, 1)
	require.Equal(t, http.StatusCreated, rp.pay(alice, paid, "spent").Status)
	keys := count(t, env.DB, "idempotency_keys", "true")

	for _, tc := range []struct {
		name, path, key string
		body            []byte
		status          int
		code            string
	}{
		{"a body pay refuses, a spent key", fmt.Sprintf("/v1/orders/%d/pay", other), "spent", []byte(`{"x":1}`), http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{"null, the spent key on its own order", fmt.Sprintf("/v1/orders/%d/pay", paid), "spent", []byte(`null`), http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{"an id that names no order, a spent key", "/v1/orders/046/pay", "spent", nil, http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{"a body pay refuses, a new key", fmt.Sprintf("/v1/orders/%d/pay", other), "fresh", []byte(`{"x":1}`), http.StatusBadRequest, "malformed_body"},
		{"an id that names no order, a new key", "/v1/orders/046/pay", "fresh", nil, http.StatusNotFound, "order_not_found"},
		{"an id that names no order, no key", "/v1/orders/046/pay", "", nil, http.StatusNotFound, "order_not_found"},
	} {
		r := rp.call(http.MethodPost, tc.path, alice, tc.key, tc.body)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
		assert.Equal(t, tc.code, r.problem(t).Code, tc.name)
	}
	assert.Equal(t, keys, count(t, env.DB, "idempotency_keys", "true"), "nothing written")
	assert.Equal(t, "PENDING", statusOf(t, env.DB, other))
	replay := rp.pay(alice, paid, "spent")
	assert.Equal(t, http.StatusCreated, replay.Status, "the spent key still replays its own request")
	assert.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
}
