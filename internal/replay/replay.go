// Package replay is the format of recorded payment-platform traffic, and the pure steps of replaying it:
// parse, map the recorded orders to fresh ones, rewrite and re-sign each body, group the deliveries that
// were sent at once, and predict where the guarded shop must leave each order. Sending and checking the
// rows is internal/replay/play; payments-mock writes the format (GET /admin/deliveries?format=jsonl).
//
// A recording is JSON Lines (docs/lab.md, "Replays"): an optional header line, then one line per
// delivery, that is one HTTP POST of one callback, in the order they were sent:
//
//	{"format":"idemshop-replay/1","title":"...","unsafe_path":"/lab/unsafe/payments/callback",
//	 "orders":{"A":{"quantity":2,"amount_cents":2500}}}
//	{"at_ms":0,"headers":{"X-Pay-Event-Id":"evt_1"},"body":{"event_id":"evt_1",...}}
//
// The recorded ids are symbols. Each run maps every recorded merchant_order_no to a fresh order and
// prefixes every event_id and payment_id with a prefix of its own, so that copies of one event stay equal,
// different events stay different, and nothing a previous run stored absorbs this one.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"idemshop/internal/callback/wire"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/pgtext"
	"idemshop/internal/platform/problem"
)

// Format names the version of the format in the header line.
const Format = "idemshop-replay/1"

// Routes a replay sends to. The guarded route is fixed; the unsafe one is the file's (lab mode only).
const (
	GuardedPath       = "/v1/payments/callback"
	DefaultUnsafePath = "/lab/unsafe/payments/callback"
	unsafePrefix      = "/lab/unsafe/"
)

// Callback statuses, as the platform sends them (docs/design.md).
const (
	StatusSuccess  = "SUCCESS"
	StatusFailed   = "FAILED"
	StatusRefunded = "REFUNDED"
)

// Limits that keep a recording within what the shop accepts: quantity is the create-order limit, and
// the line limit is well above a callback (a few hundred bytes) plus its headers.
const (
	maxQuantity  = 10
	maxLineBytes = 1 << 20
	maxAtMS      = int64(24 * time.Hour / time.Millisecond)
)

// MaxIDBytes is the shop's bound on a callback's event_id and payment_id as stored (internal/callback's
// IDMaxBytes; a NUL or an invalid byte is stored as U+FFFD, 3 bytes). A recorded id must leave room for
// the run's prefix (NewPrefix), or every copy of its event would be refused (400) at send time.
const MaxIDBytes = 200

// utf8BOM starts files some editors save; it is not part of the first line's JSON.
var utf8BOM = []byte("\xef\xbb\xbf")

// dropped are recorded headers a replay never sends as recorded: the signature is computed again at send
// time (a recorded one is stale by definition), and the others belong to the connection, not the delivery.
var dropped = map[string]bool{paysig.Header: true, "Host": true, "Content-Length": true,
	"Transfer-Encoding": true, "Connection": true}

