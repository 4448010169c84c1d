package paymock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/paymock"
	"idemshop/internal/replay"
)

// exportWait bounds each wait of these tests for deliveries to end: a deadline for a failing run only.
const exportWait = time.Minute

// export reads GET /admin/deliveries?format=jsonl (with extra query) and parses it as a recording.
func (h *harness) export(t *testing.T, query string) (*replay.Recording, []byte) {
	t.Helper()
	resp, err := h.http.Get(h.srv.URL + "/admin/deliveries?format=jsonl" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	rec, err := replay.Parse(bytes.NewReader(raw))
	require.NoError(t, err, "%s", raw)
	return rec, raw
}

// The delivery log, exported in the replay format: the incident's three parallel copies become one
// group of three identical lines, each body is exactly what the receiver got, and the header carries
// each order's amount (a REFUNDED body only carries the refund's).
func TestExportDeliveriesAsAReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, nil)

	h.setChaos(t, `{"duplicates":3,"parallel":true}`)
	a := h.create(t, "order-a", 1999, rcv.url())
	h.approve(t, a.ID)
	waitFor(t, exportWait, func() bool { return finalCount(h.deliveries(t, "")) == 3 }, "the incident's 3 copies end")

	h.setChaos(t, `{"duplicates":2,"parallel":false}`) // one copy after the other: never one group
	b := h.create(t, "order-b", 2500, rcv.url())
	h.approve(t, b.ID)
	waitFor(t, exportWait, func() bool { return finalCount(h.deliveries(t, "")) == 5 }, "b's 2 copies end")

	h.setChaos(t, `{"duplicates":1}`)
	h.callJSON(t, http.MethodPost, "/v1/refunds", refundBody(b.ID, "r-b", 1000), http.StatusCreated, nil)
	waitFor(t, exportWait, func() bool { return finalCount(h.deliveries(t, "")) == 6 }, "the refund's callback ends")

	rec, raw := h.export(t, "")
	assert.Equal(t, replay.Format, rec.Header.Format)
	assert.Equal(t, map[string]replay.OrderSpec{"order-a": {AmountCents: 1999}, "order-b": {AmountCents: 2500}},
		rec.Header.Orders, "amounts from the payments, quantities left to the replay")
	require.Len(t, rec.Deliveries, 6, "%s", raw)

	groups := rec.Groups()
	require.Len(t, groups, 4, "a's 3 copies at once; b's 2 copies one after the other; the refund")
	assert.Len(t, groups[0], 3)
	assert.EqualValues(t, 0, rec.Deliveries[0].AtMS)
	for _, i := range groups[0] {
		assert.Equal(t, rec.Deliveries[0].Body, rec.Deliveries[i].Body, "copies of one event are identical")
		assert.Equal(t, "order-a", rec.Events[i].MerchantOrderNo)
	}
	assert.Equal(t, "REFUNDED", rec.Events[5].Status)
	assert.EqualValues(t, 1000, rec.Events[5].AmountCents)

	// Each body is byte for byte what was sent (the receiver decoded the same event), and the debug
	// headers say which delivery and attempt each line was; no signature is kept.
	got := rcv.all()
	require.Len(t, got, 6)
	sent := map[string]paymock.Event{}
	for _, r := range got {
		sent[r.DeliveryID] = r.Event
	}
	for i, d := range rec.Deliveries {
		var ev paymock.Event
		require.NoError(t, json.Unmarshal(d.Body, &ev))
		assert.Equal(t, sent[d.Headers[paymock.HeaderDeliveryID]], ev, "line %d", i+1)
		assert.Equal(t, ev.EventID, d.Headers[paymock.HeaderEventID])
		assert.Equal(t, "1", d.Headers[paymock.HeaderAttempt])
		assert.NotContains(t, d.Headers, "X-Pay-Signature")
		assert.Contains(t, d.Note, "attempt 1: 200 success")
	}

	// The filters of the JSON log apply.
	only, _ := h.export(t, "&payment_id="+a.ID)
	assert.Len(t, only.Deliveries, 3)
	assert.Equal(t, map[string]replay.OrderSpec{"order-a": {AmountCents: 1999}}, only.Header.Orders)

	status, body := h.call(t, http.MethodGet, "/admin/deliveries?format=xml", "")
	requireProblem(t, status, body, http.StatusBadRequest, "validation_failed")
	// A filter given twice is refused: the first won, silently.
	for _, q := range []string{"payment_id=zzz&payment_id=" + a.ID, "format=jsonl&format=json", "event_id=a&event_id=b"} {
		status, body := h.call(t, http.MethodGet, "/admin/deliveries?"+q, "")
		requireProblem(t, status, body, http.StatusBadRequest, "validation_failed")
		assert.Contains(t, string(body), "sent 2 times", q)
	}
}

// Retries are lines too: an attempt the receiver refused is in the recording, after its wait.
func TestExportKeepsRetriesInOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rcv := newReceiver(t, func(n int) (int, string) {
		if n == 1 {
			return http.StatusServiceUnavailable, ""
		}
		return http.StatusOK, ack
	})
	p := h.create(t, "order-retry", 1000, rcv.url())
	h.approve(t, p.ID)
	waitFor(t, exportWait, func() bool { return finalCount(h.deliveries(t, "")) == 1 }, "the delivery ends")

	rec, _ := h.export(t, "")
	require.Len(t, rec.Deliveries, 2)
	assert.Equal(t, rec.Deliveries[0].Body, rec.Deliveries[1].Body)
	assert.GreaterOrEqual(t, rec.Deliveries[1].AtMS, int64(20), "the second attempt waited the schedule's 20 ms")
	assert.Contains(t, rec.Deliveries[0].Note, "503 retry")
	assert.Equal(t, "2", rec.Deliveries[1].Headers[paymock.HeaderAttempt])
}

// The export is an admin route like the JSON log: with ADMIN_TOKEN, only with the token.
func TestExportIsAdminOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *paymock.Config) { c.AdminToken = "s3cret" })
	for _, auth := range []string{"", "Bearer s3cret"} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, h.srv.URL+"/admin/deliveries?format=jsonl", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := h.http.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		want := http.StatusUnauthorized
		if auth != "" {
			want = http.StatusOK
		}
		assert.Equal(t, want, resp.StatusCode, "Authorization %q", auth)
	}
}
