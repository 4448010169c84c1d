// Package play sends a replay recording (internal/replay) to a running shop and checks on the rows that
// the shop ended where the recording says the guarded callback must leave it. `loadtest replay` is its
// command. Guarded, every invariant must hold; with Unsafe the same traffic goes to the file's lab route
// (/lab/unsafe/...), and the same checks show the damage.
package play

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"idemshop/internal/invariants"
	"idemshop/internal/lab"
	"idemshop/internal/replay"
)

// initialStock is each fresh product's stock: far more than any recording takes, so that no order
// ends REFUND_REQUIRED for want of stock, which the recording could not have predicted.
const initialStock = 1000

// Options of one replay.
type Options struct {
	Name   string // the file's name, for the report
	Unsafe bool   // send to the file's unsafe lab route instead of POST /v1/payments/callback
	// Keep leaves the run's lab user, products, orders and every row that refers to them in place, for
	// psql; the report names the user and the orders.
	Keep     bool
	Progress func(string) // told what is going on; nil: nothing
}

// OrderReport is one replayed order.
type OrderReport struct {
	Ref         string   `json:"ref"` // the recorded merchant_order_no
	ID          int64    `json:"id"`  // the fresh order
	Quantity    int      `json:"quantity"`
	AmountCents int64    `json:"amount_cents"`
	Status      string   `json:"status"`
	WantStatus  []string `json:"expected_status"`
	StockDelta  int64    `json:"stock_delta"`
	WantStock   int64    `json:"expected_stock_delta"`
	Sent        int      `json:"sent"`
	Received    int64    `json:"received"`
	Applied     int64    `json:"applied"`
	WantApplied int64    `json:"expected_applied"`
}

// Report is the JSON of `loadtest replay`.
type Report struct {
	File       string         `json:"file"`
	Title      string         `json:"title"`
	Unsafe     bool           `json:"unsafe"`
	Path       string         `json:"path"`
	Deliveries int            `json:"deliveries"`
	Groups     int            `json:"groups"`
	Answers    map[string]int `json:"answers"` // by HTTP status, or "no answer"
	Orders     []OrderReport  `json:"orders"`
	Violations []string       `json:"violations"`
	Callbacks  struct {
		Received    int64 `json:"received"`
		Applied     int64 `json:"applied"`
		WantApplied int64 `json:"expected_applied"`
	} `json:"callbacks"`
	StockDelta  int64   `json:"stock_delta"`
	WantStock   int64   `json:"expected_stock_delta"`
	PointsDelta int64   `json:"points_delta"`
	WantPoints  int64   `json:"expected_points_delta"`
	UserID      int64   `json:"user_id"`
	Kept        bool    `json:"kept"`
	Seconds     float64 `json:"seconds"`
}

// freshOrder is one recorded order made anew.
type freshOrder struct {
	replay.Order
	id, product int64
	ends        []replay.End
}

