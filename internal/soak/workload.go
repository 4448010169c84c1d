package soak

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"idemshop/internal/invariants"
	"idemshop/internal/platform/retry"
)

// Bounds of the clients' loops.
const (
	maxIterations  = 100_000 // orders per client
	maxTries       = 20      // attempts of one request with one Idempotency-Key
	maxBackoff     = 2 * time.Second
	paidWait       = 5 * time.Second // a back-office waits this long for a payment to succeed
	refundTries    = 5
	doublePercent  = 15 // create orders submitted twice at once
	doublePayPct   = 10 // pays submitted twice at once
	refundPercent  = 30 // paid orders the back-office refunds (full, split or partial)
	slowPayPercent = 15 // orders paid 0.2..2 s after they were created (a payer who hesitates)
	flashOneInN    = 12 // the low-stock product is chosen once in this many orders
	thinkTimeMaxMS = 50
)

// product is what the clients may order.
type product struct {
	ID    int64
	Price int64
	Flash bool // the low-stock product: the only one that can run out; never refunded by the back-office
}

// user is a demo user and their bearer token.
type user struct {
	ID    int64
	Name  string
	Token string
}

// workload is the virtual clients and what they saw.
type workload struct {
	ordersURL string
	plat      *platform
	http      *http.Client
	users     []user
	products  []product // products[0] is the flash product when there is one

	mu         sync.Mutex
	created    map[int64]string // order id -> the payment id a pay answered ("" if none)
	errors     map[string]int   // client-visible non-2xx answers by status ("conn" for no answer)
	byCode     map[string]int   // the same by "status code" (e.g. "409 idempotency_key_in_use")
	outcomes   map[string]int   // how each order's life ended for its client
	refunds    map[string]int   // back-office refunds by kind: full, split, partial
	refundNote map[string]int   // refunds the platform refused, by answer
	violations []invariants.Violation
	// t0 and timeline: every answer a client got (2xx included) and when, so that the answers within
	// a fault's window can be counted (recovery.go).
	t0       time.Time
	timeline []answerAt
}

// answerAt is one answer of the timeline: when (since t0), to which route ("create", "pay"), and the
// status and problem code ("conn" for no answer), as in byCode.
type answerAt struct {
	at    time.Duration
	route string
	key   string
	ok    bool
}

func newWorkload(ordersURL string, plat *platform, timeout time.Duration, users []user, products []product) *workload {
	return &workload{ordersURL: ordersURL, plat: plat, http: newHTTPClient(timeout), users: users, products: products, t0: time.Now(),
		created: map[int64]string{}, errors: map[string]int{}, byCode: map[string]int{}, outcomes: map[string]int{},
		refunds: map[string]int{}, refundNote: map[string]int{}}
}

func (w *workload) count(route string, a answer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := time.Since(w.t0)
	if a.err == nil && a.status < 300 {
		w.timeline = append(w.timeline, answerAt{at: at, route: route, key: strconv.Itoa(a.status), ok: true})
		return
	}
	if a.err != nil {
		w.errors["conn"]++
		w.byCode["conn"]++
		w.timeline = append(w.timeline, answerAt{at: at, route: route, key: "conn"})
		return
	}
	s := strconv.Itoa(a.status)
	w.errors[s]++
	if c := a.code(); c != "" {
		s += " " + c
	}
	w.byCode[s]++
	w.timeline = append(w.timeline, answerAt{at: at, route: route, key: s})
}

func (w *workload) outcome(name string) {
	w.mu.Lock()
	w.outcomes[name]++
	w.mu.Unlock()
}

func (w *workload) violation(check, subject, format string, args ...any) {
	w.mu.Lock()
	w.violations = append(w.violations, invariants.Violation{Check: check, Subject: subject, Detail: fmt.Sprintf(format, args...)})
	w.mu.Unlock()
}

// client is one virtual client with its own RNG stream.
type client struct {
	id  int
	w   *workload
	rng *mrand.Rand
	// end: no new order after it; hardEnd: no retry after it.
	end, hardEnd time.Time
}

func (c *client) run(ctx context.Context) {
	for n := 0; n < maxIterations && time.Now().Before(c.end) && ctx.Err() == nil; n++ {
		c.order(ctx, n)
		retry.Sleep(ctx, time.Duration(c.rng.IntN(thinkTimeMaxMS+1))*time.Millisecond)
	}
}

