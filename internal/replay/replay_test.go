package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/paysig"
	"idemshop/internal/replay"
)

// body is a callback body as the platform sends it.
func body(event, payment, order, status string, amount int64) string {
	b, _ := json.Marshal(map[string]any{"event_id": event, "payment_id": payment, "merchant_order_no": order,
		"status": status, "amount_cents": amount, "currency": "EUR", "occurred_at": "2026-11-29T10:00:00Z"})
	return string(b)
}

func line(at int64, b string, headers ...string) string {
	h := map[string]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	hb, _ := json.Marshal(h)
	return `{"at_ms":` + jsonInt(at) + `,"headers":` + string(hb) + `,"body":` + b + `}`
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

func parse(t *testing.T, lines ...string) *replay.Recording {
	t.Helper()
	rec, err := replay.Parse(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	require.NoError(t, err)
	return rec
}

func parseErr(t *testing.T, lines ...string) string {
	t.Helper()
	_, err := replay.Parse(strings.NewReader(strings.Join(lines, "\n")))
	require.Error(t, err)
	return err.Error()
}

const header = `{"format":"idemshop-replay/1","title":"t","orders":{"A":{"quantity":2,"amount_cents":2500}}}`

// The incident: one SUCCESS three times at once, then another order's SUCCESS once.
func incident(t *testing.T) *replay.Recording {
	return parse(t, header,
		line(0, body("evt_1", "pay_1", "A", "SUCCESS", 2500), "X-Pay-Event-Id", "evt_1", "X-Pay-Signature", "t=1,v1=00"),
		line(0, body("evt_1", "pay_1", "A", "SUCCESS", 2500), "X-Pay-Event-Id", "evt_1"),
		line(0, body("evt_1", "pay_1", "A", "SUCCESS", 2500), "X-Pay-Event-Id", "evt_1"),
		"",
		line(40, body("evt_2", "pay_2", "B", "SUCCESS", 1250)))
}

func TestParseReadsHeaderOrdersAndGroups(t *testing.T) {
	rec := incident(t)
	assert.Equal(t, "t", rec.Header.Title)
	require.Len(t, rec.Deliveries, 4)
	assert.Equal(t, replay.Event{EventID: "evt_1", PaymentID: "pay_1", MerchantOrderNo: "A", Status: "SUCCESS",
		AmountCents: 2500, Currency: "EUR"}, rec.Events[0])
	assert.NotContains(t, rec.Deliveries[0].Headers, "X-Pay-Signature", "a recorded signature is dropped")
	assert.Equal(t, [][]int{{0, 1, 2}, {3}}, rec.Groups(), "equal at_ms is one group, sent at once")

	orders, err := rec.Orders()
	require.NoError(t, err)
	assert.Equal(t, []replay.Order{{Ref: "A", Quantity: 2, AmountCents: 2500, Deliveries: 3},
		{Ref: "B", Quantity: 1, AmountCents: 1250, Deliveries: 1}}, orders,
		"the header gives A's quantity; B defaults to 1 and the amount of its SUCCESS")
	assert.Equal(t, replay.DefaultUnsafePath, rec.UnsafePath())
}

func TestParseWithoutHeader(t *testing.T) {
	rec := parse(t, line(0, body("e", "p", "7", "FAILED", 1013)))
	assert.Equal(t, "", rec.Header.Format)
	orders, err := rec.Orders()
	require.NoError(t, err)
	assert.Equal(t, []replay.Order{{Ref: "7", Quantity: 1, AmountCents: 1013, Deliveries: 1}}, orders)
}

func TestParseRefusesWhatItCannotReplayFaithfully(t *testing.T) {
	ok := line(0, body("e1", "p", "A", "SUCCESS", 100))
	for name, tc := range map[string]struct {
		lines []string
		want  string
	}{
		"empty":                 {[]string{"", ""}, "no deliveries"},
		"header not first":      {[]string{ok, header}, "line 2: the header"},
		"wrong format":          {[]string{`{"format":"v0"}`, ok}, `format "v0"`},
		"unknown header field":  {[]string{`{"format":"idemshop-replay/1","titel":"x"}`, ok}, "titel"},
		"unknown line field":    {[]string{`{"at_ms":0,"delay":5,"body":` + body("e", "p", "A", "SUCCESS", 100) + `}`}, "delay"},
		"unsafe path elsewhere": {[]string{`{"format":"idemshop-replay/1","unsafe_path":"/v1/orders"}`, ok}, "under /lab/unsafe/"},
		"time goes back": {[]string{line(10, body("e1", "p", "A", "SUCCESS", 100)), line(5, body("e2", "p", "A", "SUCCESS", 100))},
			"line 2: at_ms 5 is before the previous line's 10"},
		"negative at_ms":    {[]string{line(-1, body("e1", "p", "A", "SUCCESS", 100))}, "at_ms must be"},
		"not an object":     {[]string{`{"at_ms":0,"body":[1]}`}, "must be a JSON object"},
		"missing event_id":  {[]string{`{"at_ms":0,"body":{"payment_id":"p","merchant_order_no":"A","status":"SUCCESS","amount_cents":1,"currency":"EUR"}}`}, "event_id is missing"},
		"unknown status":    {[]string{line(0, body("e1", "p", "A", "PAID", 100))}, `status "PAID"`},
		"zero amount":       {[]string{line(0, body("e1", "p", "A", "SUCCESS", 0))}, "amount_cents must be positive"},
		"one id two bodies": {[]string{ok, line(1, body("e1", "p", "A", "FAILED", 100))}, `event_id "e1" was recorded before with another body`},
		"refund only, no amount": {[]string{line(0, body("r1", "p", "A", "REFUNDED", 100))},
			`order "A": only REFUNDED events`},
		"price not whole": {[]string{`{"format":"idemshop-replay/1","orders":{"A":{"quantity":3}}}`, ok},
			"amount_cents 100 is not a multiple of quantity 3"},
		"quantity too big": {[]string{`{"format":"idemshop-replay/1","orders":{"A":{"quantity":11}}}`, ok}, "quantity must be 1..10"},
		"order without delivery": {[]string{`{"format":"idemshop-replay/1","orders":{"Z":{"quantity":1}}}`, ok},
			`orders["Z"] has no delivery`},
		"two values on a line": {[]string{ok + " {}"}, "trailing data after the JSON value"},
		// A header that is not JSON was read as a delivery, and refused for its "format".
		"header with a raw tab": {[]string{"{\"format\":\"idemshop-replay/1\t\"}", ok}, "line 1: header: JSON syntax error at byte"},
		"header cut short":      {[]string{`{"format":"idemshop-replay/1","orders":{`, ok}, "line 1: header: request body ends before"},
		// encoding/json alone matched names in any case and let the last of two win.
		"header field in another case": {[]string{`{"format":"idemshop-replay/1","Orders":{"A":{"quantity":2}}}`, ok}, `line 1: header: unknown field "Orders" (names are case-sensitive)`},
		"order spec field in another case": {[]string{`{"format":"idemshop-replay/1","orders":{"A":{"QUANTITY":2}}}`, ok},
			`line 1: header: orders["A"]: unknown field "QUANTITY"`},
		"at_ms twice":           {[]string{`{"at_ms":0,"at_ms":7,"body":` + body("e", "p", "A", "SUCCESS", 100) + `}`}, `line 1: field "at_ms" appears more than once`},
		"at_ms in another case": {[]string{`{"at_ms":0,"AT_MS":900,"body":` + body("e", "p", "A", "SUCCESS", 100) + `}`}, `line 1: unknown field "AT_MS"`},
		"a read body member in another case": {[]string{`{"at_ms":0,"body":{"event_id":"e1","payment_id":"p","merchant_order_no":"A","status":"SUCCESS","Status":"FAILED","amount_cents":1,"currency":"EUR"}}`},
			`line 1: body: unknown field "Status" (names are case-sensitive)`},
		// Each of these parsed before, and then every copy was refused by the shop or by Go's client.
		"unsafe path with ..": {[]string{`{"format":"idemshop-replay/1","unsafe_path":"/lab/unsafe/../v1/orders"}`, ok},
			`unsafe_path "/lab/unsafe/../v1/orders" must be a clean path`},
		"unsafe path with //": {[]string{`{"format":"idemshop-replay/1","unsafe_path":"/lab/unsafe//payments/callback"}`, ok}, "must be a clean path"},
		"a body member twice": {[]string{`{"at_ms":0,"body":{"event_id":"e1","payment_id":"p","merchant_order_no":"A","status":"FAILED","status":"SUCCESS","amount_cents":1,"currency":"EUR"}}`},
			`line 1: body: field "status" appears more than once`},
		"occurred_at not a time": {[]string{`{"at_ms":0,"body":{"event_id":"e1","payment_id":"p","merchant_order_no":"A","status":"SUCCESS","amount_cents":1,"currency":"EUR","occurred_at":"yesterday"}}`},
			`line 1: body: field "occurred_at" must be an RFC 3339 time`},
		"event_id too long for the prefix": {[]string{line(0, body(strings.Repeat("e", 189), "p", "A", "SUCCESS", 100))},
			"event_id is 189 bytes as stored; with the run's 12-byte prefix it must fit in 200"},
		"payment_id with NULs too long": {[]string{line(0, body("e1", strings.Repeat("\x00", 63), "A", "SUCCESS", 100))},
			"payment_id is 189 bytes as stored"},
		"a line over 1 MiB": {[]string{ok, `{"at_ms":1,"note":"` + strings.Repeat("x", 1<<20) + `"}`}, "line 2 is longer than 1048576 bytes (1 MiB)"},
		"bad header name":   {[]string{line(0, body("e1", "p", "A", "SUCCESS", 100), "X Bad", "1")}, `line 1: header "X Bad"`},
		"bad header value":  {[]string{line(0, body("e1", "p", "A", "SUCCESS", 100), "X-Note", "a\nb")}, `line 1: header "X-Note"`},
		// A newcomer's: these two parsed, as "the amount of its events" and "sent at 0".
		"amount given as 0": {[]string{`{"format":"idemshop-replay/1","orders":{"A":{"amount_cents":0}}}`, ok},
			`line 1: header: orders["A"].amount_cents must be positive, or absent`},
		"no at_ms": {[]string{ok, `{"body":` + body("e2", "p", "A", "SUCCESS", 100) + `}`}, "line 2: at_ms is missing"},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Contains(t, parseErr(t, tc.lines...), tc.want)
		})
	}
}

