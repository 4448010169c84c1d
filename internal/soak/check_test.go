package soak

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// converged is a snapshot of a shop that agrees with its platform in every way the soak knows:
// order 1 PAID, 2 REFUNDED after PAID, 3 FAILED (declined), 4 PENDING (never paid), 5 REFUNDED after
// REFUND_REQUIRED (out of stock), 6 FAILED with a success-after-failed refund, 7 PAID with a partial
// refund, 8 PAYING with a PENDING payment.
func converged() Snapshot {
	return Snapshot{
		Payments: []Payment{
			{ID: "pay_1", MerchantOrderNo: "1", AmountCents: 1250, Status: "SUCCESS"},
			{ID: "pay_2", MerchantOrderNo: "2", AmountCents: 2500, Status: "REFUNDED", RefundedCents: 2500},
			{ID: "pay_3", MerchantOrderNo: "3", AmountCents: 1013, Status: "FAILED"},
			{ID: "pay_5", MerchantOrderNo: "5", AmountCents: 4900, Status: "REFUNDED", RefundedCents: 4900},
			{ID: "pay_6", MerchantOrderNo: "6", AmountCents: 300, Status: "REFUNDED", RefundedCents: 300},
			{ID: "pay_7", MerchantOrderNo: "7", AmountCents: 2000, Status: "SUCCESS", RefundedCents: 700},
			{ID: "pay_8", MerchantOrderNo: "8", AmountCents: 300, Status: "PENDING"},
		},
		Orders: []OrderRow{
			{ID: 1, UserID: 1, ProductID: 1, Quantity: 1, AmountCents: 1250, Status: "PAID"},
			{ID: 2, UserID: 2, ProductID: 1, Quantity: 2, AmountCents: 2500, Status: "REFUNDED"},
			{ID: 3, UserID: 1, ProductID: 5, Quantity: 1, AmountCents: 1013, Status: "FAILED"},
			{ID: 4, UserID: 3, ProductID: 1, Quantity: 1, AmountCents: 1250, Status: "PENDING"},
			{ID: 5, UserID: 3, ProductID: 2, Quantity: 1, AmountCents: 4900, Status: "REFUNDED"},
			{ID: 6, UserID: 2, ProductID: 4, Quantity: 1, AmountCents: 300, Status: "FAILED"},
			{ID: 7, UserID: 1, ProductID: 3, Quantity: 1, AmountCents: 2000, Status: "PAID"},
			{ID: 8, UserID: 1, ProductID: 4, Quantity: 1, AmountCents: 300, Status: "PAYING"},
		},
		RefundRequests: []RefundRequestRow{
			{OrderID: 5, RefundNo: "order-5-refund", Reason: "out_of_stock", Status: "DONE"},
			{OrderID: 6, RefundNo: "order-6-refund", Reason: "success_after_failed", Status: "DONE"},
		},
		InitialStock: map[int64]int64{1: 100, 2: 10, 3: 50, 4: 500, 5: 1000},
		Stock:        map[int64]int64{1: 99, 2: 10, 3: 49, 4: 500, 5: 1000},
		Ledger: []LedgerRow{
			{UserID: 1, BizID: "order-paid:1", Delta: 12},
			{UserID: 2, BizID: "order-paid:2", Delta: 25},
			{UserID: 2, BizID: "order-refunded:2", Delta: -25},
			{UserID: 1, BizID: "order-paid:7", Delta: 20},
			{UserID: 1, BizID: "redeem:abc", Delta: -10},
		},
		Balances: map[int64]int64{1: 22, 2: 0},
		Outbox: []OutboxRow{
			{ID: 1, RoutingKey: "order.paid", OrderID: 1, Published: true},
			{ID: 2, RoutingKey: "order.paid", OrderID: 2, Published: true},
			{ID: 3, RoutingKey: "order.refunded", OrderID: 2, Published: true},
			{ID: 4, RoutingKey: "order.paid", OrderID: 7, Published: true},
		},
		Queues:   []QueueDepth{{Name: "q", Ready: 0}, {Name: "q.dlq", Ready: 0}},
		Answered: map[int64]string{1: "pay_1", 2: "pay_2", 4: "", 8: "pay_8"},
	}
}

func TestCheckPassesAConvergedShop(t *testing.T) {
	if vs := Check(converged()); len(vs) != 0 {
		t.Fatalf("want no violation, got %d:\n%s", len(vs), list(vs))
	}
}

func list(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(v.String() + "\n")
	}
	return b.String()
}

