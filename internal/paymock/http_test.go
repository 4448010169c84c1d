package paymock_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/paymock"
)

func TestCreateIsIdempotentOnMerchantOrderNo(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	first := h.create(t, "order-idem", 1999, rcv.url())
	assert.Equal(t, paymock.StatusPending, first.Status)

	var again paymock.Payment
	h.callJSON(t, http.MethodPost, "/v1/payments", createBody("order-idem", 1999, rcv.url()), http.StatusOK, &again)
	assert.Equal(t, first, again, "the same order and amount: the same payment")

	status, raw := h.call(t, http.MethodPost, "/v1/payments", createBody("order-idem", 2000, rcv.url()))
	requireProblem(t, status, raw, http.StatusConflict, "merchant_order_no_conflict")
	status, raw = h.call(t, http.MethodPost, "/v1/payments",
		`{"merchant_order_no":"order-idem","amount_cents":1999,"currency":"USD","notify_url":"`+rcv.url()+`"}`)
	requireProblem(t, status, raw, http.StatusConflict, "merchant_order_no_conflict")

	var found struct {
		Payments []paymock.Payment `json:"payments"`
	}
	h.callJSON(t, http.MethodGet, "/v1/payments?merchant_order_no=order-idem", "", http.StatusOK, &found)
	assert.Equal(t, []paymock.Payment{first}, found.Payments, "the conflicts changed nothing")
	h.callJSON(t, http.MethodGet, "/v1/payments?merchant_order_no=never-created", "", http.StatusOK, &found)
	assert.Empty(t, found.Payments)
}

// A create asked again gets the same payment back, so only GET /admin/creates tells how many times the
// merchant asked: every well-formed create counts, whatever came of it (replayed, conflict, chaos).
func TestAdminCreatesCountsEveryCreateRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *paymock.Config) { c.CreateTimeoutDelay = 10 * time.Millisecond })
	rcv := newReceiver(t, nil)
	asked := func(no string) int64 {
		var got struct {
			MerchantOrderNo string `json:"merchant_order_no"`
			Requests        int64  `json:"requests"`
		}
		h.callJSON(t, http.MethodGet, "/admin/creates?merchant_order_no="+no, "", http.StatusOK, &got)
		assert.Equal(t, no, got.MerchantOrderNo)
		return got.Requests
	}
	assert.EqualValues(t, 0, asked("order-asked"), "never asked")

	first := h.create(t, "order-asked", 1999, rcv.url())
	assert.EqualValues(t, 1, asked("order-asked"))
	var again paymock.Payment
	h.callJSON(t, http.MethodPost, "/v1/payments", createBody("order-asked", 1999, rcv.url()), http.StatusOK, &again)
	assert.Equal(t, first.ID, again.ID, "one payment")
	assert.EqualValues(t, 2, asked("order-asked"), "but asked twice")
	status, raw := h.call(t, http.MethodPost, "/v1/payments", createBody("order-asked", 2000, rcv.url()))
	requireProblem(t, status, raw, http.StatusConflict, "merchant_order_no_conflict")
	h.setChaos(t, `{"create_timeout_rate":1}`)
	status, _ = h.call(t, http.MethodPost, "/v1/payments", createBody("order-asked", 1999, rcv.url()))
	assert.Equal(t, http.StatusGatewayTimeout, status)
	h.setChaos(t, `{"create_timeout_rate":0,"error_rate":1}`)
	status, _ = h.call(t, http.MethodPost, "/v1/payments", createBody("order-asked", 1999, rcv.url()))
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.EqualValues(t, 5, asked("order-asked"), "a conflict and both chaos answers count too")
	h.call(t, http.MethodPost, "/v1/payments", `{"merchant_order_no":"order-asked","amount_cents":-1,"currency":"EUR"}`)
	assert.EqualValues(t, 5, asked("order-asked"), "a refused request changes nothing")
	assert.EqualValues(t, 0, asked("order-other"))

	for _, q := range []string{"", "?merchant_order_no=", "?merchant_order_no=a&merchant_order_no=b"} {
		status, raw := h.call(t, http.MethodGet, "/admin/creates"+q, "")
		requireProblem(t, status, raw, http.StatusBadRequest, "validation_failed")
	}
}

