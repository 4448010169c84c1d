package paymock

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/replay"
)

// exportReplay writes attempts as a replay recording (internal/replay, docs/lab.md "Replays"), so that a
// trainer can record a run here and send the same traffic to a shop again with `loadtest replay`. Each
// attempt is one line with the exact body that was sent, in the order the attempts were due; at_ms counts
// from the first, and parallel copies that were due together share it, so a replay sends them at once,
// behind a barrier, as the platform did.
// The header gives each order's amount from the payment (a REFUNDED body carries the refund's); the
// quantity is the shop's to know, so the replay defaults it to 1.
func (p *Platform) exportReplay(c echo.Context, attempts []Attempt) error {
	slices.SortStableFunc(attempts, func(a, b Attempt) int { return a.due.Compare(b.due) })
	h := replay.Header{Format: replay.Format, Title: "payments-mock delivery log",
		Description: fmt.Sprintf("%d callback attempts, exported %s", len(attempts),
			p.cfg.Now().UTC().Format(time.RFC3339)),
		Orders: map[string]replay.OrderSpec{}}
	dues := make([]time.Time, len(attempts))
	for i, a := range attempts {
		dues[i] = a.due
	}
	ats := sendingTimes(dues)
	ds := make([]replay.Delivery, 0, len(attempts))
	for i, a := range attempts {
		at := ats[i]
		if pay, err := p.store.payment(a.PaymentID); err == nil {
			h.Orders[pay.MerchantOrderNo] = replay.OrderSpec{AmountCents: pay.AmountCents}
		}
		answer := a.Outcome
		if a.HTTPStatus != 0 {
			answer = strconv.Itoa(a.HTTPStatus) + " " + answer
		}
		ds = append(ds, replay.Delivery{
			AtMS: at,
			Headers: map[string]string{"Content-Type": "application/json", HeaderEventID: a.EventID,
				HeaderDeliveryID: a.DeliveryID, HeaderAttempt: strconv.Itoa(a.Attempt)},
			Body: a.body,
			Note: fmt.Sprintf("%s %s, copy %d, attempt %d: %s", a.Source, a.EventStatus, a.Copy, a.Attempt, answer),
		})
	}
	c.Response().Header().Set(echo.HeaderContentType, "application/x-ndjson")
	c.Response().WriteHeader(http.StatusOK)
	return replay.Write(c.Response(), h, ds)
}

// sendingTimes turns due times, sorted, into the recording's at_ms: milliseconds since the first, never
// decreasing (the replay format requires sending order). Lines share at_ms exactly when their attempts
// were due together. Two that were not, but fall in the same millisecond (a sequential copy sent as
// soon as the one before ended), are kept apart by a millisecond, or the replay would send them at
// once; an attempt due together with one that was moved moves with it.
func sendingTimes(dues []time.Time) []int64 {
	ats := make([]int64, len(dues))
	for i, due := range dues {
		if i == 0 {
			continue
		}
		prev := ats[i-1]
		switch at := due.Sub(dues[0]).Milliseconds(); {
		case due.Equal(dues[i-1]):
			ats[i] = prev
		case at <= prev:
			ats[i] = prev + 1
		default:
			ats[i] = at
		}
	}
	return ats
}
