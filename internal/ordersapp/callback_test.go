package ordersapp_test

// The incident's guard: POST /v1/payments/callback on real PostgreSQL and Redis, callbacks signed with
// the shared signer (paysig), the same one payments-mock uses.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/callback"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/config"
	"idemshop/internal/refunds"
	"idemshop/internal/testenv"
)

var demoSecret = []byte(config.DefaultOrders().PaymentWebhookSecret)

// callbackFor builds the platform's callback for an order.
func callbackFor(orderID int64, status string, amount int64, eventID string) callback.Callback {
	return callback.Callback{EventID: eventID, PaymentID: fmt.Sprintf("pay_%d", orderID),
		MerchantOrderNo: strconv.FormatInt(orderID, 10), Status: status, AmountCents: amount,
		Currency: "EUR", OccurredAt: time.Now().UTC()}
}

// postCallback signs body at time t with secret and POSTs it.
func (rp *replica) postRaw(body []byte, sig string) response {
	rp.t.Helper()
	if sig == "" {
		return rp.call(http.MethodPost, "/v1/payments/callback", "", "", body)
	}
	return rp.call(http.MethodPost, "/v1/payments/callback", "", "", body, paysig.Header, sig)
}

func (rp *replica) postCallback(cb callback.Callback) response {
	rp.t.Helper()
	body, err := json.Marshal(cb)
	require.NoError(rp.t, err)
	return rp.postRaw(body, paysig.Sign(demoSecret, time.Now(), body))
}

// orderAndItsSuccess creates alice's order of one unit of product 1 and returns its id and the body
// of its SUCCESS callback under eventID, unsigned.
func (rp *replica) orderAndItsSuccess(eventID string) (int64, []byte) {
	rp.t.Helper()
	id, amount := rp.newOrder(alice, 1, 1)
	body, err := json.Marshal(callbackFor(id, callback.StatusSuccess, amount, eventID))
	require.NoError(rp.t, err)
	return id, body
}

// newOrder creates an order through the API and returns its id and amount.
func (rp *replica) newOrder(token string, productID, qty int) (int64, int64) {
	rp.t.Helper()
	r := rp.createOrder(token, fmt.Sprintf("order-%d-%d-%d", productID, qty, time.Now().UnixNano()),
		fmt.Sprintf(`{"product_id":%d,"quantity":%d}`, productID, qty))
	require.Equal(rp.t, http.StatusCreated, r.Status, "%s", r.Body)
	var o struct {
		ID          int64 `json:"id"`
		AmountCents int64 `json:"amount_cents"`
	}
	require.NoError(rp.t, json.Unmarshal(r.Body, &o))
	return o.ID, o.AmountCents
}

func stockOf(t testing.TB, db *gorm.DB, productID int) int64 {
	t.Helper()
	var s int64
	require.NoError(t, db.Raw(`SELECT stock FROM products WHERE id = ?`, productID).Scan(&s).Error)
	return s
}

func statusOf(t testing.TB, db *gorm.DB, orderID int64) string {
	t.Helper()
	var s string
	require.NoError(t, db.Raw(`SELECT status FROM orders WHERE id = ?`, orderID).Scan(&s).Error)
	return s
}

func outboxRows(t testing.TB, db *gorm.DB, orderID int64) int64 {
	return count(t, db, "outbox", "routing_key = 'order.paid' AND (payload->>'order_id')::bigint = ?", orderID)
}

// parallel runs fn n times at once behind a barrier and returns the responses.
func parallel(n int, fn func(i int) response) []response {
	start := make(chan struct{})
	out := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return out
}

func assertAcked(t testing.TB, rs []response) {
	t.Helper()
	for _, r := range rs {
		assert.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.JSONEq(t, `{"result":"success"}`, string(r.Body))
	}
}

