package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"idemshop/internal/auth"
	"idemshop/internal/callback"
	"idemshop/internal/events"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/config"
	"idemshop/internal/points"
)

// Fixture is one scenario's own data: a lab user (with a bearer token of its own) and the products it
// creates. Close deletes all of it, and every row that refers to it, unless Env.Keep is set.
type Fixture struct {
	env      *Env
	UserID   int64
	Token    string
	products []int64
}

// NewFixture creates a lab user named "lab-<scenario>-<hex>". Scenarios pass their id and side
// (SideName: "S1-unsafe", "S1-guarded"), so that a side's rows can be found by the user's name.
func (e *Env) NewFixture(ctx context.Context, scenario string) (*Fixture, error) {
	raw := make([]byte, 8)
	_, _ = rand.Read(raw)
	suffix := hex.EncodeToString(raw)
	f := &Fixture{env: e, Token: "lab-" + suffix}
	err := e.DB.WithContext(ctx).Raw(`INSERT INTO users (name, token_hash) VALUES (?, ?) RETURNING id`,
		"lab-"+scenario+"-"+suffix, auth.TokenHash(f.Token)).Scan(&f.UserID).Error
	if err != nil {
		return nil, fmt.Errorf("create lab user: %w", err)
	}
	return f, nil
}

// Product creates a product with stock units at priceCents (EUR) and returns its id.
func (f *Fixture) Product(ctx context.Context, stock, priceCents int64) (int64, error) {
	var id int64
	raw := make([]byte, 6)
	_, _ = rand.Read(raw)
	err := f.env.DB.WithContext(ctx).Raw(`INSERT INTO products (sku, name, price_cents, currency, stock)
		VALUES (?, 'Lab product', ?, 'EUR', ?) RETURNING id`, "LAB-"+hex.EncodeToString(raw), priceCents, stock).Scan(&id).Error
	if err != nil {
		return 0, fmt.Errorf("create lab product: %w", err)
	}
	f.products = append(f.products, id)
	return id, nil
}

// SideName names a scenario's fixture after the side it serves: SideName("S1", true) is "S1-unsafe",
// SideName("S1", false) is "S1-guarded".
func SideName(scenario string, unsafe bool) string {
	if unsafe {
		return scenario + "-unsafe"
	}
	return scenario + "-guarded"
}

// Close deletes the fixture's user, products and everything that refers to them. With Env.Keep it
// leaves them in place (and deletes nothing). It first waits, at most Env.Quiet, for points-consumer
// to be done with the fixture's events (consumed); if it is not, it keeps the rows too, and says so:
// an event that arrives after its user was deleted is poison (the account's foreign key), a dead
// letter nobody can fix.
func (f *Fixture) Close(ctx context.Context) error {
	if f.env.Keep {
		return nil
	}
	// Interrupted (Ctrl-C), it looks once instead of waiting: the wait for points-consumer held an
	// interrupted run up to LAB_QUIET, and a second Ctrl-C was not heard (a helper's finding, 2026-12-06).
	wait := f.env.Quiet
	if ctx.Err() != nil {
		wait = 0
	}
	ctx = context.WithoutCancel(ctx)
	var pending pendingEvents
	if done, err := Eventually(ctx, wait, func() (bool, error) {
		var err error
		pending, err = f.pendingEvents(ctx)
		return pending.none(), err
	}); err != nil || !done {
		// ERROR, not WARN: incident and lab print errors only unless --verbose, and this line is the one
		// that names the rows left behind (a helper's finding, 2026-12-06: nothing named them).
		attrs := []any{"user_id", f.UserID, "unconsumed", pending.unconsumed, "leases_held", pending.held}
		if err != nil {
			attrs = append(attrs, "err", err) // not "err=<nil>" on every line
		}
		f.env.Log.Error("lab: kept the rows of this run's user: points-consumer is not done with its events, "+
			"and deleting the user would dead-letter them", attrs...)
		return nil
	}
	stmts := []string{
		`DELETE FROM refund_requests WHERE order_id IN (SELECT id FROM orders WHERE user_id = @u)`,
		`DELETE FROM order_refund_events WHERE order_id IN (SELECT id FROM orders WHERE user_id = @u)`,
		`DELETE FROM payment_callbacks WHERE order_id IN (SELECT id FROM orders WHERE user_id = @u)`,
		`DELETE FROM outbox WHERE (payload->>'user_id')::bigint = @u`,
		`DELETE FROM coupons WHERE user_id = @u`,
		`DELETE FROM points_ledger WHERE user_id = @u`,
		`DELETE FROM points_accounts WHERE user_id = @u`,
		`DELETE FROM idempotency_keys WHERE user_id = @u`,
		`DELETE FROM orders WHERE user_id = @u OR product_id IN @p`,
		`DELETE FROM products WHERE id IN @p`,
		`DELETE FROM users WHERE id = @u`,
	}
	args := map[string]any{"u": f.UserID, "p": f.products} // GORM expands a slice after IN
	for _, s := range stmts {
		if err := f.env.DB.WithContext(ctx).Exec(s, args).Error; err != nil {
			return fmt.Errorf("lab cleanup: %w", err)
		}
	}
	return nil
}