// Header is the optional first line: what the file is, and what the deliveries alone cannot say.
type Header struct {
	Format      string `json:"format"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	// UnsafePath is the lab route `loadtest replay --unsafe` sends to; it must be under /lab/unsafe/.
	// Empty: /lab/unsafe/payments/callback, the incident's unguarded handler.
	UnsafePath string `json:"unsafe_path,omitempty"`
	// Orders describes recorded orders by their merchant_order_no. A callback carries no quantity, and
	// a REFUNDED one carries the refund's amount, not the order's.
	Orders map[string]OrderSpec `json:"orders,omitempty"`
}

// OrderSpec is what a fresh order for one recorded order is made of.
type OrderSpec struct {
	Quantity    int   `json:"quantity,omitempty"`     // 1..10; default 1
	AmountCents int64 `json:"amount_cents,omitempty"` // default: the amount of its SUCCESS or FAILED events
}

// Delivery is one line: one POST of one callback body.
type Delivery struct {
	// AtMS is when it was sent, in milliseconds after the first delivery of the recording. Lines with
	// the same AtMS were sent at once, and are replayed at once, released together behind a barrier.
	AtMS int64 `json:"at_ms"`
	// Headers are the recorded request headers. X-Pay-Signature is never kept: a replay signs each body
	// again with the current secret at the moment it sends it.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the callback body as recorded (an object).
	Body json.RawMessage `json:"body"`
	// Note is for the reader (payments-mock writes the copy, the attempt and the answer it got).
	Note string `json:"note,omitempty"`
}

// Event is the part of a callback body a replay reads and rewrites.
type Event struct {
	EventID         string
	PaymentID       string
	MerchantOrderNo string
	Status          string
	AmountCents     int64
	Currency        string
}

// Recording is a parsed file.
type Recording struct {
	Header     Header
	Deliveries []Delivery
	Events     []Event // Events[i] is Deliveries[i]'s body
}

// Order is one recorded order, as a replay creates it afresh.
type Order struct {
	Ref         string // the recorded merchant_order_no
	Quantity    int
	AmountCents int64
	Deliveries  int // lines addressed to it
}

// Parse reads a recording. Errors name the line. Blank lines are skipped; the header, if any, is the
// first line; the deliveries must be in sending order (at_ms never decreases).
func Parse(r io.Reader) (*Recording, error) {
	rec := &Recording{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	bodies := map[string][]byte{} // event_id → canonical body, to catch one id with two bodies
	n, seen := 0, 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if n == 1 {
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		seen++
		if isHeader(line) {
			if seen != 1 {
				return nil, fmt.Errorf("line %d: the header (a line with \"format\") must be the first line", n)
			}
			if err := strictDecode(line, &rec.Header); err != nil {
				return nil, fmt.Errorf("line %d: header: %w", n, err)
			}
			// The same rules one level down, for each order's spec.
			var specs struct {
				Orders map[string]json.RawMessage `json:"orders"`
			}
			_ = json.Unmarshal(line, &specs) // it decoded above
			for ref, raw := range specs.Orders {
				if err := strictDecode(raw, new(OrderSpec)); err != nil {
					return nil, fmt.Errorf("line %d: header: orders[%q]: %w", n, ref, err)
				}
				// Absent means "from its events"; given, it is an amount. (OrderSpec cannot tell 0 from absent.)
				var given struct {
					AmountCents *int64 `json:"amount_cents"`
				}
				_ = json.Unmarshal(raw, &given) // it decoded above
				if given.AmountCents != nil && *given.AmountCents <= 0 {
					return nil, fmt.Errorf("line %d: header: orders[%q].amount_cents must be positive, or absent for the amount of its events", n, ref)
				}
			}
			if err := rec.Header.validate(); err != nil {
				return nil, fmt.Errorf("line %d: header: %w", n, err)
			}
			continue
		}
		var d Delivery
		if err := strictDecode(line, &d); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		// at_ms is when the line was sent: a line without it is not read as sent at 0.
		var sent struct {
			AtMS *int64 `json:"at_ms"`
		}
		_ = json.Unmarshal(line, &sent) // it decoded above
		if sent.AtMS == nil {
			return nil, fmt.Errorf("line %d: at_ms is missing (when the line was sent, in ms after the first)", n)
		}
		ev, canon, err := parseBody(d.Body)
		if err != nil {
			return nil, fmt.Errorf("line %d: body: %w", n, err)
		}
		if d.AtMS < 0 || d.AtMS > maxAtMS {
			return nil, fmt.Errorf("line %d: at_ms must be 0..%d", n, maxAtMS)
		}
		if k := len(rec.Deliveries); k > 0 && d.AtMS < rec.Deliveries[k-1].AtMS {
			return nil, fmt.Errorf("line %d: at_ms %d is before the previous line's %d (lines are in sending order)",
				n, d.AtMS, rec.Deliveries[k-1].AtMS)
		}
		if prev, ok := bodies[ev.EventID]; ok && !bytes.Equal(prev, canon) {
			return nil, fmt.Errorf("line %d: event_id %q was recorded before with another body (copies of one event are identical)", n, ev.EventID)
		}
		bodies[ev.EventID] = canon
		for name, value := range d.Headers {
			// Go's client would refuse to send such a header: every copy would be "no answer".
			if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
				return nil, fmt.Errorf("line %d: header %q: not a valid HTTP header name and value", n, name)
			}
			if dropped[http.CanonicalHeaderKey(name)] {
				delete(d.Headers, name)
			}
		}
		rec.Deliveries = append(rec.Deliveries, d)
		rec.Events = append(rec.Events, ev)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("line %d is longer than %d bytes (1 MiB)", n+1, maxLineBytes)
	} else if err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	if len(rec.Deliveries) == 0 {
		return nil, errors.New("no deliveries")
	}
	if _, err := rec.Orders(); err != nil {
		return nil, err
	}
	return rec, nil
}

// isHeader tells the header from a delivery: only the header has "format". A line that is not JSON at
// all is a header if it names "format": decoded as a delivery, a header with a raw tab in it was
// refused for its unknown field "format", not for its syntax (a helper's finding, 2026-12-06).
func isHeader(line []byte) bool {
	var probe struct {
		Format *string `json:"format"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		var syntax *json.SyntaxError
		return errors.As(err, &syntax) && bytes.Contains(line, []byte(`"format"`))
	}
	return probe.Format != nil
}

// strictDecode decodes one line as the shop decodes a request body (problem.DecodeJSON): member names
// exactly as documented, each once, nothing unknown, nothing after the value. encoding/json alone
// matches names in any case and lets the last of two win: "AT_MS" or a second "at_ms" would decide.
func strictDecode(line []byte, v any) error { return detail(problem.DecodeJSON(line, v)) }

