package paymock_test

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/paymock"
)

func TestDuplicatesParallel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	rcv.barrier = 3
	h.setChaos(t, `{"duplicates":3,"parallel":true}`)

	p := h.create(t, "order-par", 1999, rcv.url())
	h.approve(t, p.ID)

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 3 }, "3 deliveries end")
	got := rcv.all()
	require.Len(t, got, 3)
	ids := map[string]bool{}
	for _, r := range got {
		assert.NoError(t, r.SigErr, "every copy is correctly signed")
		assert.Equal(t, got[0].Event.EventID, r.Event.EventID, "one event, three copies")
		assert.Equal(t, paymock.StatusSuccess, r.Event.Status)
		assert.Equal(t, int64(1999), r.Event.AmountCents)
		assert.Equal(t, "order-par", r.Event.MerchantOrderNo)
		ids[r.DeliveryID] = true
	}
	assert.Len(t, ids, 3, "three distinct deliveries")
	assert.Equal(t, 3, rcv.maxConcurrent(), "the copies were in flight together")
	staysAt(t, 200*time.Millisecond, 3, rcv.count, "acked copies are not resent")
}

func TestDuplicatesSequence(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	h.setChaos(t, `{"duplicates":3,"parallel":false}`)

	p := h.create(t, "order-seq", 2500, rcv.url())
	h.approve(t, p.ID)

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 3 }, "3 deliveries end")
	got := rcv.all()
	require.Len(t, got, 3)
	for _, r := range got {
		assert.NoError(t, r.SigErr)
		assert.Equal(t, got[0].Event.EventID, r.Event.EventID)
	}
	assert.Equal(t, 1, rcv.maxConcurrent(), "one copy at a time")
	log := h.deliveries(t, "?payment_id="+p.ID)
	require.Len(t, log, 3)
	for i, a := range log {
		assert.Equal(t, i+1, a.Copy, "copies arrive in order")
		assert.Equal(t, got[i].DeliveryID, a.DeliveryID, "the receiver saw them in the logged order")
	}
	staysAt(t, 200*time.Millisecond, 3, rcv.count, "acked copies are not resent")
}

func TestRetrySchedule(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		respond   func(n int) (int, string)
		attempts  int
		outcomes  []string
		lastFinal bool
	}{
		{
			name: "500 twice then success: exactly 3 attempts",
			respond: func(n int) (int, string) {
				if n <= 2 {
					return http.StatusInternalServerError, `{"result":"error"}`
				}
				return http.StatusOK, ack
			},
			attempts: 3, outcomes: []string{"retry", "retry", "success"},
		},
		{
			name:     "4xx: one attempt",
			respond:  func(int) (int, string) { return http.StatusBadRequest, `{"code":"amount_mismatch"}` },
			attempts: 1, outcomes: []string{"rejected"},
		},
		{
			name:     "404 (unknown order) retries: the shop may not know the order yet",
			respond:  func(int) (int, string) { return http.StatusNotFound, `{}` },
			attempts: 3, outcomes: []string{"retry", "retry", "retry"},
		},
		{
			name:     "2xx without the success body retries until the schedule ends",
			respond:  func(int) (int, string) { return http.StatusOK, `ok` },
			attempts: 3, outcomes: []string{"retry", "retry", "retry"},
		},
		{
			name:     "503 forever: schedule exhausted",
			respond:  func(int) (int, string) { return http.StatusServiceUnavailable, `` },
			attempts: 3, outcomes: []string{"retry", "retry", "retry"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			rcv := newReceiver(t, tc.respond)
			p := h.create(t, "order-retry", 1000, rcv.url())
			h.approve(t, p.ID)

			waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 1 }, "the delivery ends")
			// The longest wait in the test schedule is 40 ms: 300 ms without a new entry means no more.
			staysAt(t, 300*time.Millisecond, tc.attempts, func() int { return len(h.deliveries(t, "")) }, "no attempt after the last")
			assert.Equal(t, tc.attempts, rcv.count(), "the receiver saw every logged attempt")
			log := h.deliveries(t, "")
			for i, a := range log {
				assert.Equal(t, i+1, a.Attempt)
				assert.Equal(t, tc.outcomes[i], a.Outcome)
				assert.Equal(t, i == len(log)-1, a.Final)
				assert.NotZero(t, a.HTTPStatus)
				assert.GreaterOrEqual(t, a.LatencyMS, 0.0)
			}
			for _, r := range rcv.all() {
				assert.NoError(t, r.SigErr, "every retry is signed afresh and valid")
			}
		})
	}
}

func TestUnreachableReceiverIsAnErrorAndRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	url := rcv.url()
	rcv.srv.Close() // nothing listens there any more

	p := h.create(t, "order-down", 1000, url)
	h.approve(t, p.ID)
	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 1 }, "the delivery ends")
	log := h.deliveries(t, "")
	require.Len(t, log, 3)
	for _, a := range log {
		assert.Equal(t, paymock.OutcomeError, a.Outcome)
		assert.Zero(t, a.HTTPStatus)
		assert.NotEmpty(t, a.Error)
	}
}

func TestAckLossResends(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	h.setChaos(t, `{"ack_loss_rate":1}`)
	p := h.create(t, "order-ackloss", 1000, rcv.url())
	h.approve(t, p.ID)

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 1 }, "the delivery ends")
	log := h.deliveries(t, "")
	require.Len(t, log, 3, "every ack lost: the whole schedule runs")
	for _, a := range log {
		assert.Equal(t, paymock.OutcomeAckLost, a.Outcome)
		assert.Equal(t, http.StatusOK, a.HTTPStatus)
	}
	assert.Equal(t, 3, rcv.count(), "the receiver applied-or-deduplicated the same event 3 times")
}

func TestReorderDeliversAStaleEventAfterSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	h.setChaos(t, `{"reorder":true}`)
	p := h.create(t, "order-reorder", 1000, rcv.url())
	h.approve(t, p.ID)

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 2 }, "both deliveries end")
	got := rcv.all()
	require.Len(t, got, 2)
	fresh, stale := got[0].Event, got[1].Event
	assert.Equal(t, paymock.StatusSuccess, fresh.Status)
	assert.Equal(t, paymock.StatusFailed, stale.Status, "the stale event contradicts the newer one")
	assert.NotEqual(t, fresh.EventID, stale.EventID)
	assert.Equal(t, fresh.PaymentID, stale.PaymentID)
	assert.True(t, stale.OccurredAt.Before(fresh.OccurredAt) || stale.OccurredAt.Equal(p.CreatedAt))
	assert.NoError(t, got[1].SigErr)
	log := h.deliveries(t, "")
	assert.Equal(t, "reorder", log[1].Source)

	// The payment itself is still SUCCESS: the stale event is only a delivery.
	var now paymock.Payment
	h.callJSON(t, http.MethodGet, "/v1/payments/"+p.ID, "", http.StatusOK, &now)
	assert.Equal(t, paymock.StatusSuccess, now.Status)
}

func TestReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	p := h.create(t, "order-replay", 1000, rcv.url())
	h.approve(t, p.ID)
	// The first delivery must have ended (its attempt logged), not only reached the receiver: the log
	// is in the order attempts end, and the check below reads the replays as entries 2 to 4.
	waitFor(t, patience, func() bool { return rcv.count() == 1 && finalCount(h.deliveries(t, "")) == 1 }, "the first callback")

	var resp struct {
		PaymentID   string   `json:"payment_id"`
		EventID     string   `json:"event_id"`
		DeliveryIDs []string `json:"delivery_ids"`
	}
	h.callJSON(t, http.MethodPost, "/admin/payments/"+p.ID+"/replay", `{"times":3,"parallel":false}`, http.StatusAccepted, &resp)
	assert.Len(t, resp.DeliveryIDs, 3)
	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 4 }, "replays end")
	got := rcv.all()
	require.Len(t, got, 4)
	for _, r := range got {
		assert.Equal(t, resp.EventID, r.Event.EventID, "a replay is the same event")
		assert.NoError(t, r.SigErr)
	}
	for _, a := range h.deliveries(t, "?event_id="+resp.EventID)[1:] {
		assert.Equal(t, "replay", a.Source)
	}
}

func TestAutoApprove(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *paymock.Config) { c.AutoApproveDelay = 10 * time.Millisecond })
	rcv := newReceiver(t, nil)
	ok := h.create(t, "order-auto", 1000, rcv.url())
	declined := h.create(t, "order-auto-13", 1013, rcv.url())

	waitFor(t, patience, func() bool { return rcv.count() == 2 }, "both settle by themselves")
	status := map[string]paymock.Status{}
	for _, r := range rcv.all() {
		status[r.Event.PaymentID] = r.Event.Status
	}
	assert.Equal(t, paymock.StatusSuccess, status[ok.ID])
	assert.Equal(t, paymock.StatusFailed, status[declined.ID], "amounts ending in 13 cents are declined")
}