// Each case breaks one thing in a converged snapshot and names the check and subject that must see it.
func TestCheckFindsEachDivergence(t *testing.T) {
	lease := time.Now().Add(time.Second)
	cases := []struct {
		name    string
		mutate  func(s *Snapshot)
		check   string
		subject string
	}{
		{"paid at the platform, pending in the shop", func(s *Snapshot) { s.Orders[0].Status = "PAYING" },
			"status matches platform", "order 1"},
		{"fully refunded by two partials, still PAID", func(s *Snapshot) {
			s.Payments[5].Status, s.Payments[5].RefundedCents = "REFUNDED", 2000
		}, "status matches platform", "order 7"},
		{"partial refund made the shop refund the order", func(s *Snapshot) { s.Orders[6].Status = "REFUNDED" },
			"status matches platform", "order 7"},
		{"declined at the platform, PAID in the shop", func(s *Snapshot) { s.Orders[2].Status = "PAID" },
			"status matches platform", "order 3"},
		{"no payment, PAYING", func(s *Snapshot) { s.Orders[3].Status = "PAYING" },
			"status matches platform", "order 4"},
		{"out of stock never refunded", func(s *Snapshot) {
			s.Orders[4].Status = "REFUND_REQUIRED"
			s.Payments[3].Status, s.Payments[3].RefundedCents = "SUCCESS", 0
		}, "status matches platform", "order 5"},
		{"FAILED and refunded without a success_after request", func(s *Snapshot) { s.RefundRequests = s.RefundRequests[:1] },
			"status matches platform", "order 6"},
		{"two payments for one order", func(s *Snapshot) {
			s.Payments = append(s.Payments, Payment{ID: "pay_9", MerchantOrderNo: "1", AmountCents: 1250, Status: "SUCCESS"})
		}, "one payment per order", "order 1"},
		{"payment for an unknown order", func(s *Snapshot) {
			s.Payments = append(s.Payments, Payment{ID: "pay_9", MerchantOrderNo: "99", AmountCents: 1, Status: "SUCCESS"})
		}, "payment for a known order", "payment pay_9"},
		{"amount differs", func(s *Snapshot) { s.Payments[0].AmountCents = 1251 }, "amount matches", "order 1"},
		{"stock deducted twice", func(s *Snapshot) { s.Stock[1] = 98 }, "stock", "product 1"},
		{"refunded stock not given back", func(s *Snapshot) { s.Stock[1], s.InitialStock[1] = 97, 100 }, "stock", "product 1"},
		{"stock negative", func(s *Snapshot) { s.Stock[2], s.InitialStock[2] = -1, -1 }, "stock not negative", "product 2"},
		{"PAID without points", func(s *Snapshot) { s.Ledger = s.Ledger[1:]; s.Balances[1] = 10 },
			"points credited", "order 1"},
		{"PAID with the wrong points", func(s *Snapshot) { s.Ledger[0].Delta = 13; s.Balances[1] = 23 },
			"points credited", "order 1"},
		{"points to the wrong user", func(s *Snapshot) {
			s.Ledger[0].UserID = 3
			s.Balances[1], s.Balances[3] = 10, 12
		}, "points credited", "order 1"},
		{"PAID but reversed", func(s *Snapshot) {
			s.Ledger = append(s.Ledger, LedgerRow{UserID: 1, BizID: "order-refunded:7", Delta: -20})
			s.Balances[1] = 2
		}, "points not reversed", "order 7"},
		{"refunded after paid, not reversed", func(s *Snapshot) { s.Ledger = append(s.Ledger[:2], s.Ledger[3:]...); s.Balances[2] = 25 },
			"points reversed", "order 2"},
		{"reversed twice as much", func(s *Snapshot) { s.Ledger[2].Delta = -50; s.Balances[2] = -25 },
			"points reversed", "order 2"},
		{"refunded after paid without an order.refunded event", func(s *Snapshot) { s.Outbox = append(s.Outbox[:2], s.Outbox[3:]...) },
			"order.refunded event", "order 2"},
		{"FAILED with points", func(s *Snapshot) {
			s.Ledger = append(s.Ledger, LedgerRow{UserID: 1, BizID: "order-paid:3", Delta: 10})
			s.Balances[1] = 32
		}, "no points", "order 3"},
		{"out-of-stock refund with points", func(s *Snapshot) {
			s.Ledger = append(s.Ledger, LedgerRow{UserID: 3, BizID: "order-paid:5", Delta: 49})
			s.Balances[3] = 49
		}, "no points", "order 5"},
		{"ledger row for no order", func(s *Snapshot) {
			s.Ledger = append(s.Ledger, LedgerRow{UserID: 3, BizID: "order-paid:42", Delta: 1})
			s.Balances[3] = 1
		}, "ledger rows belong to orders", "user 3"},
		{"balance differs from ledger", func(s *Snapshot) { s.Balances[1] = 23 }, "balance = sum of ledger", "user 1"},
		{"balance without ledger", func(s *Snapshot) { s.Balances[3] = 5 }, "balance = sum of ledger", "user 3"},
		{"outbox row unpublished", func(s *Snapshot) { s.Outbox[0].Published = false }, "outbox published", "outbox 1"},
		{"two order.paid events", func(s *Snapshot) {
			s.Outbox = append(s.Outbox, OutboxRow{ID: 9, RoutingKey: "order.paid", OrderID: 1, Published: true})
		}, "one order.paid event", "order 1"},
		{"two order.refunded events", func(s *Snapshot) {
			s.Outbox = append(s.Outbox, OutboxRow{ID: 9, RoutingKey: "order.refunded", OrderID: 2, Published: true})
		}, "one order.refunded event", "order 2"},
		{"order.paid for a FAILED order", func(s *Snapshot) {
			s.Outbox = append(s.Outbox, OutboxRow{ID: 9, RoutingKey: "order.paid", OrderID: 3, Published: true})
		}, "order.paid only for paid orders", "order 3"},
		{"order.refunded for a PAID order", func(s *Snapshot) {
			s.Outbox = append(s.Outbox, OutboxRow{ID: 9, RoutingKey: "order.refunded", OrderID: 7, Published: true})
		}, "order.refunded only for refunded orders", "order 7"},
		{"pay record PROCESSING", func(s *Snapshot) {
			s.OpenKeys = []KeyRow{{ID: 4, UserID: 1, Key: "k", State: "PROCESSING", Path: "/v1/orders/:id/pay", LockedUntil: &lease}}
		}, "no open idempotency key", "key 4"},
		{"pay record FAILED_RETRYABLE", func(s *Snapshot) {
			s.OpenKeys = []KeyRow{{ID: 5, UserID: 1, Key: "k", State: "FAILED_RETRYABLE"}}
		}, "no open idempotency key", "key 5"},
		{"queue not drained", func(s *Snapshot) { s.Queues[0].Ready = 3 }, "queues empty", "queue q"},
		{"dead letters", func(s *Snapshot) { s.Queues[1].Ready = 1 }, "queues empty", "queue q.dlq"},
		{"an answered order is missing", func(s *Snapshot) { s.Answered[42] = "" }, "answered orders exist", "order 42"},
		{"an answered payment is missing", func(s *Snapshot) { s.Answered[4] = "pay_404" }, "answered payments exist", "order 4"},
		{"an answered payment is another order's", func(s *Snapshot) { s.Answered[4] = "pay_1" }, "answered payments exist", "order 4"},
		{"broker unreachable", func(s *Snapshot) { s.QueueErr = "dial" }, "queues empty", "broker"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := converged()
			c.mutate(&s)
			vs := Check(s)
			for _, v := range vs {
				if v.Check == c.check && v.Subject == c.subject {
					return
				}
			}
			t.Fatalf("want %q on %q, got:\n%s", c.check, c.subject, list(vs))
		})
	}
}