// pendingEvents counts the fixture's events points-consumer has not finished: unconsumed, an order.paid
// or order.refunded in the outbox without its ledger row (every applied event writes one, under its
// biz_id); held, a lease of one of the fixture's orders that a consumer claimed and has not marked
// done (one that died after its commit leaves it, and the redelivered copy waits it out).
type pendingEvents struct{ unconsumed, held int64 }

func (p pendingEvents) none() bool { return p.unconsumed == 0 && p.held == 0 }

func (f *Fixture) pendingEvents(ctx context.Context) (pendingEvents, error) {
	var p pendingEvents
	err := f.env.DB.WithContext(ctx).Raw(`SELECT count(*) FROM outbox o
		WHERE (o.payload->>'user_id')::bigint = ? AND o.routing_key IN (?, ?)
		  AND NOT EXISTS (SELECT 1 FROM points_ledger l WHERE l.biz_id =
		      CASE o.routing_key WHEN ? THEN 'order-paid:' ELSE 'order-refunded:' END || (o.payload->>'order_id'))`,
		f.UserID, events.RoutingKeyOrderPaid, events.RoutingKeyRefunded, events.RoutingKeyOrderPaid).Scan(&p.unconsumed).Error
	if err != nil {
		return p, fmt.Errorf("lab cleanup: count unconsumed events: %w", err)
	}
	var orders []int64
	if err := f.env.DB.WithContext(ctx).Raw(`SELECT id FROM orders WHERE user_id = ?`, f.UserID).Scan(&orders).Error; err != nil {
		return p, fmt.Errorf("lab cleanup: list orders: %w", err)
	}
	if len(orders) == 0 || f.env.Redis == nil {
		return p, nil
	}
	keys := make([]string, 0, 2*len(orders))
	for _, id := range orders {
		keys = append(keys, f.env.RedisPrefix+"points:dedup:"+points.BizIDOrderPaid(id),
			f.env.RedisPrefix+"points:dedup:"+points.BizIDOrderRefunded(id))
	}
	vals, err := f.env.Redis.MGet(ctx, keys...).Result()
	if err != nil {
		// Redis down (S9 stops it on purpose): the ledger's count above is what there is.
		return p, nil
	}
	for _, v := range vals {
		if s, ok := v.(string); ok && s != "done" {
			p.held++
		}
	}
	return p, nil
}

// Response is one HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r Response) JSON(v any) error { return json.Unmarshal(r.Body, v) }

// Code returns the problem code of an error answer ("" if none).
func (r Response) Code() string {
	var p struct{ Code string }
	_ = json.Unmarshal(r.Body, &p)
	return p.Code
}

// Do sends a request to orders as the fixture's user. headers are name, value pairs.
func (f *Fixture) Do(ctx context.Context, method, path string, body []byte, headers ...string) (Response, error) {
	h := append([]string{"Authorization", "Bearer " + f.Token}, headers...)
	return f.env.Do(ctx, method, f.env.OrdersURL+path, body, h...)
}

// Do sends one request and reads the whole answer.
func (e *Env) Do(ctx context.Context, method, url string, body []byte, headers ...string) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Order is the part of an order answer the scenarios use.
type Order struct {
	ID          int64  `json:"id"`
	Status      string `json:"status"`
	AmountCents int64  `json:"amount_cents"`
	Quantity    int    `json:"quantity"`
}

// CreateOrder posts an order to path (normally /v1/orders) with Idempotency-Key key.
func (f *Fixture) CreateOrder(ctx context.Context, path, key string, productID int64, qty int) (Order, Response, error) {
	body := fmt.Appendf(nil, `{"product_id":%d,"quantity":%d}`, productID, qty)
	r, err := f.Do(ctx, http.MethodPost, path, body, "Idempotency-Key", key)
	if err != nil {
		return Order{}, r, err
	}
	var o Order
	if r.Status == http.StatusCreated {
		err = r.JSON(&o)
	}
	return o, r, err
}