func TestSettle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)

	p := h.create(t, "order-settle", 1000, rcv.url())
	assert.Equal(t, paymock.StatusSuccess, h.approve(t, p.ID).Status)
	assert.Equal(t, paymock.StatusSuccess, h.approve(t, p.ID).Status, "approving twice is a no-op")
	status, raw := h.call(t, http.MethodPost, "/v1/payments/"+p.ID+"/decline", "")
	requireProblem(t, status, raw, http.StatusConflict, "payment_not_pending")

	d := h.create(t, "order-decline", 1000, rcv.url())
	var declined paymock.Payment
	h.callJSON(t, http.MethodPost, "/v1/payments/"+d.ID+"/decline", "", http.StatusOK, &declined)
	assert.Equal(t, paymock.StatusFailed, declined.Status)

	trig := h.create(t, "order-13", 4213, rcv.url())
	assert.Equal(t, paymock.StatusFailed, h.approve(t, trig.ID).Status, "the decline trigger applies to API approval too")

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 3 }, "one callback per settlement")
	staysAt(t, 100*time.Millisecond, 3, rcv.count, "the no-op approve sent nothing")
	got := map[string]paymock.Status{}
	for _, r := range rcv.all() {
		got[r.Event.PaymentID] = r.Event.Status
	}
	assert.Equal(t, map[string]paymock.Status{p.ID: "SUCCESS", d.ID: "FAILED", trig.ID: "FAILED"}, got)
}

// A payment refunded in full was approved before: approving it again is the same no-op as approving a
// SUCCESS again (200, nothing sent), and declining it is 409, as for a SUCCESS.
func TestApproveAfterAFullRefundIsANoOp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)

	p := h.create(t, "order-refunded", 1000, rcv.url())
	h.approve(t, p.ID)
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(p.ID, "r-1", 1000), http.StatusCreated, nil)
	assert.Equal(t, paymock.StatusRefunded, h.approve(t, p.ID).Status, "approving a refunded payment again is a no-op")
	status, raw := h.call(t, http.MethodPost, "/v1/payments/"+p.ID+"/decline", "")
	requireProblem(t, status, raw, http.StatusConflict, "payment_not_pending")

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 2 }, "the approval's and the refund's callbacks")
	staysAt(t, 100*time.Millisecond, 2, rcv.count, "the no-op approve sent nothing")
}

// stripVolatile keeps what chaos decides and drops what the clock and the network decide.
func stripVolatile(log []paymock.Attempt) []paymock.Attempt {
	out := make([]paymock.Attempt, len(log))
	for i, a := range log {
		a.Seq, a.At, a.LatencyMS, a.Error = 0, time.Time{}, 0, ""
		out[i] = a
	}
	// Parallel copies finish in any order; the decisions are per (delivery, attempt).
	sort.Slice(out, func(i, j int) bool {
		if out[i].DeliveryID != out[j].DeliveryID {
			return out[i].DeliveryID < out[j].DeliveryID
		}
		return out[i].Attempt < out[j].Attempt
	})
	return out
}

