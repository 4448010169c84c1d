package lab

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"idemshop/internal/events"
	"idemshop/internal/invariants"
	"idemshop/internal/payclient"
)

// IncidentReport is the JSON of `loadtest incident`.
type IncidentReport struct {
	Orders     int      `json:"orders"`
	Unsafe     bool     `json:"unsafe"`
	Violations []string `json:"violations"`
	Callbacks  struct {
		Received int64 `json:"received"`
		Applied  int64 `json:"applied"`
	} `json:"callbacks"`
	StockDelta  int64   `json:"stock_delta"`
	WantStock   int64   `json:"expected_stock_delta"`
	PointsDelta int64   `json:"points_delta"`
	WantPoints  int64   `json:"expected_points_delta"`
	Seconds     float64 `json:"seconds"`
}

// Incident reproduces the triple-callback incident at scale against the running services: n orders
// are created and paid while payments-mock sends every callback 3 times in parallel. Guarded, orders
// pay through POST /v1/orders/{id}/pay (notify_url = the guarded callback route); unsafe, the payments
// are created at the platform with notify_url = the lab's unguarded callback route. It waits, bounded by
// env.Quiet, until every callback was delivered and every effect settled, then checks the invariants on
// the rows: each order paid once, stock exact, one order.paid event, points credited once.
func Incident(ctx context.Context, env *Env, n int, unsafe bool, progress func(string)) (IncidentReport, error) {
	start := time.Now()
	rep := IncidentReport{Orders: n, Unsafe: unsafe, Violations: []string{}}
	if progress == nil {
		progress = func(string) {}
	}
	f, err := env.NewFixture(ctx, SideName("incident", unsafe))
	if err != nil {
		return rep, err
	}
	defer f.Close(ctx)
	const initial, price = 100000, 1250
	product, err := f.Product(ctx, initial, price)
	if err != nil {
		return rep, err
	}
	chaos := map[string]any{"duplicates": 3, "parallel": true, "seed": env.Seed}
	if err := env.SetChaos(ctx, chaos); err != nil {
		return rep, err
	}
	defer env.CalmChaos(context.WithoutCancel(ctx))
	platform, err := payclient.New(env.PaymentsURL, 10*time.Second)
	if err != nil {
		return rep, err
	}

	ids := make([]int64, n)
	var units, points int64
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	paid := 0
	for i := range n {
		qty := i%3 + 1
		units += int64(qty)
		points += events.PointsFor(price * int64(qty)) // floor per order, as the consumer credits
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			id, err := incidentOrder(ctx, env, f, platform, product, qty, i, unsafe)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			ids[i] = id
			paid++
			progress(fmt.Sprintf("paid %d/%d", paid, n))
		})
	}
	wg.Wait()
	if firstErr != nil {
		return rep, firstErr
	}
	rep.WantStock = -units
	rep.WantPoints = points

	// Quiescence: every copy delivered (3 per order), every event published and consumed.
	settled, err := Eventually(ctx, env.Quiet, func() (bool, error) {
		facts, err := invariants.Load(ctx, env.DB, ids)
		if err != nil {
			return false, err
		}
		var received int64
		done := 0
		for _, fa := range facts {
			received += fa.CallbacksReceived
			if fa.CallbacksReceived >= 3 && (unsafe || (fa.PublishedRows == fa.OutboxRows && fa.LedgerRows >= 1)) {
				done++
			}
		}
		progress(fmt.Sprintf("settled %d/%d orders (%d callbacks)", done, n, received))
		return done == n, nil
	})
	if err != nil {
		return rep, err
	}
	if !settled {
		why := "are payments-mock and points-consumer running?"
		if changed := env.ChaosChangedSince(ctx, chaos); changed != "" {
			why = "payments-mock's chaos changed during the run: " + changed +
				"; another lab run, the /lab page or a PUT /admin/chaos on the same platform: run one at a time per stack"
		}
		rep.Violations = append(rep.Violations, fmt.Sprintf("not settled within %s (%s)", env.Quiet, why))
	}

	facts, err := invariants.Load(ctx, env.DB, ids)
	if err != nil {
		return rep, err
	}
	for _, fa := range facts {
		rep.Callbacks.Received += fa.CallbacksReceived
		rep.Callbacks.Applied += fa.CallbacksApplied
	}
	var vs []invariants.Violation
	vs = append(vs, invariants.PaidOnce(facts, !unsafe)...)
	delta, sv, err := invariants.Stock(ctx, env.DB, product, initial, rep.WantStock)
	if err != nil {
		return rep, err
	}
	rep.StockDelta = delta
	vs = append(vs, sv...)
	if rep.PointsDelta, err = invariants.Balance(ctx, env.DB, f.UserID); err != nil {
		return rep, err
	}
	if rep.PointsDelta != rep.WantPoints {
		vs = append(vs, invariants.Violation{Check: "points credited once", Subject: "lab user",
			Detail: fmt.Sprintf("balance %d, want %d", rep.PointsDelta, rep.WantPoints)})
	}
	// The API must tell the same story as the rows. In id order: the ids were handed out to concurrent
	// creates, and the report (which cuts the list at 10) named other orders in each run.
	for _, id := range slices.Sorted(slices.Values(ids)) {
		var o struct {
			Callbacks struct{ Applied int64 } `json:"callbacks"`
		}
		r, err := f.Do(ctx, http.MethodGet, "/v1/orders/"+strconv.FormatInt(id, 10), nil)
		if err == nil && r.Status == http.StatusOK && r.JSON(&o) == nil && o.Callbacks.Applied != 1 {
			vs = append(vs, invariants.Violation{Check: "API shows one applied callback", Subject: fmt.Sprintf("order %d", id),
				Detail: fmt.Sprintf("applied %d", o.Callbacks.Applied)})
		}
	}
	for _, v := range vs {
		rep.Violations = append(rep.Violations, v.String())
	}
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// incidentOrder creates one order and pays it, the guarded or the unsafe way, and returns its id.
func incidentOrder(ctx context.Context, env *Env, f *Fixture, platform *payclient.Client, product int64, qty, i int, unsafe bool) (int64, error) {
	key := fmt.Sprintf("incident-%d-%d", time.Now().UnixNano(), i)
	o, r, err := f.CreateOrder(ctx, "/v1/orders", key, product, qty)
	if err != nil || r.Status != http.StatusCreated {
		return 0, notCreated("create order", err, r)
	}
	var paymentID string
	if unsafe {
		p, _, err := platform.CreatePayment(ctx, payclient.CreatePaymentRequest{MerchantOrderNo: strconv.FormatInt(o.ID, 10),
			AmountCents: o.AmountCents, Currency: "EUR", NotifyURL: env.OrdersURL + "/lab/unsafe/payments/callback"})
		if err != nil {
			return 0, fmt.Errorf("create payment: %w", err)
		}
		paymentID = p.ID
	} else {
		r, err := f.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", o.ID), nil, "Idempotency-Key", key+"-pay")
		if err != nil || r.Status != http.StatusCreated {
			return 0, fmt.Errorf("pay order %d: %v (HTTP %d %s)", o.ID, err, r.Status, r.Body)
		}
		var pr struct {
			PaymentID string `json:"payment_id"`
		}
		if err := r.JSON(&pr); err != nil {
			return 0, err
		}
		paymentID = pr.PaymentID
	}
	// The payer approves (auto-approve may have done it already: a conflict then is fine).
	if _, err := platform.Approve(ctx, paymentID); err != nil {
		if _, _, refused := payclient.Refused(err); !refused {
			return 0, fmt.Errorf("approve %s: %w", paymentID, err)
		}
	}
	return o.ID, nil
}