// strictDecodeOpen is strictDecode for a callback body, which may carry members the shop does not read.
func strictDecodeOpen(body []byte, v any) error { return detail(problem.DecodeJSONOpen(body, v)) }

// detail is err's problem detail alone: a loader's message, not an HTTP answer.
func detail(err error) error {
	var pe *problem.Error
	if errors.As(err, &pe) {
		return errors.New(pe.Detail)
	}
	return err
}

func (h Header) validate() error {
	if h.Format != Format {
		return fmt.Errorf("format %q, want %q", h.Format, Format)
	}
	// A clean path only: /lab/unsafe/../v1/... passes the prefix and is another route.
	if h.UnsafePath != "" && (!strings.HasPrefix(h.UnsafePath, unsafePrefix) || strings.ContainsAny(h.UnsafePath, "?# ") ||
		path.Clean(h.UnsafePath) != h.UnsafePath) {
		return fmt.Errorf("unsafe_path %q must be a clean path under %s (no . or .. segments, no //)", h.UnsafePath, unsafePrefix)
	}
	for ref, o := range h.Orders {
		if o.Quantity < 0 || o.Quantity > maxQuantity {
			return fmt.Errorf("orders[%q].quantity must be 1..%d", ref, maxQuantity)
		}
		if o.AmountCents < 0 {
			return fmt.Errorf("orders[%q].amount_cents must be positive", ref)
		}
	}
	return nil
}

// parseBody decodes a callback body and returns its event and its canonical bytes (keys sorted).
func parseBody(raw json.RawMessage) (Event, []byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return Event{}, nil, errors.New("must be a JSON object")
	}
	// Decoded once as the shop decodes it (problem.DecodeJSONOpen into its members): a member it
	// reads, twice or in another case, or of the wrong type would reach the map (and the rewritten
	// body) in silence, and the shop would refuse every copy; the recording is refused here instead.
	if err := strictDecodeOpen(raw, new(wire.Callback)); err != nil {
		return Event{}, nil, err
	}
	var ev Event
	for _, f := range []struct {
		name string
		dst  any
	}{{"event_id", &ev.EventID}, {"payment_id", &ev.PaymentID}, {"merchant_order_no", &ev.MerchantOrderNo},
		{"status", &ev.Status}, {"amount_cents", &ev.AmountCents}, {"currency", &ev.Currency}} {
		v, ok := fields[f.name]
		if !ok {
			return Event{}, nil, fmt.Errorf("%s is missing", f.name)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return Event{}, nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	switch {
	case strings.TrimSpace(ev.EventID) == "" || strings.TrimSpace(ev.PaymentID) == "" || ev.MerchantOrderNo == "":
		// White space alone: the shop refuses such an id from the platform as a missing one. (A replay
		// sends it behind the run's prefix, which the shop would take; a recording of a platform never
		// holds one, so it is refused here as what it stands for.)
		return Event{}, nil, errors.New("event_id, payment_id and merchant_order_no must not be empty (nor white space alone)")
	case ev.Status != StatusSuccess && ev.Status != StatusFailed && ev.Status != StatusRefunded:
		return Event{}, nil, fmt.Errorf("status %q is not SUCCESS, FAILED or REFUNDED", ev.Status)
	case ev.AmountCents <= 0:
		return Event{}, nil, errors.New("amount_cents must be positive")
	}
	prefix := len(NewPrefix([4]byte{}))
	for name, id := range map[string]string{"event_id": ev.EventID, "payment_id": ev.PaymentID} {
		if n := len(pgtext.Clean(id, 0)); prefix+n > MaxIDBytes {
			return Event{}, nil, fmt.Errorf("%s is %d bytes as stored; with the run's %d-byte prefix it must fit in %d", name, n, prefix, MaxIDBytes)
		}
	}
	canon, err := json.Marshal(fields) // map keys are sorted: the same fields give the same bytes
	if err != nil {
		return Event{}, nil, err
	}
	return ev, canon, nil
}

// Orders lists the recorded orders in order of first appearance, with the quantity and amount their
// fresh orders get: the header's, else quantity 1 and the amount of the order's SUCCESS or FAILED events.
// The amount must be a multiple of the quantity, since the fresh order is priced amount/quantity.
func (r *Recording) Orders() ([]Order, error) {
	var out []Order
	index := map[string]int{}
	for _, ev := range r.Events {
		i, ok := index[ev.MerchantOrderNo]
		if !ok {
			i = len(out)
			index[ev.MerchantOrderNo] = i
			spec := r.Header.Orders[ev.MerchantOrderNo]
			out = append(out, Order{Ref: ev.MerchantOrderNo, Quantity: spec.Quantity, AmountCents: spec.AmountCents})
		}
		out[i].Deliveries++
		if out[i].AmountCents == 0 && ev.Status != StatusRefunded {
			out[i].AmountCents = ev.AmountCents
		}
	}
	for ref := range r.Header.Orders {
		if _, ok := index[ref]; !ok {
			return nil, fmt.Errorf("header: orders[%q] has no delivery", ref)
		}
	}
	for i := range out {
		o := &out[i]
		if o.Quantity == 0 {
			o.Quantity = 1
		}
		if o.AmountCents == 0 {
			return nil, fmt.Errorf("order %q: only REFUNDED events, so its amount is unknown: give orders[%q].amount_cents in the header", o.Ref, o.Ref)
		}
		if o.AmountCents%int64(o.Quantity) != 0 {
			return nil, fmt.Errorf("order %q: amount_cents %d is not a multiple of quantity %d", o.Ref, o.AmountCents, o.Quantity)
		}
	}
	return out, nil
}

// UnsafePath is the route for --unsafe.
func (r *Recording) UnsafePath() string {
	if r.Header.UnsafePath != "" {
		return r.Header.UnsafePath
	}
	return DefaultUnsafePath
}

// Groups splits the deliveries into runs of equal at_ms: each run was sent at once.
func (r *Recording) Groups() [][]int {
	var out [][]int
	for i, d := range r.Deliveries {
		if i == 0 || d.AtMS != r.Deliveries[i-1].AtMS {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], i)
	}
	return out
}