// chaosRun drives one platform through a fixed script under a seed and returns what chaos decided: the
// create statuses (0 when reset_rate closed the connection) and the delivery log.
func chaosRun(t *testing.T, seed uint64) ([]int, []paymock.Attempt) {
	t.Helper()
	h := newHarness(t, func(c *paymock.Config) {
		c.CreateTimeoutDelay = time.Millisecond // the 504 comes at once; the test is about the decision
		c.Chaos = paymock.Chaos{Duplicates: 2, Parallel: true, JitterMS: 5, Reorder: true,
			AckLossRate: 0.4, CreateTimeoutRate: 0.4, ResetRate: 0.3, ErrorRate: 0.3, Seed: seed}
	})
	rcv := newReceiver(t, nil)
	var statuses []int
	settled := 0
	for i := range 12 {
		orderNo := "order-seed-" + string(rune('a'+i))
		status := 0
		resp, err := h.http.Post(h.srv.URL+"/v1/payments", "application/json", strings.NewReader(createBody(orderNo, int64(1000+i), rcv.url())))
		if err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		statuses = append(statuses, status)
		var found struct {
			Payments []paymock.Payment `json:"payments"`
		}
		h.callJSON(t, http.MethodGet, "/v1/payments?merchant_order_no="+orderNo, "", http.StatusOK, &found)
		if len(found.Payments) == 1 {
			h.approve(t, found.Payments[0].ID)
			settled++
		}
	}
	// Each settlement: 2 copies of its event, then, for a SUCCESS of which a copy was acked, the stale
	// event of reorder.
	settleEnded := func() (ended int, acked map[string]bool) {
		acked = map[string]bool{}
		for _, a := range h.deliveries(t, "") {
			if a.Source == "settle" && a.Final {
				ended++
				if a.EventStatus == paymock.StatusSuccess && a.Outcome == paymock.OutcomeSuccess {
					acked[a.PaymentID] = true
				}
			}
		}
		return ended, acked
	}
	waitFor(t, patience, func() bool { n, _ := settleEnded(); return n == settled*2 }, "%d settle deliveries end", settled*2)
	_, acked := settleEnded()
	want := settled*2 + len(acked)
	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == want }, "%d deliveries end", want)
	return statuses, stripVolatile(h.deliveries(t, ""))
}

func TestSameSeedSameChaos(t *testing.T) {
	t.Parallel()
	const seed = 20240601
	t.Logf("chaos seed %d", seed)
	s1, log1 := chaosRun(t, seed)
	s2, log2 := chaosRun(t, seed)
	assert.Equal(t, s1, s2, "same seed, same create outcomes")
	assert.Equal(t, log1, log2, "same seed, same delivery decisions")

	// The script must actually exercise the chaos, or the comparison proves nothing.
	assert.Contains(t, s1, http.StatusServiceUnavailable)
	assert.Contains(t, s1, http.StatusGatewayTimeout)
	assert.Contains(t, s1, 0, "some creates reset")
	outcomes := map[string]int{}
	for _, a := range log1 {
		outcomes[a.Outcome]++
	}
	assert.Positive(t, outcomes[paymock.OutcomeAckLost], "some acks lost: %v", outcomes)
	assert.Positive(t, outcomes[paymock.OutcomeSuccess], "some delivered: %v", outcomes)

	other := uint64(seed + 1)
	t.Logf("other chaos seed %d", other)
	s3, log3 := chaosRun(t, other)
	assert.False(t, assert.ObjectsAreEqual(s1, s3) && assert.ObjectsAreEqual(log1, log3), "another seed, other decisions")
}

func TestPutSeedRestartsTheSequence(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	t.Logf("chaos seed 7")
	statuses := func() string {
		var b strings.Builder
		h.setChaos(t, `{"seed":7,"error_rate":0.5}`)
		for i := range 12 {
			status, _ := h.call(t, http.MethodPost, "/v1/payments", createBody("o-"+string(rune('a'+i)), 100, rcv.url()))
			b.WriteString(http.StatusText(status)[:1])
		}
		return b.String()
	}
	first := statuses()
	second := statuses() // replays of the same orders: 200 instead of 201, same 503 pattern
	assert.Equal(t, strings.ReplaceAll(first, "C", "O"), second)
	assert.Contains(t, first, "S", "some creates failed: %s", first)
}

func TestReorderNeedsAnAckedSuccess(t *testing.T) {
	t.Parallel()
	// Without an acked SUCCESS the stale FAILED would be the only word the receiver gets about the
	// payment, and it would close a paid order. So no copy acked means no stale event at all.
	for _, tc := range []struct {
		name    string
		chaos   string
		respond func(int) (int, string)
		result  string
	}{
		{"every attempt 503: exhausted", `{"reorder":true}`,
			func(int) (int, string) { return http.StatusServiceUnavailable, "" }, "exhausted"},
		{"4xx: rejected", `{"reorder":true}`,
			func(int) (int, string) { return http.StatusBadRequest, `{"code":"nope"}` }, "rejected"},
		{"every ack lost: the platform cannot know it was applied", `{"reorder":true,"ack_loss_rate":1}`,
			nil, "exhausted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			rcv := newReceiver(t, tc.respond)
			h.setChaos(t, tc.chaos)
			p := h.create(t, "order-noack", 1000, rcv.url())
			h.approve(t, p.ID)
			waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 1 }, "the SUCCESS delivery ends")

			// Close waits for the dispatch goroutine, so whatever it would still do is done or counted
			// as abandoned: the metrics below are the end state.
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			require.NoError(t, h.p.Close(ctx))
			for _, r := range rcv.all() {
				assert.Equal(t, paymock.StatusSuccess, r.Event.Status, "no stale FAILED reached the receiver")
			}
			for _, a := range h.deliveries(t, "") {
				assert.Equal(t, "settle", a.Source, "no reorder delivery was made")
			}
			_, raw := h.call(t, http.MethodGet, "/metrics", "")
			var lines []string
			for line := range strings.Lines(string(raw)) {
				// Every result is exported from the start, at 0: count the ones that moved.
				if strings.HasPrefix(line, "idemshop_paymock_callback_deliveries_total{") && !strings.HasSuffix(strings.TrimSpace(line), "} 0") {
					lines = append(lines, strings.TrimSpace(line))
				}
			}
			assert.Equal(t, []string{`idemshop_paymock_callback_deliveries_total{result="` + tc.result + `"} 1`}, lines,
				"one delivery in all: the stale one was neither sent nor abandoned")
		})
	}
}

