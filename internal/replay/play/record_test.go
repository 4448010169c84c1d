package play_test

// How the shipped replays (loadtest/replays/*.jsonl) were made: each is a real run of the whole shop
// in-process (orders in lab mode, payments-mock, points-consumer), with payments-mock's chaos set to the
// failure, recorded by payments-mock's own export (GET /admin/deliveries?format=jsonl). Only the header is
// edited: a title, a description, the unsafe route, and each order's quantity, which the platform never
// knows. Run it again with
//
//	go test ./internal/replay/play -run TestRecordShippedReplays -record ../../../loadtest/replays
//
// and every file is recorded afresh (its ids and timings change, its story does not).

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
	"idemshop/internal/lab/labtest"
	"idemshop/internal/payclient"
	"idemshop/internal/paymock"
	"idemshop/internal/replay"
)

var recordDir = flag.String("record", "", "record the shipped replays into this directory (TestRecordShippedReplays)")

// recorder is one recording run: a shop of its own, one lab user, and the platform's client.
type recorder struct {
	t        *testing.T
	env      *lab.Env
	f        *lab.Fixture
	platform *payclient.Client
	qty      map[string]int // merchant_order_no → quantity
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	env := labtest.NewEnv(t, nil)
	ctx := context.Background()
	f, err := env.NewFixture(ctx, "record")
	require.NoError(t, err)
	platform, err := payclient.New(env.PaymentsURL, 10*time.Second)
	require.NoError(t, err)
	return &recorder{t: t, env: env, f: f, platform: platform, qty: map[string]int{}}
}

// pay creates an order of qty units of product and pays it through the guarded pay flow; the platform
// approves it by itself (auto-approve). It returns the order id and the payment id.
func (r *recorder) pay(product int64, qty int) (int64, string) {
	ctx := context.Background()
	key := fmt.Sprintf("record-%d", time.Now().UnixNano())
	o, resp, err := r.f.CreateOrder(ctx, "/v1/orders", key, product, qty)
	require.NoError(r.t, err)
	require.Equal(r.t, http.StatusCreated, resp.Status, "%s", resp.Body)
	resp, err = r.f.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", o.ID), nil, "Idempotency-Key", key+"-pay")
	require.NoError(r.t, err)
	require.Equal(r.t, http.StatusCreated, resp.Status, "%s", resp.Body)
	var pr struct {
		PaymentID string `json:"payment_id"`
	}
	require.NoError(r.t, resp.JSON(&pr))
	r.qty[fmt.Sprint(o.ID)] = qty
	return o.ID, pr.PaymentID
}

// settled waits until the platform says the payment is no longer PENDING.
func (r *recorder) settled(paymentID string) {
	ok, err := lab.Eventually(context.Background(), time.Minute, func() (bool, error) {
		p, err := r.platform.GetPayment(context.Background(), paymentID)
		return err == nil && p.Status != "PENDING", nil
	})
	require.NoError(r.t, err)
	require.True(r.t, ok, "payment %s settled", paymentID)
}

func (r *recorder) chaos(c map[string]any) {
	require.NoError(r.t, r.env.SetChaos(context.Background(), c))
}

// export waits until n deliveries have ended, then writes the platform's recording of them to name,
// with the header completed.
func (r *recorder) export(n int, name string, h replay.Header) {
	ctx := context.Background()
	ok, err := lab.Eventually(ctx, time.Minute, func() (bool, error) {
		resp, err := r.env.Do(ctx, http.MethodGet, r.env.PaymentsURL+"/admin/deliveries", nil)
		if err != nil {
			return false, err
		}
		var log struct{ Deliveries []paymock.Attempt }
		if err := resp.JSON(&log); err != nil {
			return false, err
		}
		final := 0
		for _, a := range log.Deliveries {
			if a.Final {
				final++
			}
		}
		return final == n, nil
	})
	require.NoError(r.t, err)
	require.True(r.t, ok, "%d deliveries ended", n)
	resp, err := r.env.Do(ctx, http.MethodGet, r.env.PaymentsURL+"/admin/deliveries?format=jsonl", nil)
	require.NoError(r.t, err)
	require.Equal(r.t, http.StatusOK, resp.Status, "%s", resp.Body)
	rec, err := replay.Parse(bytes.NewReader(resp.Body))
	require.NoError(r.t, err)

	h.Format = replay.Format
	h.Orders = rec.Header.Orders
	for ref, spec := range h.Orders {
		spec.Quantity = r.qty[ref]
		h.Orders[ref] = spec
	}
	var buf bytes.Buffer
	require.NoError(r.t, replay.Write(&buf, h, rec.Deliveries))
	_, err = replay.Parse(bytes.NewReader(buf.Bytes())) // what is shipped must parse
	require.NoError(r.t, err)
	require.NoError(r.t, os.WriteFile(filepath.Join(*recordDir, name), buf.Bytes(), 0o644))
	r.t.Logf("wrote %s: %d deliveries", name, len(rec.Deliveries))
}

