package soak

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"idemshop/internal/events"
	"idemshop/internal/invariants"
	"idemshop/internal/platform/rabbitmq"
)

// Violation is one broken convergence rule: the check, what it is about (an order, a user, a product,
// a key, a queue) and both sides' view.
type Violation = invariants.Violation

// The shop's rows the check reads.
type (
	OrderRow struct {
		ID, UserID, ProductID, Quantity, AmountCents int64
		Status                                       string
	}
	KeyRow struct {
		ID, UserID  int64
		Key, State  string
		Path        string
		LockedUntil *time.Time
	}
	LedgerRow struct {
		UserID int64
		BizID  string
		Delta  int64
	}
	OutboxRow struct {
		ID         int64
		RoutingKey string
		OrderID    int64 // 0 when the payload has none
		Published  bool
	}
	RefundRequestRow struct {
		OrderID          int64
		RefundNo, Reason string
		Status           string
	}
)

// Snapshot is everything the convergence check compares: the platform's records and the shop's rows.
type Snapshot struct {
	Payments []Payment
	Refunds  []Refund // empty when the platform has no GET /admin/payments

	Orders         []OrderRow
	RefundRequests []RefundRequestRow
	OpenKeys       []KeyRow // idempotency keys in PROCESSING or FAILED_RETRYABLE
	InitialStock   map[int64]int64
	Stock          map[int64]int64
	Ledger         []LedgerRow
	Balances       map[int64]int64 // points_accounts
	Outbox         []OutboxRow

	Queues   []QueueDepth
	QueueErr string // the broker could not be inspected

	// Answered is what the clients were told: every order a create answered 201 for, with the
	// payment id a pay answered 201 with ("" if none).
	Answered map[int64]string
}

// QueueDepth is the ready messages of one queue.
type QueueDepth struct {
	Name  string `json:"name"`
	Ready int64  `json:"ready"`
}