// notCreated is the error of a create order (what names it) that did not answer 201: the request's
// own error when it got no answer, else the answer.
func notCreated(what string, err error, r Response) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: HTTP %d %s", what, r.Status, bytes.TrimSpace(r.Body))
}

// Callback builds a platform callback for an order.
func Callback(orderID int64, status string, amount int64, eventID string) callback.Callback {
	return callback.Callback{EventID: eventID, PaymentID: fmt.Sprintf("lab_pay_%d", orderID),
		MerchantOrderNo: strconv.FormatInt(orderID, 10), Status: status, AmountCents: amount,
		Currency: "EUR", OccurredAt: time.Now().UTC()}
}

// PostCallback signs cb with the shared secret and posts it to orders at path.
func (e *Env) PostCallback(ctx context.Context, path string, cb callback.Callback) (Response, error) {
	body, err := json.Marshal(cb)
	if err != nil {
		return Response{}, err
	}
	return e.Do(ctx, http.MethodPost, e.OrdersURL+path, body, paysig.Header, paysig.Sign(e.Secret, time.Now(), body))
}

// calmChaos is every chaos field at its calm value (one copy of each callback, no fault), the seed
// aside.
var calmChaos = map[string]any{"duplicates": 1, "parallel": true, "jitter_ms": 0, "reorder": false,
	"ack_loss_rate": 0, "create_timeout_rate": 0, "reset_rate": 0, "error_rate": 0, "delay_success_ms": 0}

// adminHeaders are the headers of a call to payments-mock's admin API: ADMIN_TOKEN as the bearer
// token when it is set (without it, the platform admits loopback callers only).
func (e *Env) adminHeaders() []string {
	if e.AdminToken == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + e.AdminToken}
}

// SetChaos sets payments-mock's chaos to the given fields, and every other field to its calm value
// (PUT /admin/chaos keeps the fields it is not sent, so a reset_rate or a delay_success_ms left by a
// trainer's /lab buttons or by hand would have stayed under the scenario, and failed it).
func (e *Env) SetChaos(ctx context.Context, chaos map[string]any) error {
	all := maps.Clone(calmChaos)
	maps.Copy(all, chaos)
	body, _ := json.Marshal(all)
	r, err := e.Do(ctx, http.MethodPut, e.PaymentsURL+"/admin/chaos", body, e.adminHeaders()...)
	if err != nil {
		return fmt.Errorf("set chaos of payments-mock at %s (PAYMENTS_URL): %w", config.RedactURL(e.PaymentsURL), err)
	}
	if r.Status != http.StatusOK {
		// Named, because the usual cause is PAYMENTS_URL pointing at another service (orders answers 404).
		return fmt.Errorf("set chaos of payments-mock at %s (PAYMENTS_URL): PUT /admin/chaos answered HTTP %d: %s",
			config.RedactURL(e.PaymentsURL), r.Status, r.Body)
	}
	return nil
}

// ChaosChangedSince says how payments-mock's chaos differs now from what a run set with SetChaos (want:
// the fields it sent; every other field calm), as "duplicates 1 (this run set 3), ...", or "" when it
// does not or cannot be read. Chaos is the platform's, one setting for every caller: another lab run,
// the /lab page's buttons or a PUT by hand on the same payments-mock change it under a run (a workshop
// walker's finding, 2026-12-07: an incident whose chaos a second terminal's S3 calmed waited out
// LAB_QUIET, then asked whether the services were running).
func (e *Env) ChaosChangedSince(ctx context.Context, want map[string]any) string {
	r, err := e.Do(ctx, http.MethodGet, e.PaymentsURL+"/admin/chaos", nil, e.adminHeaders()...)
	var now map[string]any
	if err != nil || r.Status != http.StatusOK || r.JSON(&now) != nil {
		return ""
	}
	all := maps.Clone(calmChaos)
	maps.Copy(all, want)
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if k == "seed" {
			continue // the draws' seed, not a misbehaviour
		}
		set, _ := json.Marshal(all[k])
		got, _ := json.Marshal(now[k]) // numbers come back as float64: 3 and 3.0 both marshal as 3
		if string(set) != string(got) {
			diffs = append(diffs, fmt.Sprintf("%s %s (this run set %s)", k, got, set))
		}
	}
	return strings.Join(diffs, ", ")
}

