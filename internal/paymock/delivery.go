package paymock

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"idemshop/internal/paysig"
	"idemshop/internal/platform/retry"
)

// maxAckBody bounds how much of a receiver's answer is read: the ack is a few bytes.
const maxAckBody = 64 << 10

// Extra headers on every callback. Receivers must not rely on them (only the body and X-Pay-Signature
// are the contract); they make the delivery log and a receiver's log easy to match up.
const (
	HeaderEventID    = "X-Pay-Event-Id"
	HeaderDeliveryID = "X-Pay-Delivery-Id"
	HeaderAttempt    = "X-Pay-Attempt"
)

// delivery is one copy of one event, sent until it is acked, refused, or the schedule runs out.
type delivery struct {
	id     string
	copy   int
	event  Event
	body   []byte
	url    string
	source string
	plan   copyPlan
	// hold is an extra wait before the first attempt (delay_success_ms); 0 for most deliveries.
	hold time.Duration
	// released is when the delivery was let go: one instant for every copy of a parallel dispatch.
	released time.Time
}

// dispatch sends ev to pay's notify_url (nothing when it has none): copies <= 0 means the configured
// duplicates, parallel nil the configured mode. Everything chaos decides and every id is fixed here,
// synchronously, so that two runs with the same seed and the same calls log the same deliveries; only
// the sending is in the background. It returns the delivery ids, and false when Close has begun and
// nothing will be sent.
func (p *Platform) dispatch(pay Payment, ev Event, source string, copies int, parallel *bool) ([]string, bool) {
	if pay.NotifyURL == "" {
		// Nobody asked to be told: nothing to send, nothing drawn from the chaos RNG, nothing logged
		// as a delivery. The event still happened; the query API shows it.
		p.logger.Debug("callback not sent: the payment has no notify_url", "event_id", ev.EventID, "payment_id", ev.PaymentID)
		return nil, true
	}
	plan := p.chaos.planDispatch(copies, parallel, len(p.cfg.RetrySchedule)+1)
	body, err := json.Marshal(ev)
	if err != nil {
		// Event has only strings, ints and a time: unreachable unless the type changes.
		p.logger.Error("encode callback", "event_id", ev.EventID, "err", err)
		return nil, false
	}
	// Only a settlement's SUCCESS is held: that is the event a refund can overtake. A replay is an
	// operator's explicit request and goes at once.
	var hold time.Duration
	if source == "settle" && ev.Status == StatusSuccess {
		hold = plan.delaySuccess
	}
	ds := make([]delivery, len(plan.copies))
	ids := make([]string, len(plan.copies))
	for i, cp := range plan.copies {
		ids[i] = p.store.nextID("dlv")
		ds[i] = delivery{id: ids[i], copy: i + 1, event: ev, body: body, url: pay.NotifyURL, source: source, plan: cp, hold: hold}
	}
	var stale *delivery
	if plan.reorder && source == "settle" && ev.Status == StatusSuccess {
		// A platform that retried a failed first charge can deliver that older FAILED event late. Its
		// occurred_at is older than the SUCCESS's: a receiver must not move a PAID order back.
		sev := ev
		sev.EventID, sev.Status, sev.OccurredAt = p.store.nextID("evt"), StatusFailed, pay.CreatedAt
		sbody, err := json.Marshal(sev)
		if err == nil {
			stale = &delivery{id: p.store.nextID("dlv"), copy: 1, event: sev, body: sbody, url: pay.NotifyURL, source: "reorder", plan: plan.stale}
		}
	}
	started := p.goTracked(func() {
		// The stale FAILED goes only after a SUCCESS copy was acked. If every copy was exhausted or
		// rejected, the receiver may never have seen the SUCCESS, and a lone FAILED would then close an
		// order that was in fact paid: that is a platform bug, not chaos a receiver can be asked to survive.
		acked := p.deliverAll(ds, plan.parallel)
		if stale != nil {
			if acked {
				stale.released = p.cfg.Now()
				p.deliver(*stale)
			} else {
				p.logger.Info("stale event not sent: no copy of the SUCCESS was acked",
					"event_id", stale.event.EventID, "payment_id", ev.PaymentID)
			}
		}
	})
	if !started {
		p.logger.Warn("callback not sent: shutting down", "event_id", ev.EventID, "payment_id", ev.PaymentID)
		p.metrics.deliveries.WithLabelValues("abandoned").Add(float64(len(ds)))
	}
	return ids, started
}

// deliverAll sends the copies at once (parallel: the triple-callback incident, copies racing each other
// into the receiver) or one after the other, each copy starting when the previous one has ended. It
// reports whether at least one copy was acked (OutcomeSuccess); an ack that chaos dropped does not count,
// since the platform cannot know the receiver applied it.
func (p *Platform) deliverAll(ds []delivery, parallel bool) bool {
	var acked atomic.Bool
	if !parallel {
		for _, d := range ds {
			d.released = p.cfg.Now()
			if p.deliver(d) {
				acked.Store(true)
			}
		}
		return acked.Load()
	}
	var wg sync.WaitGroup
	released := p.cfg.Now()
	for _, d := range ds {
		d.released = released
		wg.Go(func() {
			if p.deliver(d) {
				acked.Store(true)
			}
		})
	}
	wg.Wait()
	return acked.Load()
}