// order is one order's life as a client and a back-office see it: create (maybe twice at once), pay
// (maybe twice at once) retrying with the same key, then maybe refund at the platform.
func (c *client) order(ctx context.Context, n int) {
	// Every draw happens here, up front and in a fixed number, so that the stream does not depend on
	// the answers.
	u := c.w.users[c.rng.IntN(len(c.w.users))]
	p := c.pickProduct()
	qty := 1 + c.rng.IntN(3)
	doubleCreate := c.rng.IntN(100) < doublePercent
	doublePay := c.rng.IntN(100) < doublePayPct
	refund := c.rng.IntN(100) < refundPercent
	refundKind := []string{"full", "split", "partial"}[c.rng.IntN(3)]
	split := c.rng.Float64()
	refundGap := time.Duration(c.rng.IntN(301)) * time.Millisecond
	slowPay := c.rng.IntN(100) < slowPayPercent
	payDelay := between(c.rng, 200*time.Millisecond, 2*time.Second)
	backoffSeed := c.rng.Uint64()
	bo := mrand.New(mrand.NewPCG(backoffSeed, pcgStream))

	auth := "Bearer " + u.Token
	createKey := fmt.Sprintf("soak-c%d-%d-create", c.id, n)
	body := fmt.Appendf(nil, `{"product_id":%d,"quantity":%d}`, p.ID, qty)
	ids := c.twice(doubleCreate, func() result {
		id, res := c.create(ctx, auth, createKey, body, bo)
		return result{id: id, result: res}
	})
	id, outcome := ids[0].id, ids[0].result
	for _, r := range ids[1:] {
		if r.id != 0 && id != 0 && r.id != id {
			c.w.violation("create once per key", "key "+createKey, "a double submit created orders %d and %d", id, r.id)
		}
		if id == 0 {
			id, outcome = r.id, r.result
		}
	}
	if id == 0 {
		c.w.outcome("create " + outcome)
		return
	}
	c.w.mu.Lock()
	c.w.created[id] = ""
	c.w.mu.Unlock()

	// A hesitating payer widens the window between the stock check at create and the decrement at
	// payment: that is how an order of the low-stock product ends up REFUND_REQUIRED.
	if slowPay {
		retry.Sleep(ctx, payDelay)
	}
	payKey := fmt.Sprintf("soak-c%d-%d-pay", c.id, n)
	pays := c.twice(doublePay, func() result {
		pid, res := c.pay(ctx, auth, id, payKey, bo)
		return result{pid: pid, result: res}
	})
	var pid string
	for _, r := range pays {
		if r.pid != "" && pid != "" && r.pid != pid {
			c.w.violation("one payment per order", fmt.Sprintf("order %d", id),
				"a double pay with key %s answered payments %s and %s", payKey, pid, r.pid)
		}
		if pid == "" {
			pid = r.pid
		}
	}
	c.w.outcome("pay " + pays[0].result)
	if pid != "" {
		c.w.mu.Lock()
		c.w.created[id] = pid
		c.w.mu.Unlock()
	}
	if pid == "" || !refund || p.Flash {
		return
	}
	c.backOfficeRefund(ctx, id, pid, refundKind, split, refundGap)
}

// result is what one request (with its retries) came to.
type result struct {
	id     int64  // the order created
	pid    string // the payment a pay answered
	result string // a short word for the report
}