type refundAnswer struct {
	Refund  paymock.Refund  `json:"refund"`
	Payment paymock.Payment `json:"payment"`
}

func refundBody(paymentID, refundNo string, amount int) string {
	b, _ := json.Marshal(map[string]any{"payment_id": paymentID, "refund_no": refundNo, "amount_cents": amount})
	return string(b)
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	p := h.create(t, "order-refund", 1000, rcv.url())

	status, raw := h.call(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-pending", 100))
	requireProblem(t, status, raw, http.StatusConflict, "payment_not_refundable")
	h.approve(t, p.ID)

	var r1 refundAnswer
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-1", 400), http.StatusCreated, &r1)
	assert.Equal(t, int64(400), r1.Payment.RefundedCents)
	assert.Equal(t, paymock.StatusSuccess, r1.Payment.Status, "partly refunded is still SUCCESS")

	var again refundAnswer
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-1", 400), http.StatusOK, &again)
	assert.Equal(t, r1.Refund, again.Refund, "idempotent on refund_no")
	assert.Equal(t, int64(400), again.Payment.RefundedCents, "and refunded once")

	status, raw = h.call(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-1", 500))
	requireProblem(t, status, raw, http.StatusConflict, "refund_no_conflict")
	status, raw = h.call(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-2", 601))
	requireProblem(t, status, raw, http.StatusBadRequest, "refund_exceeds_payment")

	var r2 refundAnswer
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-2", 600), http.StatusCreated, &r2)
	assert.Equal(t, paymock.StatusRefunded, r2.Payment.Status)
	assert.Equal(t, int64(1000), r2.Payment.RefundedCents)
	// Refunded in full, the payment is REFUNDED: only a SUCCESS one can be refunded (docs/payments-mock.md;
	// it said 400 refund_exceeds_payment here until a newcomer read the docs), while a repeat of one of
	// its refunds is still answered.
	status, raw = h.call(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-3", 1))
	requireProblem(t, status, raw, http.StatusConflict, "payment_not_refundable")
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-2", 600), http.StatusOK, &again)
	assert.Equal(t, r2.Refund, again.Refund)

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 3 }, "SUCCESS + 2 REFUNDED")
	var refunded []int64
	for _, r := range rcv.all() {
		assert.NoError(t, r.SigErr)
		if r.Event.Status == paymock.StatusRefunded {
			refunded = append(refunded, r.Event.AmountCents)
		}
	}
	assert.ElementsMatch(t, []int64{400, 600}, refunded, "one REFUNDED callback per refund, with its amount")
}

func TestCreateTimeoutCommitsThenTimesOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *paymock.Config) { c.CreateTimeoutDelay = 50 * time.Millisecond })
	h.setChaos(t, `{"create_timeout_rate":1}`)

	status, raw := h.call(t, http.MethodPost, "/v1/payments", createBody("order-504", 1000, "http://127.0.0.1:9/cb"))
	assert.Equal(t, http.StatusGatewayTimeout, status, "%s", raw)

	var found struct {
		Payments []paymock.Payment `json:"payments"`
	}
	h.callJSON(t, http.MethodGet, "/v1/payments?merchant_order_no=order-504", "", http.StatusOK, &found)
	require.Len(t, found.Payments, 1, "committed although the caller saw a timeout")
	assert.Equal(t, paymock.StatusPending, found.Payments[0].Status)
}

func TestErrorRateStoresNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.setChaos(t, `{"error_rate":1}`)
	status, raw := h.call(t, http.MethodPost, "/v1/payments", createBody("order-503", 1000, "http://127.0.0.1:9/cb"))
	requireProblem(t, status, raw, http.StatusServiceUnavailable, "chaos_error")

	var found struct {
		Payments []paymock.Payment `json:"payments"`
	}
	h.callJSON(t, http.MethodGet, "/v1/payments?merchant_order_no=order-503", "", http.StatusOK, &found)
	assert.Empty(t, found.Payments)
}

// snapshot is everything observable through the API about a fixture payment and the platform settings.
type snapshot struct {
	Payment    string
	ByOrderNo  string
	Chaos      string
	Deliveries int
	Metrics    string
}