// The incident: three identical callbacks in parallel. One order PAID, stock down once, one outbox
// row, three 200s, and the order shows received 3, applied 1.
func TestTripleCallbackIsAppliedOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, queued)
	rp := newReplica(t, env, replicaOpts{})
	id, amount := rp.newOrder(alice, 1, 2)
	cb := callbackFor(id, callback.StatusSuccess, amount, "evt-incident-1")

	assertAcked(t, parallel(3, func(int) response { return rp.postCallback(cb) }))

	assert.Equal(t, "PAID", statusOf(t, env.DB, id))
	assert.EqualValues(t, 98, stockOf(t, env.DB, 1), "stock down by the quantity exactly once")
	assert.EqualValues(t, 1, outboxRows(t, env.DB, id))
	var ev struct {
		OrderID, UserID, AmountCents, Points int64
	}
	require.NoError(t, env.DB.Raw(`SELECT (payload->>'order_id')::bigint AS order_id, (payload->>'user_id')::bigint AS user_id,
		(payload->>'amount_cents')::bigint AS amount_cents, (payload->>'points')::bigint AS points FROM outbox`).Scan(&ev).Error)
	assert.Equal(t, struct{ OrderID, UserID, AmountCents, Points int64 }{id, aliceID, 2500, 25}, ev)

	got := rp.call(http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), alice, "", nil)
	var o struct {
		Status    string `json:"status"`
		Callbacks struct{ Received, Applied int64 }
	}
	require.NoError(t, json.Unmarshal(got.Body, &o))
	assert.Equal(t, "PAID", o.Status)
	assert.EqualValues(t, 3, o.Callbacks.Received)
	assert.EqualValues(t, 1, o.Callbacks.Applied)
	assert.Equal(t, 1.0, callbackCount(t, rp, "applied"))
	assert.Equal(t, 2.0, callbackCount(t, rp, "duplicate"))
}

// 50 identical parallel callbacks for each of 20 orders of one product, all at once.
func TestCallbackStormKeepsStockExact(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{MaxConns: 12})
	rp := newReplica(t, env, replicaOpts{})
	const orders, copies = 20, 50
	ids := make([]int64, orders)
	cbs := make([]callback.Callback, orders)
	total := int64(0)
	for i := range orders {
		qty := i%3 + 1
		id, amount := rp.newOrder(alice, 4, qty)
		ids[i], total = id, total+int64(qty)
		cbs[i] = callbackFor(id, callback.StatusSuccess, amount, fmt.Sprintf("evt-storm-%d", i))
	}
	rs := parallel(orders*copies, func(i int) response { return rp.postCallback(cbs[i%orders]) })
	// Under heavy load a callback may wait past DB_LOCK_TIMEOUT on the product row: it is then answered
	// 503 with Retry-After and changes nothing but its audit row (rejected), and the platform resends it.
	// Resend those here.
	resent := 0
	for i, r := range rs {
		if r.Status == http.StatusServiceUnavailable {
			assert.NotEmpty(t, r.Header.Get("Retry-After"))
			rs[i] = rp.postCallback(cbs[i%orders])
			resent++
		}
	}
	t.Logf("%d of %d callbacks were asked to retry", resent, len(rs))
	assertAcked(t, rs)

	assert.EqualValues(t, 500-total, stockOf(t, env.DB, 4), "stock = initial − Σ quantity")
	assert.EqualValues(t, orders, count(t, env.DB, "outbox"))
	for _, id := range ids {
		assert.Equal(t, "PAID", statusOf(t, env.DB, id))
		assert.EqualValues(t, 1, outboxRows(t, env.DB, id))
	}
	// One audit row per request: a retried callback is audited twice, its 503 and its resend.
	assert.EqualValues(t, orders*copies+resent, count(t, env.DB, "payment_callbacks"), "a retried callback is audited twice")
	assert.EqualValues(t, resent, count(t, env.DB, "payment_callbacks", "outcome = 'rejected'"), "the 503s are audited as rejected")
	assert.EqualValues(t, orders, count(t, env.DB, "payment_callbacks", "applied"))
}