// Run replays rec against env's shop: one fresh order per recorded order (through POST /v1/orders, as a
// new lab user), every delivery rewritten for them and signed with env.Secret as it is sent, the groups
// in order, each one released at once behind a barrier, no earlier than its at_ms and not before the
// previous group was answered. Then it waits (at most env.Quiet) for the outbox and points-consumer to
// settle, and checks each order against what the recording implies.
func Run(ctx context.Context, env *lab.Env, rec *replay.Recording, opt Options) (Report, error) {
	start := time.Now()
	progress := opt.Progress
	if progress == nil {
		progress = func(string) {}
	}
	rep := Report{File: opt.Name, Title: rec.Header.Title, Unsafe: opt.Unsafe, Path: replay.GuardedPath,
		Deliveries: len(rec.Deliveries), Groups: len(rec.Groups()), Answers: map[string]int{}, Violations: []string{},
		Kept: opt.Keep}
	if opt.Unsafe {
		rep.Path = rec.UnsafePath()
	}
	recorded, err := rec.Orders()
	if err != nil {
		return rep, err
	}
	ends, err := rec.Expect(recorded, "EUR") // lab products are priced in EUR
	if err != nil {
		return rep, err
	}

	side := "replay-guarded"
	if opt.Unsafe {
		side = "replay-unsafe"
	}
	f, err := env.NewFixture(ctx, side)
	if err != nil {
		return rep, err
	}
	rep.UserID = f.UserID
	if !opt.Keep {
		defer f.Close(ctx)
	}
	orders, err := createOrders(ctx, f, recorded, ends)
	if err != nil {
		return rep, err
	}
	mapping := replay.Mapping{Orders: map[string]int64{}, Prefix: replay.NewPrefix(randomBytes())}
	for _, o := range orders {
		mapping.Orders[o.Ref] = o.id
	}
	prepared, err := rec.Prepare(mapping)
	if err != nil {
		return rep, err
	}

	answered, err := send(ctx, env, prepared, rec.Groups(), rep.Path, rep.Answers, progress)
	if err != nil {
		return rep, err
	}
	if opt.Unsafe && rep.Answers["404"] == len(prepared) {
		return rep, fmt.Errorf("every delivery to %s was answered 404: is orders in lab mode (ORDERS_LAB=true)? If it is, the file's unsafe_path is not one of its lab routes", rep.Path)
	}
	// Each delivery is signed afresh at send time, so a refused signature is never the recording's:
	// this process and orders do not share PAYMENT_WEBHOOK_SECRET, and nothing was checked.
	if n := rep.Answers["401"]; n > 0 {
		return rep, fmt.Errorf("%d of %d deliveries were answered 401 (signature refused): is PAYMENT_WEBHOOK_SECRET the one orders uses?",
			n, len(prepared))
	}
	for _, status := range slices.Sorted(maps.Keys(rep.Answers)) {
		if code, err := strconv.Atoi(status); err != nil || code >= 500 {
			// The platform would send these again; a replay sends each line once, so the recording's end
			// cannot be expected.
			rep.Violations = append(rep.Violations, fmt.Sprintf("every delivery answered: %d got %s", rep.Answers[status], status))
		}
	}

	ids := make([]int64, len(orders))
	for i, o := range orders {
		ids[i] = o.id
	}
	progress("waiting for the outbox and points-consumer")
	settled, err := lab.Eventually(ctx, env.Quiet, func() (bool, error) { return quiet(ctx, env, ids) })
	if err != nil {
		return rep, err
	}
	if !settled {
		rep.Violations = append(rep.Violations, fmt.Sprintf("events not settled within %s (is points-consumer running?)", env.Quiet))
	}
	if err := check(ctx, env, f.UserID, orders, answered, &rep); err != nil {
		return rep, err
	}
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

func randomBytes() [4]byte {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return b
}

// createOrders makes one product (priced amount/quantity) and one PENDING order per recorded order,
// through the shop's own API, so that the orders are what a customer's would be.
func createOrders(ctx context.Context, f *lab.Fixture, recorded []replay.Order, ends map[string][]replay.End) ([]freshOrder, error) {
	out := make([]freshOrder, len(recorded))
	stamp := time.Now().UnixNano()
	for i, r := range recorded {
		product, err := f.Product(ctx, initialStock, r.AmountCents/int64(r.Quantity))
		if err != nil {
			return nil, err
		}
		o, resp, err := f.CreateOrder(ctx, "/v1/orders", fmt.Sprintf("replay-%d-%d", stamp, i), product, r.Quantity)
		if err != nil {
			return nil, fmt.Errorf("create the order for %q: %w", r.Ref, err)
		}
		if resp.Status != http.StatusCreated {
			return nil, fmt.Errorf("create the order for %q: HTTP %d %s", r.Ref, resp.Status, resp.Body)
		}
		if o.AmountCents != r.AmountCents {
			return nil, fmt.Errorf("order for %q costs %d cents, the recording says %d", r.Ref, o.AmountCents, r.AmountCents)
		}
		out[i] = freshOrder{Order: r, id: o.ID, product: product, ends: ends[r.Ref]}
	}
	return out, nil
}

// send posts the deliveries group by group and counts the answers by status; it returns, by order ref,
// how many deliveries the shop answered (each answered delivery left an audit row).
func send(ctx context.Context, env *lab.Env, ps []replay.Prepared, groups [][]int, path string,
	answers map[string]int, progress func(string)) (map[string]int, error) {
	answered := map[string]int{}
	start := time.Now()
	for g, group := range groups {
		if wait := time.Until(start.Add(time.Duration(ps[group[0]].AtMS) * time.Millisecond)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		progress(fmt.Sprintf("sending group %d/%d (%d at once)", g+1, len(groups), len(group)))
		// lab.Parallel releases them together: copies sent at once race into the shop, as they did.
		results := lab.Parallel(len(group), func(i int) string {
			return deliver(ctx, env, ps[group[i]], path)
		})
		for i, status := range results {
			answers[status]++
			if status != "no answer" {
				answered[ps[group[i]].OrderRef]++
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return answered, nil
}

// deliver sends one delivery, signed now, and returns its HTTP status, or "no answer".
func deliver(ctx context.Context, env *lab.Env, p replay.Prepared, path string) string {
	req, err := p.Request(ctx, env.OrdersURL, path, env.Secret, time.Now())
	if err != nil {
		return "no answer"
	}
	resp, err := env.HTTP.Do(req)
	if err != nil {
		return "no answer"
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return strconv.Itoa(resp.StatusCode)
}

// quiet reports whether every event of the orders is published and, for order.paid and order.refunded,
// applied by points-consumer: after that, nothing more changes on its own.
func quiet(ctx context.Context, env *lab.Env, ids []int64) (bool, error) {
	var pending int64
	err := env.DB.WithContext(ctx).Raw(`SELECT
		  (SELECT count(*) FROM outbox WHERE (payload->>'order_id')::bigint IN @ids AND published_at IS NULL)
		+ (SELECT count(*) FROM outbox x WHERE x.routing_key IN ('order.paid', 'order.refunded')
		     AND (x.payload->>'order_id')::bigint IN @ids
		     AND NOT EXISTS (SELECT 1 FROM points_ledger l WHERE l.biz_id =
		       CASE x.routing_key WHEN 'order.paid' THEN 'order-paid:' ELSE 'order-refunded:' END || (x.payload->>'order_id')))`,
		map[string]any{"ids": ids}).Scan(&pending).Error
	return pending == 0, err
}

// rows is what the database says about one order beyond invariants.OrderFacts.
type rows struct {
	ID             int64
	RefundedCents  int64
	RefundedEvents int64 // order.refunded outbox rows
	Reversals      int64 // order-refunded:<id> ledger rows
	RefundRequests int64 // refunds the shop owes for a SUCCESS after FAILED
}

// check reads the rows and compares each order with the end the recording implies.
func check(ctx context.Context, env *lab.Env, userID int64, orders []freshOrder, answered map[string]int, rep *Report) error {
	ids := make([]int64, len(orders))
	for i, o := range orders {
		ids[i] = o.id
	}
	facts, err := invariants.Load(ctx, env.DB, ids)
	if err != nil {
		return err
	}
	byID := map[int64]invariants.OrderFacts{}
	for _, fa := range facts {
		byID[fa.ID] = fa
	}
	var more []rows
	err = env.DB.WithContext(ctx).Raw(`SELECT o.id, o.refunded_cents,
		  (SELECT count(*) FROM outbox x WHERE x.routing_key = 'order.refunded' AND (x.payload->>'order_id')::bigint = o.id) AS refunded_events,
		  (SELECT count(*) FROM points_ledger l WHERE l.biz_id = 'order-refunded:' || o.id) AS reversals,
		  (SELECT count(*) FROM refund_requests r WHERE r.order_id = o.id AND r.reason LIKE 'success_after_%') AS refund_requests
		FROM orders o WHERE o.id IN ?`, ids).Scan(&more).Error
	if err != nil {
		return fmt.Errorf("read orders: %w", err)
	}
	extra := map[int64]rows{}
	for _, r := range more {
		extra[r.ID] = r
	}

	var wantPoints int64
	for _, o := range orders {
		fa, ok := byID[o.id]
		if !ok {
			return fmt.Errorf("order %d (%q) is gone", o.id, o.Ref)
		}
		// The recording may allow several ends (events of one order that raced): the rows are judged
		// against the closest of those with their status (or of all, if none has it).
		candidates := slices.DeleteFunc(slices.Clone(o.ends), func(e replay.End) bool { return e.Status != fa.Status })
		if len(candidates) == 0 {
			candidates = o.ends
		}
		var best []invariants.Violation
		var end replay.End
		for i, e := range candidates {
			if vs := compare(o, e, fa, extra[o.id], answered[o.Ref]); i == 0 || len(vs) < len(best) {
				best, end = vs, e
			}
		}
		delta, stockVs, err := invariants.Stock(ctx, env.DB, o.product, initialStock, end.StockDelta(o.Quantity))
		if err != nil {
			return err
		}
		for _, v := range append(stockVs, best...) {
			rep.Violations = append(rep.Violations, v.String())
		}
		statuses := make([]string, 0, len(o.ends))
		for _, e := range o.ends {
			if !slices.Contains(statuses, e.Status) {
				statuses = append(statuses, e.Status)
			}
		}
		rep.Orders = append(rep.Orders, OrderReport{Ref: o.Ref, ID: o.id, Quantity: o.Quantity, AmountCents: o.AmountCents,
			Status: fa.Status, WantStatus: statuses, StockDelta: delta, WantStock: end.StockDelta(o.Quantity),
			Sent: o.Deliveries, Received: fa.CallbacksReceived, Applied: fa.CallbacksApplied, WantApplied: int64(end.Applied)})
		rep.Callbacks.Received += fa.CallbacksReceived
		rep.Callbacks.Applied += fa.CallbacksApplied
		rep.Callbacks.WantApplied += int64(end.Applied)
		rep.StockDelta += delta
		rep.WantStock += end.StockDelta(o.Quantity)
		wantPoints += end.Points(o.AmountCents)
	}
	balance, pointVs, err := invariants.Points(ctx, env.DB, userID, wantPoints)
	if err != nil {
		return err
	}
	rep.PointsDelta, rep.WantPoints = balance, wantPoints
	for _, v := range pointVs {
		rep.Violations = append(rep.Violations, v.String())
	}
	return nil
}

// compare lists how one order's rows differ from end e (its stock is invariants.Stock's). The checks are
// the incident's (internal/invariants: paid once, one order.paid, points once), widened to every end a
// callback can leave: refunds recorded and compensated once, declines applied once, every delivery
// audited.
func compare(o freshOrder, e replay.End, fa invariants.OrderFacts, r rows, answered int) []invariants.Violation {
	var vs []invariants.Violation
	subject := fmt.Sprintf("order %d (recorded %s)", o.id, o.Ref)
	add := func(check, detail string, args ...any) {
		vs = append(vs, invariants.Violation{Check: check, Subject: subject, Detail: fmt.Sprintf(detail, args...)})
	}
	statuses := make([]string, 0, len(o.ends))
	for _, x := range o.ends {
		statuses = append(statuses, x.Status)
	}
	if fa.Status != e.Status {
		add("order status", "%s, want %s", fa.Status, strings.Join(slices.Compact(slices.Sorted(slices.Values(statuses))), " or "))
	}
	if fa.CallbacksApplied != int64(e.Applied) {
		add("callbacks applied once", "%d applied of %d received, want %d", fa.CallbacksApplied, fa.CallbacksReceived, e.Applied)
	}
	if fa.CallbacksReceived != int64(answered) {
		add("every delivery audited", "%d callbacks recorded, %d answered", fa.CallbacksReceived, answered)
	}
	if want := b2i(e.PaidEvent); fa.OutboxRows != want {
		add("one order.paid event", "%d order.paid outbox rows, want %d", fa.OutboxRows, want)
	}
	if want := b2i(e.PaidEvent); fa.LedgerRows != want {
		add("points credited once", "%d order-paid:%d ledger rows, want %d", fa.LedgerRows, o.id, want)
	}
	if want := b2i(e.RefundedEvent); r.RefundedEvents != want {
		add("one order.refunded event", "%d order.refunded outbox rows, want %d", r.RefundedEvents, want)
	}
	if want := b2i(e.RefundedEvent); r.Reversals != want {
		add("points reversed once", "%d order-refunded:%d ledger rows, want %d", r.Reversals, o.id, want)
	}
	if r.RefundedCents != e.RefundedCents {
		add("refunds recorded once", "refunded %d cents, want %d", r.RefundedCents, e.RefundedCents)
	}
	if want := b2i(e.RefundOwed); min(r.RefundRequests, 1) != want {
		add("refund owed for a late SUCCESS", "%d refund requests, want %d", r.RefundRequests, want)
	}
	return vs
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Statuses counts orders by status, and by expected status (the first an order may end in).
func (r Report) Statuses() (got, want map[string]int) {
	got, want = map[string]int{}, map[string]int{}
	for _, o := range r.Orders {
		got[o.Status]++
		if len(o.WantStatus) > 0 {
			want[strings.Join(o.WantStatus, "|")]++
		}
	}
	return got, want
}

// Summary writes counts as "4 PAID, 1 FAILED", in a fixed order.
func Summary(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	return strings.Join(parts, ", ")
}