func TestParseFaults(t *testing.T) {
	for in, ok := range map[string]bool{"process": true, "none": true, " Process ": true, "infra": true, "ALL": true, "x": false} {
		_, err := ParseFaults(in)
		if (err == nil) != ok {
			t.Errorf("ParseFaults(%q) = %v", in, err)
		}
	}
}

// The infra plan: every kind once per started minute, within 5%..80% of the run, seeded.
func TestInfraPlan(t *testing.T) {
	for _, d := range []time.Duration{30 * time.Second, time.Minute, 150 * time.Second} {
		plan := (infraFaults{}).Plan(newRNG(7), d)
		rounds := max(1, int(d/time.Minute))
		seen := map[string]int{}
		for i, f := range plan {
			seen[f.Kind]++
			if f.At < d/20 || f.At > d*80/100 {
				t.Errorf("%s: %s at %s, outside 5%%..80%%", d, f.Kind, f.At)
			}
			if i > 0 && f.At < plan[i-1].At {
				t.Errorf("%s: plan not sorted", d)
			}
			restart := f.Kind == RabbitRestart || f.Kind == RedisRestart || f.Kind == PostgresRestart || f.Kind == RabbitAlarm
			if restart && (f.Pause < time.Second || f.Pause > 4*time.Second) || !restart && f.Pause != 0 {
				t.Errorf("%s: %s pause %s", d, f.Kind, f.Pause)
			}
		}
		for _, k := range InfraKinds {
			if seen[k] != rounds {
				t.Errorf("%s: %s %d times, want %d", d, k, seen[k], rounds)
			}
		}
	}
	a, b := (infraFaults{}).Plan(newRNG(7), time.Minute), (infraFaults{}).Plan(newRNG(7), time.Minute)
	if !slices.EqualFunc(a, b, func(x, y Fault) bool { return x.Kind == y.Kind && x.At == y.At && x.Pause == y.Pause }) {
		t.Error("same seed, different infra plans")
	}
}