func TestReorderFollowsAnyAckedCopy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// Copy 1 gets three 503s (its whole schedule), copy 2 is acked at once.
	rcv := newReceiver(t, func(n int) (int, string) {
		if n <= 3 {
			return http.StatusServiceUnavailable, ""
		}
		return http.StatusOK, ack
	})
	h.setChaos(t, `{"reorder":true,"duplicates":2,"parallel":false}`)
	p := h.create(t, "order-oneack", 1000, rcv.url())
	h.approve(t, p.ID)

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 3 }, "2 copies + the stale event end")
	got := rcv.all()
	require.Len(t, got, 5)
	assert.Equal(t, paymock.StatusFailed, got[4].Event.Status, "one acked copy is enough for the stale event")
	log := h.deliveries(t, "")
	assert.Equal(t, "reorder", log[len(log)-1].Source)
}

func TestDelaySuccessHoldsSettledSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	// The hold is far longer than the test: the SUCCESS cannot go out while the test looks.
	c := h.setChaos(t, `{"delay_success_ms":60000}`)
	assert.Equal(t, int64(60000), c.DelaySuccessMS)

	paid := h.create(t, "order-held", 1000, rcv.url())
	h.approve(t, paid.ID)
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(paid.ID, "r-held", 400), http.StatusCreated, nil)
	declined := h.create(t, "order-held-decline", 1000, rcv.url())
	h.callJSON(t, http.MethodPost, "/v1/payments/"+declined.ID+"/decline", "", http.StatusOK, nil)

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 2 }, "the REFUNDED and the FAILED are delivered")
	got := map[paymock.Status]string{}
	for _, r := range rcv.all() {
		got[r.Event.Status] = r.Event.PaymentID
	}
	assert.Equal(t, map[paymock.Status]string{paymock.StatusRefunded: paid.ID, paymock.StatusFailed: declined.ID}, got,
		"the refund overtook the held SUCCESS; FAILED and REFUNDED are not held")

	// Close ends the hold at once (the harness would otherwise wait a minute) and abandons the SUCCESS.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	require.NoError(t, h.p.Close(ctx))
	_, raw := h.call(t, http.MethodGet, "/metrics", "")
	assert.Contains(t, string(raw), `idemshop_paymock_callback_deliveries_total{result="abandoned"} 1`)
	assert.Contains(t, string(raw), `idemshop_paymock_callback_deliveries_total{result="delivered"} 2`)
	for _, r := range rcv.all() {
		assert.NotEqual(t, paymock.StatusSuccess, r.Event.Status)
	}
}

func TestDelaySuccessThenDelivers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)
	h.setChaos(t, `{"delay_success_ms":100}`)
	p := h.create(t, "order-late", 1000, rcv.url())
	h.approve(t, p.ID)

	waitFor(t, patience, func() bool { return finalCount(h.deliveries(t, "")) == 1 }, "the SUCCESS is delivered after its hold")
	log := h.deliveries(t, "")
	require.Len(t, log, 1)
	assert.Equal(t, paymock.OutcomeSuccess, log[0].Outcome)
	got := rcv.all()
	require.Len(t, got, 1)
	// A lower bound only: the hold is a minimum, never a maximum.
	assert.GreaterOrEqual(t, log[0].At.Sub(got[0].Event.OccurredAt), 100*time.Millisecond, "the first attempt waited the hold")
}