// Stock 1 and five orders of one unit paid at once: one PAID, four REFUND_REQUIRED, stock 0.
func TestLastUnitIsSoldOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, queued)
	rp := newReplica(t, env, replicaOpts{})
	var ids []int64
	var cbs []callback.Callback
	for i := range 5 {
		id, amount := rp.newOrder(alice, 2, 1)
		ids = append(ids, id)
		cbs = append(cbs, callbackFor(id, callback.StatusSuccess, amount, fmt.Sprintf("evt-last-%d", i)))
	}
	require.NoError(t, env.DB.Exec(`UPDATE products SET stock = 1 WHERE id = 2`).Error)

	assertAcked(t, parallel(5, func(i int) response { return rp.postCallback(cbs[i]) }))

	assert.EqualValues(t, 0, stockOf(t, env.DB, 2), "stock ends at 0, never below")
	assert.EqualValues(t, 1, count(t, env.DB, "orders", "id IN ? AND status = 'PAID'", ids))
	assert.EqualValues(t, 4, count(t, env.DB, "orders", "id IN ? AND status = 'REFUND_REQUIRED'", ids))
	assert.EqualValues(t, 4, count(t, env.DB, "refund_requests", "order_id IN ? AND reason = 'out_of_stock' AND status = 'PENDING'", ids))
	assert.EqualValues(t, 1, count(t, env.DB, "outbox"), "only the paid order earns points")
	assert.EqualValues(t, 5, count(t, env.DB, "payment_callbacks", "applied"))
}

func TestQuantityAboveStockAtPaymentRequiresRefund(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	id, amount := rp.newOrder(bob, 2, 2)
	require.NoError(t, env.DB.Exec(`UPDATE products SET stock = 1 WHERE id = 2`).Error)

	assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-q2"))})
	assert.Equal(t, "REFUND_REQUIRED", statusOf(t, env.DB, id))
	assert.EqualValues(t, 1, stockOf(t, env.DB, 2))
	var refund struct {
		RefundNo    string
		AmountCents int64
	}
	require.NoError(t, env.DB.Raw(`SELECT refund_no, amount_cents FROM refund_requests WHERE order_id = ?`, id).Scan(&refund).Error)
	assert.Equal(t, refunds.No(id), refund.RefundNo)
	assert.Equal(t, amount, refund.AmountCents)
	assert.Zero(t, count(t, env.DB, "outbox"))
}

func TestOutOfOrderCallbacks(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, queued)
	rp := newReplica(t, env, replicaOpts{})

	t.Run("FAILED after SUCCESS leaves the order PAID", func(t *testing.T) {
		id, amount := rp.newOrder(alice, 3, 1)
		assertAcked(t, []response{
			rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-ooo-1")),
			rp.postCallback(callbackFor(id, callback.StatusFailed, amount, "evt-ooo-2")),
		})
		assert.Equal(t, "PAID", statusOf(t, env.DB, id))
		assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks", "order_id = ? AND outcome = 'stale'", id))
	})
	t.Run("two SUCCESS events with different ids apply once", func(t *testing.T) {
		id, amount := rp.newOrder(alice, 3, 2)
		before := stockOf(t, env.DB, 3)
		assertAcked(t, parallel(2, func(i int) response {
			return rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, fmt.Sprintf("evt-two-%d", i)))
		}))
		assert.Equal(t, "PAID", statusOf(t, env.DB, id))
		assert.EqualValues(t, before-2, stockOf(t, env.DB, 3))
		assert.EqualValues(t, 1, outboxRows(t, env.DB, id))
	})
	t.Run("SUCCESS after FAILED keeps FAILED and records one refund", func(t *testing.T) {
		id, amount := rp.newOrder(alice, 3, 1)
		require.NoError(t, env.DB.Exec(`UPDATE orders SET status = 'PAYING' WHERE id = ?`, id).Error)
		before := stockOf(t, env.DB, 3)
		assertAcked(t, []response{rp.postCallback(callbackFor(id, callback.StatusFailed, amount, "evt-f-1"))})
		require.Equal(t, "FAILED", statusOf(t, env.DB, id))
		success := callbackFor(id, callback.StatusSuccess, amount, "evt-f-2")
		assertAcked(t, []response{rp.postCallback(success), rp.postCallback(success)})
		assert.Equal(t, "FAILED", statusOf(t, env.DB, id))
		assert.EqualValues(t, before, stockOf(t, env.DB, 3))
		assert.Zero(t, outboxRows(t, env.DB, id))
		assert.EqualValues(t, 1, count(t, env.DB, "refund_requests", "order_id = ? AND reason = 'success_after_failed'", id))
	})
	t.Run("a partial refund leaves the order PAID", func(t *testing.T) {
		id, amount := rp.newOrder(alice, 3, 1)
		assertAcked(t, []response{
			rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-p-1")),
			rp.postCallback(callbackFor(id, callback.StatusRefunded, 1, "evt-p-2")),
		})
		assert.Equal(t, "PAID", statusOf(t, env.DB, id))
		assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks", "order_id = ? AND status = 'REFUNDED' AND outcome = 'recorded'", id),
			"the partial refund is recorded, not dropped: the refunds that follow add up to it")
		assert.EqualValues(t, 1, count(t, env.DB, "orders", "id = ? AND refunded_cents = 1", id))
	})
	t.Run("REFUNDED after PAID, then its duplicate", func(t *testing.T) {
		id, amount := rp.newOrder(alice, 3, 1)
		assertAcked(t, []response{
			rp.postCallback(callbackFor(id, callback.StatusSuccess, amount, "evt-r-1")),
			rp.postCallback(callbackFor(id, callback.StatusRefunded, amount, "evt-r-2")),
			rp.postCallback(callbackFor(id, callback.StatusRefunded, amount, "evt-r-2")),
		})
		assert.Equal(t, "REFUNDED", statusOf(t, env.DB, id))
		assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks", "order_id = ? AND status = 'REFUNDED' AND outcome = 'duplicate'", id))
	})
}