func TestRecordShippedReplays(t *testing.T) {
	if *recordDir == "" {
		t.Skip("records loadtest/replays: run with -record DIR")
	}
	ctx := context.Background()

	t.Run("incident", func(t *testing.T) {
		r := newRecorder(t)
		product, err := r.f.Product(ctx, 1000, 1250)
		require.NoError(t, err)
		r.chaos(map[string]any{"duplicates": 3, "parallel": true, "seed": 20261129})
		for _, qty := range []int{1, 2, 3, 2} {
			_, pay := r.pay(product, qty)
			r.settled(pay)
		}
		r.export(12, "incident-triple-callback.jsonl", replay.Header{
			Title: "the triple-callback incident: every SUCCESS delivered 3 times at once",
			Description: "Four orders of 12.50 EUR a unit (quantities 1, 2, 3, 2), paid while the platform sent " +
				"each payment-succeeded callback three times in parallel (chaos duplicates=3, parallel=true). " +
				"Guarded: each order PAID once, stock -q, points +x. --unsafe (/lab/unsafe/payments/callback): " +
				"every copy applies, stock -3q, points +3x.",
		})
	})

	t.Run("refund before success", func(t *testing.T) {
		r := newRecorder(t)
		product, err := r.f.Product(ctx, 1000, 1250)
		require.NoError(t, err)
		// Each SUCCESS is held 1.5 s before its first attempt, so the refunds made meanwhile are
		// delivered first (chaos delay_success_ms), as a delayed delivery does.
		r.chaos(map[string]any{"duplicates": 1, "delay_success_ms": 1500, "seed": 20261129})
		_, full := r.pay(product, 2)
		r.settled(full)
		_, _, err = r.platform.Refund(ctx, payclient.RefundRequest{PaymentID: full, RefundNo: "record-full", AmountCents: 2500})
		require.NoError(t, err)
		_, split := r.pay(product, 2)
		r.settled(split)
		for i, amount := range []int64{1000, 1500} {
			_, _, err = r.platform.Refund(ctx, payclient.RefundRequest{PaymentID: split, RefundNo: fmt.Sprintf("record-part-%d", i), AmountCents: amount})
			require.NoError(t, err)
		}
		r.export(5, "refund-before-success.jsonl", replay.Header{
			Title:      "a refund delivered before the SUCCESS it refunds (lab S12)",
			UnsafePath: "/lab/unsafe/s12/payments/callback",
			Description: "Two orders of 25.00 EUR, paid and refunded at the platform at once while each SUCCESS " +
				"callback was held 1.5 s (chaos delay_success_ms): the first in full, the second in two parts " +
				"(10.00 + 15.00). Every REFUNDED arrives before its SUCCESS. Guarded: both orders REFUNDED, " +
				"stock and points back once. --unsafe (/lab/unsafe/s12/payments/callback): the early refunds are " +
				"dropped as stale, the orders end PAID with the stock taken and the points credited.",
		})
	})

	t.Run("decline race", func(t *testing.T) {
		r := newRecorder(t)
		declined, err := r.f.Product(ctx, 1000, 1013) // an amount ending in 13: the platform declines it
		require.NoError(t, err)
		product, err := r.f.Product(ctx, 1000, 1250)
		require.NoError(t, err)
		// Three copies of every event at once, and a stale FAILED after each acked SUCCESS (reorder).
		r.chaos(map[string]any{"duplicates": 3, "parallel": true, "reorder": true, "seed": 20261129})
		_, d := r.pay(declined, 1)
		r.settled(d)
		_, s := r.pay(product, 1)
		r.settled(s)
		r.export(7, "decline-race.jsonl", replay.Header{
			Title: "a decline three times at once, and a stale decline after a success",
			Description: "The first order (10.13 EUR) is declined by the platform a few milliseconds after " +
				"it is created, and its FAILED comes three times at once; replayed, it meets an order the pay " +
				"flow never marked PAYING (TestDeclineThatOvertakesThePayFlowEndsFailed). The second (12.50 " +
				"EUR) succeeds, three copies at once, and then the platform delivers the stale FAILED of an " +
				"earlier attempt (chaos reorder). Guarded: the first FAILED with nothing taken, the second " +
				"PAID once. --unsafe (/lab/unsafe/payments/callback, which knows only SUCCESS): the decline " +
				"is acked and lost, the first order stays PENDING for ever, and the second is paid 3 times.",
		})
	})
}