// Mapping is one run's renaming of the recorded ids.
type Mapping struct {
	Orders map[string]int64 // recorded merchant_order_no → the fresh order's id
	Prefix string           // put before every event_id and payment_id; fresh per run
}

// NewPrefix returns a run prefix from random bytes: "rp-" and 8 hex digits, short enough that a
// recorded id of 64 characters stays within what the shop stores in full.
func NewPrefix(random [4]byte) string { return fmt.Sprintf("rp-%x-", random[:]) }

// Prepared is one delivery ready to send, except its signature.
type Prepared struct {
	AtMS     int64
	OrderRef string
	EventID  string // rewritten
	Headers  map[string]string
	Body     []byte
}

// Prepare rewrites every body for a run: merchant_order_no becomes the fresh order's id, event_id and
// payment_id get the run's prefix. Amounts are kept: each fresh order costs exactly the recorded amount.
// Copies of one event give identical bytes (the recorded bodies are equal, and keys are written sorted).
// Unknown body fields are kept as they were recorded. The X-Pay-Event-Id header follows the event_id.
func (r *Recording) Prepare(m Mapping) ([]Prepared, error) {
	out := make([]Prepared, len(r.Deliveries))
	for i, d := range r.Deliveries {
		ev := r.Events[i]
		id, ok := m.Orders[ev.MerchantOrderNo]
		if !ok {
			return nil, fmt.Errorf("delivery %d: no fresh order for merchant_order_no %q", i+1, ev.MerchantOrderNo)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(d.Body, &fields); err != nil {
			return nil, fmt.Errorf("delivery %d: %w", i+1, err)
		}
		eventID, paymentID := m.Prefix+ev.EventID, m.Prefix+ev.PaymentID
		for name, v := range map[string]string{"event_id": eventID, "payment_id": paymentID,
			"merchant_order_no": fmt.Sprint(id)} {
			fields[name], _ = json.Marshal(v) // a string always encodes
		}
		body, err := json.Marshal(fields)
		if err != nil {
			return nil, fmt.Errorf("delivery %d: %w", i+1, err)
		}
		headers := make(map[string]string, len(d.Headers))
		for k, v := range d.Headers {
			if http.CanonicalHeaderKey(k) == "X-Pay-Event-Id" {
				v = eventID
			}
			headers[k] = v
		}
		out[i] = Prepared{AtMS: d.AtMS, OrderRef: ev.MerchantOrderNo, EventID: eventID, Headers: headers, Body: body}
	}
	return out, nil
}

// Request builds the POST of p to base+path, signed at now with secret over the exact bytes it sends. A
// replay builds it at the moment it sends, so a recording never goes stale against the shop's 300 s
// tolerance, and a file recorded under another secret is accepted under the current one.
func (p Prepared) Request(ctx context.Context, base, path string, secret []byte, now time.Time) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(p.Body))
	if err != nil {
		return nil, err
	}
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(paysig.Header, paysig.Sign(secret, now, p.Body))
	return req, nil
}

// Write writes a recording: the header (if it has a format) and one line per delivery.
func Write(w io.Writer, h Header, ds []Delivery) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // bodies and notes are data, not HTML
	if h.Format != "" {
		if err := enc.Encode(h); err != nil {
			return err
		}
	}
	for _, d := range ds {
		if err := enc.Encode(d); err != nil {
			return err
		}
	}
	return nil
}