func TestPrepareRewritesIDsConsistently(t *testing.T) {
	rec := incident(t)
	m := replay.Mapping{Orders: map[string]int64{"A": 501, "B": 502}, Prefix: replay.NewPrefix([4]byte{0xde, 0xad, 0xbe, 0xef})}
	assert.Equal(t, "rp-deadbeef-", m.Prefix)
	ps, err := rec.Prepare(m)
	require.NoError(t, err)
	require.Len(t, ps, 4)

	var got map[string]any
	require.NoError(t, json.Unmarshal(ps[0].Body, &got))
	assert.Equal(t, "rp-deadbeef-evt_1", got["event_id"])
	assert.Equal(t, "rp-deadbeef-pay_1", got["payment_id"])
	assert.Equal(t, "501", got["merchant_order_no"])
	assert.EqualValues(t, 2500, got["amount_cents"], "amounts are kept: the fresh order costs the recorded amount")
	assert.Equal(t, "2026-11-29T10:00:00Z", got["occurred_at"], "fields a replay does not map are kept as recorded")
	assert.Equal(t, "rp-deadbeef-evt_1", ps[0].Headers["X-Pay-Event-Id"], "the debug header follows the event id")
	assert.Equal(t, "A", ps[0].OrderRef)

	assert.Equal(t, ps[0].Body, ps[1].Body, "copies of one event stay byte for byte equal")
	assert.Equal(t, ps[0].Body, ps[2].Body)
	assert.NotEqual(t, ps[0].EventID, ps[3].EventID, "different events stay different")

	other, err := rec.Prepare(replay.Mapping{Orders: m.Orders, Prefix: replay.NewPrefix([4]byte{1, 2, 3, 4})})
	require.NoError(t, err)
	assert.NotEqual(t, ps[0].EventID, other[0].EventID, "a new run gets new event ids, which no earlier run stored")

	_, err = rec.Prepare(replay.Mapping{Orders: map[string]int64{"A": 1}, Prefix: "x"})
	assert.ErrorContains(t, err, `no fresh order for merchant_order_no "B"`)
}