// PlatformCreates is how many create-payment requests payments-mock received for merchant_order_no no
// (GET /admin/creates). The platform is idempotent on the number, so a shop that asked twice still
// has one payment there: only this count shows the second ask.
func (e *Env) PlatformCreates(ctx context.Context, no string) (int64, error) {
	r, err := e.Do(ctx, http.MethodGet, e.PaymentsURL+"/admin/creates?merchant_order_no="+url.QueryEscape(no), nil, e.adminHeaders()...)
	if err != nil {
		return 0, fmt.Errorf("payments-mock at %s (PAYMENTS_URL): GET /admin/creates: %w", config.RedactURL(e.PaymentsURL), err)
	}
	var got struct {
		Requests *int64 `json:"requests"`
	}
	if r.Status != http.StatusOK || r.JSON(&got) != nil || got.Requests == nil {
		return 0, fmt.Errorf("payments-mock at %s (PAYMENTS_URL): GET /admin/creates answered HTTP %d: %s",
			config.RedactURL(e.PaymentsURL), r.Status, r.Body)
	}
	return *got.Requests, nil
}

// CalmChaos puts payments-mock back to no chaos (one copy of each callback, no fault), keeping the
// seed.
func (e *Env) CalmChaos(ctx context.Context) error {
	return e.SetChaos(ctx, nil)
}

// Parallel runs fn(i) for i in [0, n) at once, released together by one closed channel, and returns
// the results in order.
func Parallel[T any](n int, fn func(i int) T) []T {
	start := make(chan struct{})
	out := make([]T, n)
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

// Answer is one answer of ReleaseTogether: a status and body, or the error of a request that got none.
type Answer struct {
	Status int
	Body   []byte
	Err    error
}

// ReleaseTogether POSTs n requests (req(i) gives each one's URL, body and header pairs) so that the
// server starts handling them together: each request sends its headers and all of its body but the
// last byte, then waits until all n are there, or a second has passed (a request that cannot get that
// far, such as one refused, must not hold the others forever); then every last byte goes. A handler
// reads the whole body before it does anything, so the handlers start within the same instant instead
// of in the order their connections happened to open, which Parallel's release at the client leaves to
// chance. Bodies must not be empty.
func ReleaseTogether(ctx context.Context, e *Env, n int, req func(i int) (url string, body []byte, headers []string)) []Answer {
	gate := make(chan struct{})
	var waiting sync.WaitGroup
	waiting.Add(n)
	out := make([]Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		u, body, headers := req(i)
		held := &lastByteHeld{rest: body[:len(body)-1], last: body[len(body)-1:], gate: gate, arrived: waiting.Done}
		wg.Go(func() {
			defer held.arrive() // a request that failed before its body was read counts as there
			r, err := http.NewRequestWithContext(ctx, http.MethodPost, u, held)
			if err != nil {
				out[i].Err = err
				return
			}
			r.ContentLength = int64(len(body))
			r.Header.Set("Content-Type", "application/json")
			for j := 0; j+1 < len(headers); j += 2 {
				r.Header.Set(headers[j], headers[j+1])
			}
			resp, err := e.HTTP.Do(r)
			if err != nil {
				out[i].Err = err
				return
			}
			defer resp.Body.Close()
			out[i].Status = resp.StatusCode
			out[i].Body, out[i].Err = io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		})
	}
	all := make(chan struct{})
	go func() { waiting.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	close(gate)
	wg.Wait()
	return out
}

// lastByteHeld is a request body that gives all but its last byte at once, then holds the last one
// until gate closes. arrived is called once, when the rest has been read (the headers went before it).
type lastByteHeld struct {
	rest, last []byte
	gate       <-chan struct{}
	once       sync.Once
	arrived    func()
}

func (b *lastByteHeld) arrive() { b.once.Do(b.arrived) }

func (b *lastByteHeld) Read(p []byte) (int, error) {
	if len(b.rest) > 0 {
		n := copy(p, b.rest)
		b.rest = b.rest[n:]
		return n, nil
	}
	if len(b.last) == 0 {
		return 0, io.EOF
	}
	b.arrive()
	<-b.gate
	n := copy(p, b.last)
	b.last = b.last[n:]
	return n, nil
}

// Eventually polls cond every 20 ms until it is true or within has passed; it reports whether cond held.
func Eventually(ctx context.Context, within time.Duration, cond func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil || ok {
			return ok, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