func (h *harness) snapshot(t *testing.T, p paymock.Payment) snapshot {
	t.Helper()
	_, pay := h.call(t, http.MethodGet, "/v1/payments/"+p.ID, "")
	_, byNo := h.call(t, http.MethodGet, "/v1/payments?merchant_order_no="+p.MerchantOrderNo, "")
	_, chaos := h.call(t, http.MethodGet, "/admin/chaos", "")
	_, metrics := h.call(t, http.MethodGet, "/metrics", "")
	var keep []string
	for line := range strings.Lines(string(metrics)) {
		// Callback counters prove no callback went out; request counters legitimately move.
		if strings.HasPrefix(line, "idemshop_paymock_callback") {
			keep = append(keep, line)
		}
	}
	return snapshot{Payment: string(pay), ByOrderNo: string(byNo), Chaos: string(chaos),
		Deliveries: len(h.deliveries(t, "")), Metrics: strings.Join(keep, "")}
}

func TestBadInputIsA4xxProblemAndChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	paid := h.create(t, "order-fixture", 1000, rcv.url())
	h.approve(t, paid.ID)
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(paid.ID, "r-fixture", 100), http.StatusCreated, nil)
	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 2 }, "fixture callbacks end")

	url := rcv.url()
	pay := func(fields string) string { return `{` + fields + `}` }
	okFields := `"merchant_order_no":"o-new","amount_cents":100,"currency":"EUR","notify_url":"` + url + `"`
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"create: empty body", "POST", "/v1/payments", "", 400, "malformed_body"},
		{"create: not JSON", "POST", "/v1/payments", "{", 400, "malformed_body"},
		{"create: unknown field", "POST", "/v1/payments", pay(okFields + `,"tip":1`), 400, "malformed_body"},
		{"create: trailing data", "POST", "/v1/payments", pay(okFields) + "{}", 400, "malformed_body"},
		{"create: float amount", "POST", "/v1/payments", strings.Replace(pay(okFields), "100", "1.5", 1), 400, "malformed_body"},
		{"create: string amount", "POST", "/v1/payments", strings.Replace(pay(okFields), "100", `"100"`, 1), 400, "malformed_body"},
		{"create: zero amount", "POST", "/v1/payments", strings.Replace(pay(okFields), "100", "0", 1), 400, "validation_failed"},
		{"create: negative amount", "POST", "/v1/payments", strings.Replace(pay(okFields), "100", "-5", 1), 400, "validation_failed"},
		{"create: huge amount", "POST", "/v1/payments", strings.Replace(pay(okFields), "100", "100000000000000", 1), 400, "validation_failed"},
		{"create: lower-case currency", "POST", "/v1/payments", strings.Replace(pay(okFields), "EUR", "eur", 1), 400, "validation_failed"},
		{"create: no merchant_order_no", "POST", "/v1/payments", strings.Replace(pay(okFields), "o-new", "", 1), 400, "validation_failed"},
		{"create: space in merchant_order_no", "POST", "/v1/payments", strings.Replace(pay(okFields), "o-new", "o new", 1), 400, "validation_failed"},
		{"create: long merchant_order_no", "POST", "/v1/payments", strings.Replace(pay(okFields), "o-new", strings.Repeat("o", 65), 1), 400, "validation_failed"},
		{"create: relative notify_url", "POST", "/v1/payments", strings.Replace(pay(okFields), url, "/callback", 1), 400, "validation_failed"},
		{"create: ftp notify_url", "POST", "/v1/payments", strings.Replace(pay(okFields), "http://", "ftp://", 1), 400, "validation_failed"},
		{"create: notify_url port past 65535", "POST", "/v1/payments", strings.Replace(pay(okFields), url, "http://127.0.0.1:99999/cb", 1), 400, "validation_failed"},
		{"create: notify_url port 0", "POST", "/v1/payments", strings.Replace(pay(okFields), url, "http://127.0.0.1:0/cb", 1), 400, "validation_failed"},
		{"create: conflicting amount", "POST", "/v1/payments", createBody("order-fixture", 999, url), 409, "merchant_order_no_conflict"},
		{"create: body over the limit", "POST", "/v1/payments", pay(okFields + `,"x":"` + strings.Repeat("a", testBodyLimit) + `"`), 413, "body_too_large"},
		{"create: wrong method", "DELETE", "/v1/payments", "", 405, "method_not_allowed"},
		{"find: no merchant_order_no", "GET", "/v1/payments", "", 400, "validation_failed"},
		{"find: bad merchant_order_no", "GET", "/v1/payments?merchant_order_no=a%20b", "", 400, "validation_failed"},
		{"find: merchant_order_no twice", "GET", "/v1/payments?merchant_order_no=order-fixture&merchant_order_no=o-new", "", 400, "validation_failed"},
		{"get: unknown id", "GET", "/v1/payments/pay_999", "", 404, "payment_not_found"},
		{"approve: unknown id", "POST", "/v1/payments/pay_999/approve", "", 404, "payment_not_found"},
		{"decline: unknown id", "POST", "/v1/payments/pay_999/decline", "", 404, "payment_not_found"},
		{"decline: already SUCCESS", "POST", "/v1/payments/" + paid.ID + "/decline", "", 409, "payment_not_pending"},
		{"refund: not JSON", "POST", "/v1/refunds", "[]", 400, "malformed_body"},
		{"refund: no refund_no", "POST", "/v1/refunds", refundBody(paid.ID, "", 10), 400, "validation_failed"},
		{"refund: zero amount", "POST", "/v1/refunds", refundBody(paid.ID, "r-x", 0), 400, "validation_failed"},
		{"refund: unknown payment", "POST", "/v1/refunds", refundBody("pay_999", "r-x", 10), 404, "payment_not_found"},
		{"refund: more than paid", "POST", "/v1/refunds", refundBody(paid.ID, "r-x", 901), 400, "refund_exceeds_payment"},
		{"refund: refund_no reused", "POST", "/v1/refunds", refundBody(paid.ID, "r-fixture", 50), 409, "refund_no_conflict"},
		{"chaos: duplicates 0", "PUT", "/admin/chaos", `{"duplicates":0}`, 400, "validation_failed"},
		{"chaos: duplicates 21", "PUT", "/admin/chaos", `{"duplicates":21}`, 400, "validation_failed"},
		{"chaos: rate above 1", "PUT", "/admin/chaos", `{"error_rate":1.5}`, 400, "validation_failed"},
		{"chaos: negative jitter", "PUT", "/admin/chaos", `{"jitter_ms":-1}`, 400, "validation_failed"},
		{"chaos: reset_rate above 1", "PUT", "/admin/chaos", `{"reset_rate":1.01}`, 400, "validation_failed"},
		{"chaos: negative reset_rate", "PUT", "/admin/chaos", `{"reset_rate":-0.5}`, 400, "validation_failed"},
		{"chaos: delay_success_ms above 60000", "PUT", "/admin/chaos", `{"delay_success_ms":60001}`, 400, "validation_failed"},
		{"chaos: negative delay_success_ms", "PUT", "/admin/chaos", `{"delay_success_ms":-1}`, 400, "validation_failed"},
		{"chaos: fractional delay_success_ms", "PUT", "/admin/chaos", `{"delay_success_ms":1.5}`, 400, "malformed_body"},
		{"chaos: negative seed", "PUT", "/admin/chaos", `{"seed":-1}`, 400, "malformed_body"},
		{"chaos: valid field with an invalid one", "PUT", "/admin/chaos", `{"duplicates":3,"ack_loss_rate":-0.1}`, 400, "validation_failed"},
		{"chaos: unknown field", "PUT", "/admin/chaos", `{"dupes":3}`, 400, "malformed_body"},
		{"chaos: null field", "PUT", "/admin/chaos", `{"parallel":null}`, 400, "malformed_body"},
		{"chaos: null beside a valid field", "PUT", "/admin/chaos", `{"duplicates":3,"seed":null}`, 400, "malformed_body"},
		{"replay: times 0", "POST", "/admin/payments/" + paid.ID + "/replay", `{"times":0}`, 400, "validation_failed"},
		{"replay: times 21", "POST", "/admin/payments/" + paid.ID + "/replay", `{"times":21}`, 400, "validation_failed"},
		{"replay: no body", "POST", "/admin/payments/" + paid.ID + "/replay", "", 400, "malformed_body"},
		{"replay: unknown payment", "POST", "/admin/payments/pay_999/replay", `{"times":1}`, 404, "payment_not_found"},
		{"unknown route", "GET", "/v1/nothing", "", 404, "not_found"},
	}
	before := h.snapshot(t, paid)
	for _, tc := range cases {
		// Sequential on purpose: every case shares the fixture and the snapshot taken before them all.
		status, raw := h.call(t, tc.method, tc.path, tc.body)
		requireProblem(t, status, raw, tc.status, tc.code)
		assert.Equal(t, before, h.snapshot(t, paid), "%s changed state", tc.name)
	}
	staysAt(t, 100*time.Millisecond, 2, rcv.count, "no callback was sent by a refused request")

	// A PENDING payment has no event to replay.
	pending := h.create(t, "order-pending", 100, url)
	status, raw := h.call(t, http.MethodPost, "/admin/payments/"+pending.ID+"/replay", `{"times":1}`)
	requireProblem(t, status, raw, http.StatusConflict, "payment_not_settled")
}