// twice runs fn once, or twice at the same moment when double is set.
func (c *client) twice(double bool, fn func() result) []result {
	if !double {
		return []result{fn()}
	}
	out := make([]result, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range out {
		wg.Go(func() {
			<-start
			out[i] = fn()
		})
	}
	close(start)
	wg.Wait()
	return out
}

func (c *client) pickProduct() product {
	ps := c.w.products
	if ps[0].Flash {
		if len(ps) == 1 || c.rng.IntN(flashOneInN) == 0 {
			return ps[0]
		}
		return ps[1+c.rng.IntN(len(ps)-1)]
	}
	return ps[c.rng.IntN(len(ps))]
}

// wait sleeps before the next try: the answer's Retry-After (capped) or an exponential backoff with
// jitter, whichever is longer. It reports false when the client should stop retrying.
func (c *client) wait(ctx context.Context, try int, a answer, bo *mrand.Rand) bool {
	d := min(50*time.Millisecond<<min(try, 6), maxBackoff)
	d = d/2 + time.Duration(bo.Int64N(int64(d/2)+1))
	d = max(d, a.retryAfter(maxBackoff))
	if try+1 >= maxTries || time.Now().Add(d).After(c.hardEnd) || ctx.Err() != nil {
		return false
	}
	retry.Sleep(ctx, d)
	return ctx.Err() == nil
}

// retryable is what a real client retries with the same key: no answer, 409 in flight, 429, 5xx.
func retryable(a answer) bool {
	return a.err != nil || a.status == http.StatusTooManyRequests || a.status >= 500 ||
		(a.status == http.StatusConflict && a.code() == "idempotency_key_in_use")
}

// create posts the order until it gets an answer it does not retry. It returns the order id (0 if
// none) and a short result.
func (c *client) create(ctx context.Context, auth, key string, body []byte, bo *mrand.Rand) (int64, string) {
	for try := 0; ; try++ {
		a := do(ctx, c.w.http, http.MethodPost, c.w.ordersURL+"/v1/orders", body, "Authorization", auth, "Idempotency-Key", key)
		c.w.count("create", a)
		switch {
		case a.err == nil && a.status == http.StatusCreated:
			var o struct {
				ID int64 `json:"id"`
			}
			if err := json.Unmarshal(a.body, &o); err != nil || o.ID == 0 {
				c.w.violation("create answer", "key "+key, "201 without an order id: %.200s", a.body)
				return 0, "garbled"
			}
			return o.ID, "created"
		case a.err == nil && a.status == http.StatusConflict && a.code() == "insufficient_stock":
			return 0, "out of stock"
		case retryable(a):
			if !c.wait(ctx, try, a, bo) {
				return 0, "gave up"
			}
		default:
			c.w.violation("create answer", "key "+key, "unexpected %s", a.brief())
			return 0, fmt.Sprintf("HTTP %d", a.status)
		}
	}
}

// pay pays the order with one key until it gets an answer it does not retry. It returns the payment id
// of a 201 and a short result.
func (c *client) pay(ctx context.Context, auth string, order int64, key string, bo *mrand.Rand) (string, string) {
	url := fmt.Sprintf("%s/v1/orders/%d/pay", c.w.ordersURL, order)
	subject := fmt.Sprintf("order %d", order)
	for try := 0; ; try++ {
		a := do(ctx, c.w.http, http.MethodPost, url, nil, "Authorization", auth, "Idempotency-Key", key)
		c.w.count("pay", a)
		switch {
		case a.err == nil && a.status == http.StatusCreated:
			var r struct {
				OrderID   int64  `json:"order_id"`
				PaymentID string `json:"payment_id"`
			}
			if err := json.Unmarshal(a.body, &r); err != nil || r.PaymentID == "" || r.OrderID != order {
				c.w.violation("pay answer", subject, "201 with a garbled body: %.200s", a.body)
				return "", "garbled"
			}
			return r.PaymentID, "created"
		case a.err == nil && a.status == http.StatusUnprocessableEntity && a.code() == "payment_refused":
			return "", "refused"
		case a.err == nil && a.status == http.StatusConflict && a.code() == "order_not_payable":
			return "", "not payable"
		case retryable(a):
			if !c.wait(ctx, try, a, bo) {
				return "", "gave up"
			}
		default:
			c.w.violation("pay answer", subject, "key %s: unexpected %s", key, a.brief())
			return "", fmt.Sprintf("HTTP %d", a.status)
		}
	}
}

// backOfficeRefund refunds a payment at the platform directly, the way a back-office would, as soon
// as the platform says it succeeded (the shop may not know yet: with delay_success_ms chaos the
// refund's callback can overtake the success's). kind: one full refund; two partial refunds that add
// up to the amount; or one partial refund (the order must then stay PAID).
func (c *client) backOfficeRefund(ctx context.Context, order int64, paymentID, kind string, split float64, gap time.Duration) {
	deadline := time.Now().Add(paidWait)
	if c.hardEnd.Before(deadline) {
		deadline = c.hardEnd
	}
	var pay Payment
	for i := 0; i < 1000 && time.Now().Before(deadline); i++ {
		var a answer
		pay, a = c.w.plat.payment(ctx, paymentID)
		if a.err == nil && a.status == http.StatusOK && pay.Status != "PENDING" {
			break
		}
		retry.Sleep(ctx, 50*time.Millisecond)
	}
	if pay.Status != "SUCCESS" || pay.AmountCents < 2 {
		return
	}
	part := 1 + int64(split*float64(pay.AmountCents-1)) // 1..amount-1
	part = min(part, pay.AmountCents-1)
	no := func(s string) string { return fmt.Sprintf("soak-%d-%s", order, s) }
	var ok bool
	switch kind {
	case "full":
		ok = c.refund(ctx, paymentID, no("full"), pay.AmountCents)
	case "split":
		if ok = c.refund(ctx, paymentID, no("a"), part); ok {
			retry.Sleep(ctx, gap)
			if !c.refund(ctx, paymentID, no("b"), pay.AmountCents-part) {
				kind = "split, second half refused"
			}
		}
	case "partial":
		ok = c.refund(ctx, paymentID, no("p"), part)
	}
	if ok {
		c.w.mu.Lock()
		c.w.refunds[kind]++
		c.w.mu.Unlock()
	}
}

// refund issues one refund, retrying (same refund_no) when there is no answer.
func (c *client) refund(ctx context.Context, paymentID, refundNo string, amount int64) bool {
	for try := range refundTries {
		a := c.w.plat.refund(ctx, paymentID, refundNo, amount)
		if a.err == nil && (a.status == http.StatusCreated || a.status == http.StatusOK) {
			return true
		}
		if a.err == nil && a.status < 500 {
			c.w.mu.Lock()
			c.w.refundNote[fmt.Sprintf("%d %s", a.status, a.code())]++
			c.w.mu.Unlock()
			return false
		}
		retry.Sleep(ctx, time.Duration(100*(try+1))*time.Millisecond)
	}
	return false
}