// A client answer counts for the window it falls in; the rest is the baseline.
func TestAttribute(t *testing.T) {
	s := time.Second
	faults := []Fault{{Kind: RedisRestart, Recovery: &Recovery{windowStart: 10 * s, healed: 12 * s, windowEnd: 14 * s}},
		{Kind: KillOrders, NotInjected: "x"}}
	tl := []answerAt{
		{at: 5 * s, route: "create", key: "503 unavailable"},
		{at: 11 * s, route: "create", key: "201", ok: true},
		{at: 11 * s, route: "pay", key: "conn"},
		{at: 13 * s, route: "pay", key: "201", ok: true}, // after the heal: not "served while broken"
		{at: 15 * s, route: "pay", key: "conn"},
		{at: 70 * s, route: "pay", key: "conn"}, // after the run
	}
	out, after, outS := attribute(faults, tl, 60*s)
	r := faults[0].Recovery
	if r.Errors["conn"] != 1 || len(r.Errors) != 1 || r.Served["create"] != 1 || len(r.Served) != 1 {
		t.Errorf("window: errors %v served %v", r.Errors, r.Served)
	}
	if out["503 unavailable"] != 1 || out["conn"] != 1 || len(out) != 2 || outS != 56 {
		t.Errorf("outside: %v over %gs", out, outS)
	}
	if after["conn"] != 1 || len(after) != 1 {
		t.Errorf("after the run: %v", after)
	}
}

func TestParseSeed(t *testing.T) {
	if s, random, err := ParseSeed("18446744073709551615"); err != nil || random || s != 1<<64-1 {
		t.Errorf("max: %d %v %v", s, random, err)
	}
	if _, random, err := ParseSeed(""); err != nil || !random {
		t.Errorf("empty: %v %v", random, err)
	}
	if _, _, err := ParseSeed("-1"); err == nil {
		t.Error("-1 accepted")
	}
}

// The plan of a run is a function of the seed alone.
func TestPlanIsSeeded(t *testing.T) {
	plan := func(seed uint64) string {
		r := newRNG(seed)
		var b strings.Builder
		for _, s := range planChaos(r, time.Minute) {
			b.WriteString(s.at.String() + " " + s.s.String() + ";")
		}
		for _, f := range (processFaults{}).Plan(r, time.Minute) {
			b.WriteString(f.Kind + f.At.String() + f.Pause.String() + ";")
		}
		c := derive(r)
		b.WriteString(time.Duration(c.Int64()).String())
		return b.String()
	}
	if a, b := plan(1), plan(1); a != b {
		t.Fatal("same seed, different plans")
	}
	if plan(1) == plan(2) {
		t.Fatal("different seeds, same plan")
	}
	for _, f := range (processFaults{}).Plan(newRNG(3), time.Minute) {
		if f.At < 3*time.Second || f.At > 51*time.Second || f.Pause < 200*time.Millisecond || f.Pause > 2*time.Second {
			t.Errorf("fault out of bounds: %+v", f)
		}
	}
}

func TestReportFitsInHundredColumns(t *testing.T) {
	r := &Report{Seed: 1, RunID: "soak_1", Faults: "process", Chaos: true, DurationS: 60, Clients: 8,
		ChaosUsed: []ChaosChange{{Settings: drawChaos(newRNG(1))}}, ConvergeLimitS: 180,
		ClientErrors:   map[string]int{"409": 3, "503": 4, "conn": 5},
		ErrorsByCode:   map[string]int{"409 idempotency_key_in_use": 3, "503 payment_outcome_unknown": 2, "503 payment_unavailable": 2, "conn": 5},
		Violations:     []Violation{{Check: "status matches platform", Subject: "order 12345", Detail: strings.Repeat("shop PAID, platform pay_1 REFUNDED ", 5)}},
		ViolationCount: 1,
		Infra: &InfraInfo{Instances: map[string]string{svcPostgres: "127.0.0.1:5 (initdb + pg_ctl start, /tmp/" + strings.Repeat("x", 60) + ")"},
			StartS: map[string]float64{svcPostgres: 2}, Missing: map[string]string{svcRedis: "redis-server not found on PATH: install it", svcRabbit: "x"}},
		Injected: []Fault{{Kind: RabbitRestart, AtS: 20, Detail: "rabbitmqctl -n idemshop_soak_1796080417_2765@localhost stop_app (0.9s), 2.8s pause, start_app (1.8s)",
			Recovery: &Recovery{ReadyS: -1, ProbeOrder: 17, ProbeNote: strings.Repeat("no points ", 10),
				Errors:      map[string]int{"409 idempotency_key_in_use": 6, "409 insufficient_stock": 4, "503 payment_outcome_unknown": 9, "conn": 1},
				OrdersReady: map[string]int{"200 degraded[rabbitmq,redis]": 9, "200 ok": 5, "503 unavailable[postgres]": 3}}},
			{Kind: RedisRestart, NotInjected: strings.Repeat("no private redis ", 8)}}}
	var b strings.Builder
	r.Print(&b)
	for _, l := range strings.Split(b.String(), "\n") {
		if len([]rune(l)) > 100 {
			t.Errorf("line of %d columns: %s", len([]rune(l)), l)
		}
	}
}