// Redis is an efficiency layer: with it unreachable the triple callback still applies once.
func TestTripleCallbackWithRedisDown(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, queued)
	rp := newReplica(t, env, replicaOpts{redis: deadRedis(t)})
	id, amount := rp.newOrder(alice, 1, 3)
	cb := callbackFor(id, callback.StatusSuccess, amount, "evt-noredis")

	assertAcked(t, parallel(3, func(int) response { return rp.postCallback(cb) }))
	assert.Equal(t, "PAID", statusOf(t, env.DB, id))
	assert.EqualValues(t, 97, stockOf(t, env.DB, 1))
	assert.EqualValues(t, 1, outboxRows(t, env.DB, id))
	assert.EqualValues(t, 1, count(t, env.DB, "payment_callbacks", "order_id = ? AND applied", id))
}

// syncLog collects log output from handlers running on many goroutines.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Bad input changes no business row: the order stays PENDING, stock and outbox untouched. Each callback
// is still recorded in the audit table, as rejected.
func TestBadCallbacksChangeNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var logs syncLog
	rp := newReplica(t, env, replicaOpts{logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	id, amount := rp.newOrder(alice, 1, 1)
	good, err := json.Marshal(callbackFor(id, callback.StatusSuccess, amount, "evt-bad"))
	require.NoError(t, err)
	sign := func(b []byte) string { return paysig.Sign(demoSecret, time.Now(), b) }
	mutate := func(f func(*callback.Callback)) []byte {
		cb := callbackFor(id, callback.StatusSuccess, amount, "evt-bad")
		f(&cb)
		b, err := json.Marshal(cb)
		require.NoError(t, err)
		return b
	}
	tampered := bytes.Replace(good, []byte(`"amount_cents":1250`), []byte(`"amount_cents":1`), 1)
	require.NotEqual(t, good, tampered)
	wrongAmount := mutate(func(c *callback.Callback) { c.AmountCents = amount + 1 })
	wrongCurrency := mutate(func(c *callback.Callback) { c.Currency = "USD" })
	unknownOrder := mutate(func(c *callback.Callback) { c.MerchantOrderNo = "999999" })
	badStatus := mutate(func(c *callback.Callback) { c.Status = "MAYBE" })
	longEventID := mutate(func(c *callback.Callback) { c.EventID = strings.Repeat("E", 201) })
	longPaymentID := mutate(func(c *callback.Callback) { c.PaymentID = strings.Repeat("P", 201) })
	blankEventID := mutate(func(c *callback.Callback) { c.EventID = " " })
	blankPaymentID := mutate(func(c *callback.Callback) { c.PaymentID = "\t" })
	// encoding/json alone would apply both: it matches names in any case, and the last of two wins.
	wrongCase := bytes.Replace(good, []byte(`"status":`), []byte(`"Status":`), 1)
	require.NotEqual(t, good, wrongCase)
	twice := bytes.Replace(good, []byte(`{`), []byte(`{"status":"FAILED",`), 1)
	// The audit row of a refused body records what the refusal read: the exact names, not the last
	// member encoding/json would have matched.
	idInAnotherCase := append(bytes.TrimSuffix(good, []byte(`}`)), []byte(`,"Event_id":"evt-not-read"}`)...)
	// A newcomer's: encoding/json decodes null into a time as nothing, and the event was applied.
	nullTime := regexp.MustCompile(`"occurred_at":"[^"]*"`).ReplaceAll(good, []byte(`"occurred_at":null`))
	require.NotEqual(t, good, nullTime)
	// A helper's (2026-12-06): the refusal quoted this value twice, in a 1 MB log line.
	hugeTime := regexp.MustCompile(`"occurred_at":"[^"]*"`).ReplaceAll(good, []byte(`"occurred_at":"`+strings.Repeat("Z", 500_000)+`"`))

	cases := []struct {
		name   string
		body   []byte
		sig    string
		status int
		code   string
	}{
		{"missing signature", good, "", 401, "signature_invalid"},
		{"wrong secret", good, paysig.Sign([]byte("not-the-secret"), time.Now(), good), 401, "signature_invalid"},
		{"tampered body", tampered, sign(good), 401, "signature_invalid"},
		{"stale timestamp", good, paysig.Sign(demoSecret, time.Now().Add(-301*time.Second), good), 401, "signature_invalid"},
		{"malformed header", good, "t=abc,v1=zz", 401, "signature_invalid"},
		{"amount mismatch", wrongAmount, sign(wrongAmount), 400, "amount_mismatch"},
		{"currency mismatch", wrongCurrency, sign(wrongCurrency), 400, "amount_mismatch"},
		{"unknown order", unknownOrder, sign(unknownOrder), 404, "order_not_found"},
		{"malformed JSON", []byte(`{"event_id":`), sign([]byte(`{"event_id":`)), 400, "malformed_body"},
		{"unknown status", badStatus, sign(badStatus), 400, "validation_failed"},
		// Refused, not cut to the 200 bytes stored: two ids that differ past the cut are two events.
		{"event_id over 200 bytes", longEventID, sign(longEventID), 400, "validation_failed"},
		{"payment_id over 200 bytes", longPaymentID, sign(longPaymentID), 400, "validation_failed"},
		// A newcomer's: " " was stored as an event.
		{"event_id of white space", blankEventID, sign(blankEventID), 400, "validation_failed"},
		{"payment_id of white space", blankPaymentID, sign(blankPaymentID), 400, "validation_failed"},
		{"a field in another case", wrongCase, sign(wrongCase), 400, "malformed_body"},
		{"a field twice", twice, sign(twice), 400, "malformed_body"},
		{"event_id in another case, after it", idInAnotherCase, sign(idInAnotherCase), 400, "malformed_body"},
		{"occurred_at null", nullTime, sign(nullTime), 400, "malformed_body"},
		{"occurred_at of 500 kB", hugeTime, sign(hugeTime), 400, "malformed_body"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rp.postRaw(tc.body, tc.sig)
			assert.Equal(t, tc.status, r.Status, "%s", r.Body)
			assert.Equal(t, tc.code, r.problem(t).Code)
		})
	}
	assert.Equal(t, "PENDING", statusOf(t, env.DB, id))
	assert.EqualValues(t, 100, stockOf(t, env.DB, 1))
	assert.Zero(t, count(t, env.DB, "outbox"))
	assert.Zero(t, count(t, env.DB, "refund_requests"))
	assert.Zero(t, count(t, env.DB, "payment_callbacks", "applied OR outcome <> 'rejected'"))
	assert.EqualValues(t, len(cases), count(t, env.DB, "payment_callbacks"))
	assert.EqualValues(t, 5, count(t, env.DB, "payment_callbacks", "NOT signature_ok"))
	assert.Zero(t, count(t, env.DB, "payment_callbacks", "event_id = 'evt-not-read'"), "audited under the member the refusal read")
	assert.Contains(t, logs.String(), `"alert":"amount_mismatch"`, "an amount mismatch is logged as an alert")
	assert.Equal(t, float64(len(cases)), callbackCount(t, rp, "rejected"))
	// By reason: a platform whose secret no longer matches shows apart from a body the shop cannot read.
	assert.Equal(t, map[string]float64{"signature_invalid": 5, "amount_mismatch": 2, "order_not_found": 1,
		"malformed": float64(len(cases) - 8), "payment_mismatch": 0, "event_id_reused": 0, "not_applied": 0}, rejectedCounts(t, rp))
	for line := range strings.Lines(logs.String()) {
		assert.Less(t, len(line), 4096, "a log line quotes what the sender sent, clipped: %.200s", line)
	}
}