func TestPutChaosMergesAndValidates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	c := h.setChaos(t, `{"duplicates":3}`)
	assert.Equal(t, paymock.Chaos{Duplicates: 3, Parallel: true, Seed: 1}, c, "omitted fields keep their value")
	c = h.setChaos(t, `{"parallel":false,"jitter_ms":10,"reorder":true,"ack_loss_rate":0.1,"create_timeout_rate":0.2,"reset_rate":0.25,"error_rate":0.3,"delay_success_ms":1500,"seed":99}`)
	assert.Equal(t, paymock.Chaos{Duplicates: 3, JitterMS: 10, Reorder: true, AckLossRate: 0.1, CreateTimeoutRate: 0.2,
		ResetRate: 0.25, ErrorRate: 0.3, DelaySuccessMS: 1500, Seed: 99}, c)
	var got paymock.Chaos
	h.callJSON(t, http.MethodGet, "/admin/chaos", "", http.StatusOK, &got)
	assert.Equal(t, c, got)
	assert.Equal(t, c, h.p.Chaos())
	_, raw := h.call(t, http.MethodGet, "/admin/chaos", "")
	assert.JSONEq(t, `{"duplicates":3,"parallel":false,"jitter_ms":10,"reorder":true,"ack_loss_rate":0.1,"create_timeout_rate":0.2,"reset_rate":0.25,"error_rate":0.3,"delay_success_ms":1500,"seed":99}`,
		string(raw), "the JSON names of every setting")
}