// The shop's and the platform's totals include the recovery probes' orders, so the orders line says how
// many there were: the two figures add up to the totals beside them.
func TestReportCountsTheProbesOrders(t *testing.T) {
	r := &Report{Seed: 1, RunID: "soak_1", DurationS: 60, OrdersCreated: 472, ProbeOrders: 4,
		OrderStatuses: map[string]int{"FAILED": 38, "PAID": 366, "REFUNDED": 72}}
	var b strings.Builder
	r.Print(&b)
	if want := "472 created (+4 by the recovery probes); shop: FAILED 38"; !strings.Contains(b.String(), want) {
		t.Errorf("report without %q:\n%s", want, b.String())
	}

	r.ProbeOrders = 0
	b.Reset()
	r.Print(&b)
	if want := "472 created; shop:"; !strings.Contains(b.String(), want) {
		t.Errorf("report without %q:\n%s", want, b.String())
	}
}

// The faults line says how many faults were planned and how many fired, the ones the run ended before
// counted among the planned: "every planned fault fired" is read, not inferred.
func TestReportSaysPlannedAndFiredFaults(t *testing.T) {
	r := &Report{Injected: []Fault{{Kind: KillOrders, AtS: 9.9, PauseS: 1.3}, {Kind: KillPoints, AtS: 20, PauseS: 1}},
		ByKind: map[string]int{KillOrders: 1, KillPoints: 1}, NotFired: []Fault{{Kind: KillBoth, AtS: 55}}}
	var b strings.Builder
	r.Print(&b)
	if want := "faults        3 planned, 2 fired; kill-orders 1, kill-points-consumer 1: kill-orders@9.9s+1.3s"; !strings.Contains(b.String(), want) {
		t.Errorf("report without %q:\n%s", want, b.String())
	}
}

// A run's ERROR lines and ALERTs are counted by service from its logs, before a passing run's logs are
// deleted, and the report prints them: a WARN quoting "level=ERROR" and the soak's own header lines are
// not counted, a missing log is left out.
func TestLogLinesAreCountedAndReported(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("orders.log",
		"===== soak: start #1 of orders at 2026-12-07T04:01:23Z =====",
		`time=2026-12-07T04:01:23.432Z level=WARN msg="quoted: level=ERROR alert=refund_drift"`,
		`time=2026-12-07T04:01:31.956Z level=ERROR msg="record payment callback audit row" order_id=68`,
		`time=2026-12-07T04:01:32.000Z level=ERROR msg="ALERT: drift" alert=refund_drift order_id=7`,
		`time=2026-12-07T04:01:33.000Z level=ERROR msg="ALERT: drift" alert=refund_drift order_id=8`,
		`time=2026-12-07T04:01:34.000Z level=ERROR msg="ALERT: gave up" alert=sweeper_gave_up`)
	write("payments-mock.log", `time=2026-12-07T04:01:23.432Z level=INFO msg=listening`)
	got, err := countLogLines(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]LogCount{
		"orders":        {Errors: 4, Alerts: map[string]int{"refund_drift": 2, "sweeper_gave_up": 1}},
		"payments-mock": {Errors: 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("counted %+v, want %+v", got, want)
	}

	r := Report{ServiceLogs: got}
	var b strings.Builder
	r.Print(&b)
	if line := "log lines     orders 4 ERROR, ALERT refund_drift 2, sweeper_gave_up 1; payments-mock 0 ERROR\n"; !strings.Contains(b.String(), line) {
		t.Errorf("the report lacks %q:\n%s", line, b.String())
	}
}