// Two signature lines are judged as the one value they make joined, as a proxy would forward them (a
// newcomer's: the first line alone was read, so a good line followed by garbage applied, while the
// same two joined on their way were refused).
func TestCallbackSignatureLinesAreJudgedJoined(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	id, body := rp.orderAndItsSuccess("evt-two-lines")
	good := paysig.Sign(demoSecret, time.Now(), body)
	ts, v1, ok := strings.Cut(good, ",")
	require.True(t, ok, "a signature is t=...,v1=...: %s", good)

	for _, lines := range [][]string{
		{good, "garbage"},
		{good, "t=1"},
		{"t=1,v1=" + strings.Repeat("0", 64), good},
	} {
		r := rp.call(http.MethodPost, "/v1/payments/callback", "", "", body, paysig.Header, lines[0], paysig.Header, lines[1])
		assert.Equal(t, http.StatusUnauthorized, r.Status, "%q: %s", lines, r.Body)
		assert.Equal(t, "signature_invalid", r.problem(t).Code)
	}
	assert.Equal(t, "PENDING", statusOf(t, env.DB, id))
	assert.EqualValues(t, 100, stockOf(t, env.DB, 1))

	// Its timestamp on one line and its MAC on the next: together, a good signature.
	r := rp.call(http.MethodPost, "/v1/payments/callback", "", "", body, paysig.Header, ts, paysig.Header, v1)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, "PAID", statusOf(t, env.DB, id))
	assert.EqualValues(t, 99, stockOf(t, env.DB, 1))
	assert.EqualValues(t, 1, outboxRows(t, env.DB, id))
}

// A member the platform adds in a later version (a fee, a nested object, even twice) is ignored: the
// callback applies as it would without it. Only the fields the shop reads must be exact and single.
func TestCallbackIgnoresMembersItDoesNotKnow(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	id, body := rp.orderAndItsSuccess("evt-newer-platform")
	body = bytes.Replace(body, []byte(`{`), []byte(`{"fee_cents":30,"risk":{"Status":"x"},"fee_cents":31,`), 1)
	r := rp.postRaw(body, paysig.Sign(demoSecret, time.Now(), body))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, "PAID", statusOf(t, env.DB, id))
	assert.EqualValues(t, 99, stockOf(t, env.DB, 1))
	assert.EqualValues(t, 1, outboxRows(t, env.DB, id))
}

// rejectedCounts reads idemshop_payments_callbacks_rejected_total by reason.
func rejectedCounts(t testing.TB, rp *replica) map[string]float64 {
	t.Helper()
	mfs, err := rp.reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "idemshop_payments_callbacks_rejected_total" {
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return got
}

func callbackCount(t testing.TB, rp *replica, outcome string) float64 {
	t.Helper()
	mfs, err := rp.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "idemshop_payments_callbacks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