func TestAdminAccess(t *testing.T) {
	t.Parallel()
	t.Run("loopback peer without a token configured", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil)
		h.callJSON(t, http.MethodGet, "/admin/chaos", "", http.StatusOK, nil)
	})
	t.Run("remote peer without a token configured, even claiming loopback in X-Forwarded-For", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil)
		// httptest.NewServer listens on loopback only, so the remote peer is simulated on the handler.
		for _, path := range []string{"/admin/chaos", "/admin/deliveries", "/admin/payments", "/admin/creates?merchant_order_no=x"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.RemoteAddr = "203.0.113.7:40000"
			req.Header.Set("X-Forwarded-For", "127.0.0.1")
			req.Header.Set("X-Real-IP", "127.0.0.1")
			rec := httptest.NewRecorder()
			h.e.ServeHTTP(rec, req)
			requireProblem(t, rec.Code, rec.Body.Bytes(), http.StatusForbidden, "admin_loopback_only")
		}
		// The platform API itself is not restricted.
		req := httptest.NewRequest(http.MethodGet, "/v1/payments?merchant_order_no=x", nil)
		req.RemoteAddr = "203.0.113.7:40000"
		rec := httptest.NewRecorder()
		h.e.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusOK, rec.Code)
	})
	t.Run("token configured", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, func(c *paymock.Config) { c.AdminToken = "s3cret" })
		for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret2", "s3cret", "Basic czNjcmV0"} {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, h.srv.URL+"/admin/chaos", nil)
			require.NoError(t, err)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := h.http.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "Authorization %q", auth)
		}
		// One line, as orders wants: two, even both right, are refused.
		for _, lines := range [][]string{{"Bearer s3cret", "Bearer wrong"}, {"Bearer wrong", "Bearer s3cret"}, {"Bearer s3cret", "Bearer s3cret"}} {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, h.srv.URL+"/admin/chaos", strings.NewReader(`{"duplicates":2}`))
			require.NoError(t, err)
			req.Header["Authorization"] = lines
			resp, err := h.http.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "Authorization %q", lines)
		}
		assert.Equal(t, 1, h.p.Chaos().Duplicates, "no refused request changed the chaos")
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, h.srv.URL+"/admin/chaos", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := h.http.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		// The scheme is case-insensitive (RFC 9110 §11.1), as it is for orders; the token is not.
		for auth, want := range map[string]int{"bearer s3cret": http.StatusOK, "BEARER s3cret": http.StatusOK, "bearer S3CRET": http.StatusUnauthorized} {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, h.srv.URL+"/admin/chaos", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", auth)
			resp, err := h.http.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, want, resp.StatusCode, "Authorization %q", auth)
		}
	})
}