// deliver runs one delivery through the retry schedule. Attempt 1 waits the delivery's hold plus its
// jitter; attempt k+1 waits RetrySchedule[k-1] after attempt k ended, plus that attempt's jitter. It
// reports whether the receiver acked.
func (p *Platform) deliver(d delivery) bool {
	p.metrics.inFlight.Inc()
	lg := p.logger.With("event_id", d.event.EventID, "payment_id", d.event.PaymentID, "delivery_id", d.id)
	maxAttempts := len(p.cfg.RetrySchedule) + 1
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		wait := d.plan.jitter[attempt-1]
		due := p.cfg.Now()
		if attempt == 1 {
			wait += d.hold
			due = d.released
		} else {
			wait += p.cfg.RetrySchedule[attempt-2]
		}
		due = due.Add(wait)
		if !retry.Sleep(p.waitCtx, wait) {
			lg.Info("callback abandoned: shutting down", "attempt", attempt)
			p.metrics.deliveries.WithLabelValues("abandoned").Inc()
			p.metrics.inFlight.Dec()
			return false
		}
		a := p.attempt(d, attempt)
		a.due = due
		if a.Outcome == OutcomeSuccess && d.plan.ackLost[attempt-1] {
			a.Outcome = OutcomeAckLost
		}
		a.Final = a.Outcome == OutcomeSuccess || a.Outcome == OutcomeRejected || attempt == maxAttempts
		p.metrics.sent.WithLabelValues(a.Outcome).Inc()
		var result string
		switch {
		case a.Outcome == OutcomeSuccess:
			result = "delivered"
		case a.Outcome == OutcomeRejected:
			result = "rejected"
			lg.Warn("callback rejected by receiver; not retrying", "attempt", attempt, "status", a.HTTPStatus)
		case a.Final:
			result = "exhausted"
			lg.Warn("callback retries exhausted", "attempts", attempt, "outcome", a.Outcome, "err", a.Error)
		default:
			lg.Debug("callback attempt", "attempt", attempt, "status", a.HTTPStatus, "outcome", a.Outcome, "err", a.Error)
		}
		if a.Final {
			p.metrics.deliveries.WithLabelValues(result).Inc()
			p.metrics.inFlight.Dec()
		}
		// Counters first, log entry last: whoever sees the final entry also sees the counters.
		p.store.appendAttempt(a)
		if a.Final {
			return a.Outcome == OutcomeSuccess
		}
	}
	return false // unreachable: the last attempt is Final
}

// attempt makes one signed POST and classifies the answer. Each attempt is signed afresh: t is the send
// time, so a receiver's 300 s tolerance holds across a minute of retries.
func (p *Platform) attempt(d delivery, n int) Attempt {
	a := Attempt{
		DeliveryID: d.id, EventID: d.event.EventID, PaymentID: d.event.PaymentID, EventStatus: d.event.Status,
		Source: d.source, Copy: d.copy, Attempt: n, JitterMS: d.plan.jitter[n-1].Milliseconds(),
		At: p.cfg.Now().UTC(), body: d.body,
	}
	start := time.Now()
	defer func() {
		lat := time.Since(start)
		a.LatencyMS = float64(lat.Microseconds()) / 1000
		p.metrics.latency.Observe(lat.Seconds())
	}()
	req, err := http.NewRequestWithContext(p.sendCtx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		a.Outcome, a.Error = OutcomeRejected, "bad notify_url: "+err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "idemshop-payments-mock")
	req.Header.Set(paysig.Header, paysig.Sign(p.cfg.Secret, p.cfg.Now(), d.body))
	req.Header.Set(HeaderEventID, d.event.EventID)
	req.Header.Set(HeaderDeliveryID, d.id)
	req.Header.Set(HeaderAttempt, strconv.Itoa(n))
	resp, err := p.client.Do(req)
	if err != nil {
		a.Outcome, a.Error = OutcomeError, err.Error()
		return a
	}
	defer resp.Body.Close()
	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, maxAckBody))
	a.HTTPStatus = resp.StatusCode
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if readErr == nil && isSuccessAck(raw) {
			a.Outcome = OutcomeSuccess
		} else {
			// A 2xx that does not say "success" might be a proxy's page, not the receiver: retry.
			a.Outcome, a.Error = OutcomeRetry, `2xx without {"result":"success"}`
		}
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusTooManyRequests:
		// The shop answers 404 for an order it does not know yet, so that the platform retries (docs/design.md);
		// 429 asks for a retry by definition. Every other 4xx is a definite refusal.
		a.Outcome = OutcomeRetry
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		a.Outcome = OutcomeRejected
	default:
		a.Outcome = OutcomeRetry
	}
	return a
}

func isSuccessAck(raw []byte) bool {
	var ack struct {
		Result string `json:"result"`
	}
	return json.Unmarshal(raw, &ack) == nil && ack.Result == "success"
}