func TestRequestIsSignedWithTheCurrentSecretOverTheBytesSent(t *testing.T) {
	rec := incident(t)
	ps, err := rec.Prepare(replay.Mapping{Orders: map[string]int64{"A": 1, "B": 2}, Prefix: "rp-1-"})
	require.NoError(t, err)
	secret := []byte("current-secret")
	now := time.Now()
	req, err := ps[0].Request(context.Background(), "http://shop", "/v1/payments/callback", secret, now)
	require.NoError(t, err)
	assert.Equal(t, "http://shop/v1/payments/callback", req.URL.String())
	assert.Equal(t, "application/json", req.Header.Get("Content-Type"))
	sent, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, ps[0].Body, sent)

	v := paysig.Verifier{Secret: secret, Now: func() time.Time { return now }}
	assert.NoError(t, v.Verify(req.Header.Get(paysig.Header), sent))
	assert.Error(t, paysig.Verifier{Secret: []byte("the-recording-secret"), Now: func() time.Time { return now }}.
		Verify(req.Header.Get(paysig.Header), sent), "signed with the current secret, not another")
	assert.Error(t, v.Verify(req.Header.Get(paysig.Header), append(sent, ' ')), "the signature covers the exact bytes")
}

func TestWriteThenParseRoundTrips(t *testing.T) {
	rec := incident(t)
	var buf bytes.Buffer
	require.NoError(t, replay.Write(&buf, rec.Header, rec.Deliveries))
	assert.Equal(t, 5, strings.Count(buf.String(), "\n"), "a header and one line per delivery")
	again, err := replay.Parse(&buf)
	require.NoError(t, err)
	assert.Equal(t, rec.Header, again.Header)
	assert.Equal(t, rec.Events, again.Events)
	assert.Equal(t, rec.Groups(), again.Groups())
}

// The longest ids that still fit beside the run's prefix, a file saved with a UTF-8 BOM, and a clean
// unsafe_path all parse.
func TestParseAcceptsTheLimits(t *testing.T) {
	rec := parse(t, "\xef\xbb\xbf"+`{"format":"idemshop-replay/1","unsafe_path":"/lab/unsafe/s12/payments/callback"}`,
		line(0, body(strings.Repeat("e", 188), strings.Repeat("\x00", 62)+"pp", "A", "SUCCESS", 100), "X-Pay-Attempt", "1"))
	assert.Equal(t, "/lab/unsafe/s12/payments/callback", rec.UnsafePath())
	require.Len(t, rec.Events, 1)
	assert.Len(t, rec.Events[0].EventID, 188)
	rec = parse(t, "\xef\xbb\xbf"+line(0, body("e1", "p", "A", "SUCCESS", 100)))
	assert.Len(t, rec.Deliveries, 1, "a BOM before a delivery line")
}