func TestMetricsCountCallbacksByOutcome(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, func(n int) (int, string) {
		if n == 1 {
			return http.StatusBadGateway, ""
		}
		return http.StatusOK, ack
	})
	p := h.create(t, "order-metrics", 1000, rcv.url())
	h.approve(t, p.ID)
	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 1 }, "delivered")
	_, raw := h.call(t, http.MethodGet, "/metrics", "")
	m := string(raw)
	assert.Contains(t, m, `idemshop_paymock_callbacks_sent_total{outcome="retry"} 1`)
	assert.Contains(t, m, `idemshop_paymock_callbacks_sent_total{outcome="success"} 1`)
	assert.Contains(t, m, `idemshop_paymock_callback_deliveries_total{result="delivered"} 1`)
	assert.Contains(t, m, `idemshop_paymock_payment_creates_total{result="created"} 1`)
	assert.Contains(t, m, `idemshop_paymock_callback_deliveries_in_flight 0`)
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*paymock.Config){
		"no secret":           func(c *paymock.Config) { c.Secret = nil },
		"no callback timeout": func(c *paymock.Config) { c.CallbackTimeout = 0 },
		"negative step":       func(c *paymock.Config) { c.RetrySchedule = []time.Duration{-1} },
		"no log":              func(c *paymock.Config) { c.DeliveryLogLimit = 0 },
		"bad chaos":           func(c *paymock.Config) { c.Chaos.Duplicates = 0 },
	} {
		cfg := testConfig()
		mutate(&cfg)
		_, err := paymock.New(cfg, slogDiscard(), promRegistry())
		assert.Error(t, err, name)
	}
	_, err := paymock.New(testConfig(), nil, promRegistry())
	assert.Error(t, err, "nil logger")
	_, err = paymock.New(testConfig(), slogDiscard(), nil)
	assert.Error(t, err, "nil registerer")
}

func TestResetCommitsThenClosesTheConnection(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.setChaos(t, `{"reset_rate":1}`)

	body := createBody("order-reset", 1000, "http://127.0.0.1:9/cb")
	resp, err := h.http.Post(h.srv.URL+"/v1/payments", "application/json", strings.NewReader(body))
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "no answer at all, not even a status line")
	t.Logf("the client saw: %v", err)

	var found struct {
		Payments []paymock.Payment `json:"payments"`
	}
	h.callJSON(t, http.MethodGet, "/v1/payments?merchant_order_no=order-reset", "", http.StatusOK, &found)
	require.Len(t, found.Payments, 1, "committed although the caller got no answer")
	assert.Equal(t, paymock.StatusPending, found.Payments[0].Status)

	// The caller's retry, once the chaos stops, finds the payment it could not see.
	h.setChaos(t, `{"reset_rate":0}`)
	var again paymock.Payment
	h.callJSON(t, http.MethodPost, "/v1/payments", body, http.StatusOK, &again)
	assert.Equal(t, found.Payments[0], again)

	_, raw := h.call(t, http.MethodGet, "/metrics", "")
	assert.Contains(t, string(raw), `idemshop_paymock_payment_creates_total{result="chaos_reset"} 1`)
	assert.Contains(t, string(raw), `idemshop_paymock_payment_creates_total{result="replayed"} 1`)
}