// Check applies the convergence rules (docs/reliability.md) to s. It only reads s, so tests feed it
// hand-made snapshots. Violations come out in a stable order.
func Check(s Snapshot) []Violation {
	var vs []Violation
	add := func(check, subject, format string, args ...any) {
		vs = append(vs, Violation{Check: check, Subject: subject, Detail: fmt.Sprintf(format, args...)})
	}

	orders := map[int64]OrderRow{}
	for _, o := range s.Orders {
		orders[o.ID] = o
	}

	// The platform: at most one payment per order, and only for orders the shop has.
	pays := map[int64][]Payment{}
	for _, p := range s.Payments {
		id, err := strconv.ParseInt(p.MerchantOrderNo, 10, 64)
		if _, ok := orders[id]; err != nil || !ok {
			add("payment for a known order", "payment "+p.ID,
				"platform has %s for merchant_order_no %q, the shop has no such order", p.Status, p.MerchantOrderNo)
			continue
		}
		pays[id] = append(pays[id], p)
	}
	for id, ps := range pays {
		if len(ps) > 1 {
			var ids []string
			for _, p := range ps {
				ids = append(ids, p.ID+" "+p.Status)
			}
			slices.Sort(ids)
			add("one payment per order", fmt.Sprintf("order %d", id), "platform has %d payments: %s", len(ps), strings.Join(ids, ", "))
		}
	}

	shopRefund := map[int64][]string{} // order -> refund request reasons
	for _, r := range s.RefundRequests {
		shopRefund[r.OrderID] = append(shopRefund[r.OrderID], r.Reason)
	}
	successAfter := func(id int64) bool {
		for _, r := range shopRefund[id] {
			if strings.HasPrefix(r, "success_after_") {
				return true
			}
		}
		return false
	}

	type outboxCount struct{ paid, refunded int }
	outbox := map[int64]*outboxCount{}
	for _, x := range s.Outbox {
		if !x.Published {
			add("outbox published", fmt.Sprintf("outbox %d", x.ID), "%s for order %d never published", x.RoutingKey, x.OrderID)
		}
		c := outbox[x.OrderID]
		if c == nil {
			c = &outboxCount{}
			outbox[x.OrderID] = c
		}
		switch x.RoutingKey {
		case events.RoutingKeyOrderPaid:
			c.paid++
		case events.RoutingKeyRefunded:
			c.refunded++
		}
	}

	ledger := map[string]LedgerRow{}
	for _, l := range s.Ledger {
		ledger[l.BizID] = l
	}

	ids := make([]int64, 0, len(orders))
	for id := range orders {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	paidQty := map[int64]int64{}
	for _, id := range ids {
		o := orders[id]
		subject := fmt.Sprintf("order %d", id)
		ps := pays[id]

		// 1. The order's status matches its payment at the platform.
		var want []string
		platform := "no payment"
		if len(ps) > 0 {
			p := ps[0]
			platform = fmt.Sprintf("%s %s refunded %d/%d", p.ID, p.Status, p.RefundedCents, p.AmountCents)
			if p.AmountCents != o.AmountCents {
				add("amount matches", subject, "shop %d cents, platform %s %d cents", o.AmountCents, p.ID, p.AmountCents)
			}
			switch {
			case p.Status == "PENDING":
				want = []string{"PAYING", "PENDING"}
			case p.Status == "FAILED":
				want = []string{"FAILED"}
			case (p.Status == "SUCCESS" || p.Status == "REFUNDED") && p.RefundedCents >= p.AmountCents:
				want = []string{"REFUNDED"}
				if successAfter(id) {
					want = append(want, "FAILED", "CANCELLED")
				}
			case p.Status == "SUCCESS":
				want = []string{"PAID"}
			default:
				want = []string{"?"}
			}
		} else {
			want = []string{"PENDING", "FAILED"}
		}
		if !slices.Contains(want, o.Status) {
			add("status matches platform", subject, "shop %s, platform %s (want %s)", o.Status, platform, strings.Join(want, " or "))
		}

		// 2. Stock: PAID orders hold their units.
		if o.Status == "PAID" {
			paidQty[o.ProductID] += o.Quantity
		}

		// 3. Events: at most one of each; only for orders that were paid / refunded after being paid.
		oc := outbox[id]
		if oc == nil {
			oc = &outboxCount{}
		}
		if oc.paid > 1 {
			add("one order.paid event", subject, "%d order.paid outbox rows", oc.paid)
		}
		if oc.refunded > 1 {
			add("one order.refunded event", subject, "%d order.refunded outbox rows", oc.refunded)
		}
		if oc.paid > 0 && o.Status != "PAID" && o.Status != "REFUNDED" {
			add("order.paid only for paid orders", subject, "shop %s has an order.paid outbox row", o.Status)
		}
		if oc.refunded > 0 && o.Status != "REFUNDED" {
			add("order.refunded only for refunded orders", subject, "shop %s has an order.refunded outbox row", o.Status)
		}

		// 4. Points: PAID credits once; REFUNDED after PAID credits once and reverses once; nothing else.
		pts := events.PointsFor(o.AmountCents)
		credit, hasCredit := ledger["order-paid:"+strconv.FormatInt(id, 10)]
		rev, hasRev := ledger["order-refunded:"+strconv.FormatInt(id, 10)]
		wasPaid := o.Status == "REFUNDED" && (oc.paid > 0 || oc.refunded > 0)
		switch {
		case o.Status == "PAID":
			if !hasCredit {
				add("points credited", subject, "PAID, no ledger row order-paid:%d (want +%d)", id, pts)
			}
			if hasRev {
				add("points not reversed", subject, "PAID (platform %s), but order-refunded:%d %+d", platform, id, rev.Delta)
			}
		case wasPaid:
			if oc.refunded == 0 {
				add("order.refunded event", subject, "REFUNDED after PAID (an order.paid event), no order.refunded outbox row")
			}
			if !hasCredit {
				add("points credited", subject, "REFUNDED after PAID, no ledger row order-paid:%d (want +%d)", id, pts)
			}
			if !hasRev {
				add("points reversed", subject, "REFUNDED after PAID, no ledger row order-refunded:%d (want %d..0)", id, -pts)
			} else if rev.Delta < -pts || rev.Delta > 0 {
				add("points reversed", subject, "order-refunded:%d is %+d, want %d..0", id, rev.Delta, -pts)
			}
		default:
			if hasCredit {
				add("no points", subject, "shop %s (platform %s), but order-paid:%d %+d", o.Status, platform, id, credit.Delta)
			}
			if hasRev {
				add("no points", subject, "shop %s (platform %s), but order-refunded:%d %+d", o.Status, platform, id, rev.Delta)
			}
		}
		if hasCredit {
			if credit.Delta != pts {
				add("points credited", subject, "order-paid:%d is %+d, want %+d (amount %d cents)", id, credit.Delta, pts, o.AmountCents)
			}
			if credit.UserID != o.UserID {
				add("points credited", subject, "order-paid:%d went to user %d, the order is user %d's", id, credit.UserID, o.UserID)
			}
		}
		if hasRev && rev.UserID != o.UserID {
			add("points reversed", subject, "order-refunded:%d hit user %d, the order is user %d's", id, rev.UserID, o.UserID)
		}
	}

	// Ledger rows with an order business key must belong to an order (redemptions have other keys).
	for _, l := range s.Ledger {
		if !strings.HasPrefix(l.BizID, "order-") {
			continue
		}
		kind, num, _ := strings.Cut(l.BizID, ":")
		id, err := strconv.ParseInt(num, 10, 64)
		if _, ok := orders[id]; err != nil || !ok || (kind != "order-paid" && kind != "order-refunded") {
			add("ledger rows belong to orders", "user "+strconv.FormatInt(l.UserID, 10), "ledger row %s %+d matches no order", l.BizID, l.Delta)
		}
	}

	// What the clients were told holds: their orders exist, their payments exist for those orders.
	byID := map[string]Payment{}
	for _, p := range s.Payments {
		byID[p.ID] = p
	}
	for _, id := range sortedKeys(s.Answered) {
		subject := fmt.Sprintf("order %d", id)
		if _, ok := orders[id]; !ok {
			add("answered orders exist", subject, "a create answered 201 with it, the shop has no such order")
			continue
		}
		pid := s.Answered[id]
		if pid == "" {
			continue
		}
		if p, ok := byID[pid]; !ok {
			add("answered payments exist", subject, "a pay answered 201 with payment %s, the platform has none", pid)
		} else if p.MerchantOrderNo != strconv.FormatInt(id, 10) {
			add("answered payments exist", subject, "a pay answered 201 with payment %s, which is order %s's", pid, p.MerchantOrderNo)
		}
	}

	// Outbox rows of unknown orders (order_id missing or not an order).
	for oid, c := range outbox {
		if _, ok := orders[oid]; !ok {
			add("events belong to orders", fmt.Sprintf("order %d", oid), "%d order.paid and %d order.refunded outbox rows, no such order", c.paid, c.refunded)
		}
	}

	// Balances: each equals the sum of its ledger, and is not negative.
	sums := map[int64]int64{}
	for _, l := range s.Ledger {
		sums[l.UserID] += l.Delta
	}
	users := map[int64]bool{}
	for u := range sums {
		users[u] = true
	}
	for u := range s.Balances {
		users[u] = true
	}
	for _, u := range sortedKeys(users) {
		b, sum := s.Balances[u], sums[u]
		if b != sum {
			add("balance = sum of ledger", fmt.Sprintf("user %d", u), "balance %d, ledger sums to %d", b, sum)
		}
		if b < 0 {
			add("balance not negative", fmt.Sprintf("user %d", u), "balance %d", b)
		}
	}

	// Stock: initial - units of PAID orders.
	for _, pid := range sortedKeys(s.InitialStock) {
		want := s.InitialStock[pid] - paidQty[pid]
		got, ok := s.Stock[pid]
		switch {
		case !ok:
			add("stock", fmt.Sprintf("product %d", pid), "product is gone")
		case got != want:
			add("stock", fmt.Sprintf("product %d", pid), "stock %d, want %d (initial %d - %d units of PAID orders)", got, want, s.InitialStock[pid], paidQty[pid])
		}
		if ok && got < 0 {
			add("stock not negative", fmt.Sprintf("product %d", pid), "stock %d", got)
		}
	}

	// No pay record left in flight or retryable.
	for _, k := range s.OpenKeys {
		lease := "no lease"
		switch {
		case k.LockedUntil != nil && k.State == "FAILED_RETRYABLE": // the platform said it has no payment
			lease = "the reconciler asks again after " + k.LockedUntil.UTC().Format("15:04:05.000")
		case k.LockedUntil != nil:
			lease = "lease until " + k.LockedUntil.UTC().Format("15:04:05.000")
		}
		add("no open idempotency key", fmt.Sprintf("key %d", k.ID), "user %d key %q (%s) is %s, %s", k.UserID, k.Key, k.Path, k.State, lease)
	}

	// The broker: the queue and its DLQ are drained.
	if s.QueueErr != "" {
		add("queues empty", "broker", "%s", s.QueueErr)
	}
	for _, q := range s.Queues {
		if q.Ready != 0 {
			add("queues empty", "queue "+q.Name, "%d ready messages", q.Ready)
		}
	}
	return vs
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// snapshotter reads a Snapshot from the run's platform, database and broker.
type snapshotter struct {
	plat         *platform
	dbURL        string
	amqpURL      string
	topology     rabbitmq.Topology
	initialStock map[int64]int64
	answered     map[int64]string
}

func (sn *snapshotter) take(ctx context.Context) (Snapshot, error) {
	s := Snapshot{InitialStock: sn.initialStock, Stock: map[int64]int64{}, Balances: map[int64]int64{}, Answered: sn.answered}
	conn, err := pgx.Connect(ctx, sn.dbURL)
	if err != nil {
		return s, fmt.Errorf("connect to the run's database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	// The platform first: a shop row newer than the platform's record can only be ahead of it, which
	// the next poll sees settle.
	if s.Payments, s.Refunds, err = sn.plat.records(ctx); err != nil {
		return s, err
	}

	rows, _ := conn.Query(ctx, `SELECT id, user_id, product_id, quantity, amount_cents, status FROM orders ORDER BY id`)
	s.Orders, err = pgx.CollectRows(rows, pgx.RowToStructByPos[OrderRow])
	if err != nil {
		return s, fmt.Errorf("read orders: %w", err)
	}
	rows, _ = conn.Query(ctx, `SELECT order_id, refund_no, reason, status FROM refund_requests ORDER BY id`)
	if s.RefundRequests, err = pgx.CollectRows(rows, pgx.RowToStructByPos[RefundRequestRow]); err != nil {
		return s, fmt.Errorf("read refund_requests: %w", err)
	}
	rows, _ = conn.Query(ctx, `SELECT id, user_id, idempotency_key, state, path, locked_until FROM idempotency_keys
		WHERE state IN ('PROCESSING', 'FAILED_RETRYABLE') ORDER BY id`)
	if s.OpenKeys, err = pgx.CollectRows(rows, pgx.RowToStructByPos[KeyRow]); err != nil {
		return s, fmt.Errorf("read idempotency_keys: %w", err)
	}
	type idValue struct{ ID, V int64 }
	rows, _ = conn.Query(ctx, `SELECT id, stock FROM products`)
	stock, err := pgx.CollectRows(rows, pgx.RowToStructByPos[idValue])
	if err != nil {
		return s, fmt.Errorf("read products: %w", err)
	}
	for _, r := range stock {
		s.Stock[r.ID] = r.V
	}
	rows, _ = conn.Query(ctx, `SELECT user_id, balance FROM points_accounts`)
	bal, err := pgx.CollectRows(rows, pgx.RowToStructByPos[idValue])
	if err != nil {
		return s, fmt.Errorf("read points_accounts: %w", err)
	}
	for _, r := range bal {
		s.Balances[r.ID] = r.V
	}
	rows, _ = conn.Query(ctx, `SELECT user_id, biz_id, delta FROM points_ledger ORDER BY id`)
	if s.Ledger, err = pgx.CollectRows(rows, pgx.RowToStructByPos[LedgerRow]); err != nil {
		return s, fmt.Errorf("read points_ledger: %w", err)
	}
	rows, _ = conn.Query(ctx, `SELECT id, routing_key, COALESCE((payload->>'order_id')::bigint, 0), published_at IS NOT NULL
		FROM outbox ORDER BY id`)
	if s.Outbox, err = pgx.CollectRows(rows, pgx.RowToStructByPos[OutboxRow]); err != nil {
		return s, fmt.Errorf("read outbox: %w", err)
	}

	if ac, err := rabbitmq.Dial(ctx, sn.amqpURL); err != nil {
		s.QueueErr = err.Error()
	} else {
		for _, q := range []string{sn.topology.Queue, sn.topology.DeadLetterQueue} {
			n, err := rabbitmq.ReadyMessages(ac, q)
			if err != nil {
				s.QueueErr = err.Error()
				continue
			}
			s.Queues = append(s.Queues, QueueDepth{Name: q, Ready: n})
		}
		_ = ac.Close()
	}
	return s, nil
}