func TestCreateChaosPrecedence(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *paymock.Config) { c.CreateTimeoutDelay = time.Millisecond })
	found := func(orderNo string) int {
		var out struct {
			Payments []paymock.Payment `json:"payments"`
		}
		h.callJSON(t, http.MethodGet, "/v1/payments?merchant_order_no="+orderNo, "", http.StatusOK, &out)
		return len(out.Payments)
	}

	h.setChaos(t, `{"error_rate":1,"create_timeout_rate":1,"reset_rate":1}`)
	status, raw := h.call(t, http.MethodPost, "/v1/payments", createBody("order-all", 1000, "http://127.0.0.1:9/cb"))
	requireProblem(t, status, raw, http.StatusServiceUnavailable, "chaos_error")
	assert.Zero(t, found("order-all"), "error wins: nothing stored")

	h.setChaos(t, `{"error_rate":0}`)
	status, raw = h.call(t, http.MethodPost, "/v1/payments", createBody("order-tr", 1000, "http://127.0.0.1:9/cb"))
	assert.Equal(t, http.StatusGatewayTimeout, status, "timeout wins over reset: %s", raw)
	assert.Equal(t, 1, found("order-tr"))
}

func TestAdminPaymentsListsEveryRecord(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	type records struct {
		Payments []paymock.Payment `json:"payments"`
		Refunds  []paymock.Refund  `json:"refunds"`
	}
	status, raw := h.call(t, http.MethodGet, "/admin/payments", "")
	require.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"payments":[],"refunds":[]}`, string(raw), "empty lists, not null")

	// Eleven payments, so that a string sort (pay_10 before pay_2) would show.
	var ids []string
	for i := range 11 {
		ids = append(ids, h.create(t, "order-rec-"+strconv.Itoa(i), int64(1000+i), rcv.url()).ID)
	}
	h.approve(t, ids[1])
	h.approve(t, ids[9])
	h.callJSON(t, http.MethodPost, "/v1/payments/"+ids[2]+"/decline", "", http.StatusOK, nil)
	// pay_10 partly refunded, then pay_2 fully in two parts.
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(ids[9], "rf-a", 9), http.StatusCreated, nil)
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(ids[1], "rf-b", 600), http.StatusCreated, nil)
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(ids[1], "rf-c", 401), http.StatusCreated, nil)

	var got records
	h.callJSON(t, http.MethodGet, "/admin/payments", "", http.StatusOK, &got)
	require.Len(t, got.Payments, 11)
	for i, p := range got.Payments {
		assert.Equal(t, "pay_"+strconv.Itoa(i+1), p.ID, "sorted by the number in the id")
		assert.Equal(t, "order-rec-"+strconv.Itoa(i), p.MerchantOrderNo)
		var one paymock.Payment
		h.callJSON(t, http.MethodGet, "/v1/payments/"+p.ID, "", http.StatusOK, &one)
		assert.Equal(t, one, p, "the same record as the query API")
	}
	assert.Equal(t, paymock.StatusRefunded, got.Payments[1].Status)
	assert.Equal(t, int64(1001), got.Payments[1].RefundedCents)
	assert.Equal(t, paymock.StatusFailed, got.Payments[2].Status)
	assert.Equal(t, paymock.StatusSuccess, got.Payments[9].Status)
	assert.Equal(t, int64(9), got.Payments[9].RefundedCents)
	assert.Equal(t, paymock.StatusPending, got.Payments[0].Status)

	require.Len(t, got.Refunds, 3)
	type brief struct {
		No, Payment string
		Amount      int64
	}
	var refs []brief
	for _, r := range got.Refunds {
		refs = append(refs, brief{r.RefundNo, r.PaymentID, r.AmountCents})
		assert.False(t, r.CreatedAt.IsZero())
	}
	assert.Equal(t, []brief{{"rf-a", ids[9], 9}, {"rf-b", ids[1], 600}, {"rf-c", ids[1], 401}}, refs, "in creation order")
	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 6 }, "callbacks end before the harness closes")
}
