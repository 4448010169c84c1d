package paymock

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/problem"
)

// Input limits. They keep the in-memory store and the delivery log from being filled by one request.
const (
	maxRefLen       = 64   // merchant_order_no, refund_no, payment_id
	maxNotifyURLLen = 2048 // notify_url
	maxAmountCents  = 100_000_000_000
)

// Register mounts the platform API and the admin routes on e. e should come from httpserver.New, whose
// error handler renders the *problem.Error values the handlers return.
func (p *Platform) Register(e *echo.Echo) {
	v1 := e.Group("/v1")
	v1.POST("/payments", p.createPayment)
	v1.GET("/payments", p.findPayments)
	v1.GET("/payments/:id", p.getPayment)
	v1.POST("/payments/:id/approve", p.approvePayment)
	v1.POST("/payments/:id/decline", p.declinePayment)
	v1.POST("/refunds", p.createRefund)

	admin := e.Group("/admin", p.adminOnly)
	admin.GET("/chaos", p.getChaos)
	admin.PUT("/chaos", p.putChaos)
	admin.GET("/payments", p.records)
	admin.GET("/creates", p.creates)
	admin.POST("/payments/:id/replay", p.replay)
	admin.GET("/deliveries", p.deliveries)
}

type createPaymentRequest struct {
	MerchantOrderNo string `json:"merchant_order_no"`
	AmountCents     int64  `json:"amount_cents"`
	Currency        string `json:"currency"`
	NotifyURL       string `json:"notify_url"`
}

func (r createPaymentRequest) validate() error {
	if err := validRef("merchant_order_no", r.MerchantOrderNo); err != nil {
		return err
	}
	if err := validAmount(r.AmountCents); err != nil {
		return err
	}
	if !validCurrency(r.Currency) {
		return invalid("currency must be three upper-case letters, e.g. EUR")
	}
	if r.NotifyURL == "" {
		// No notify_url: a payment the merchant follows through the query API alone, and that sends no
		// callbacks (as platforms whose notify_url is optional do). The lab uses it when it sends the
		// callbacks itself (S5), so that the platform does not also retry its own at a route nobody serves.
		return nil
	}
	u, err := url.Parse(r.NotifyURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(r.NotifyURL) > maxNotifyURLLen ||
		!validPort(u.Port()) {
		return invalid(fmt.Sprintf("notify_url must be empty or an absolute http(s) URL of at most %d bytes, its port (if any) 1..65535", maxNotifyURLLen))
	}
	return nil
}

// validPort: url.Parse takes any digits as a port (99999), and every callback to it would fail.
func validPort(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

type refundRequest struct {
	PaymentID   string `json:"payment_id"`
	RefundNo    string `json:"refund_no"`
	AmountCents int64  `json:"amount_cents"`
}

func (r refundRequest) validate() error {
	if err := validRef("payment_id", r.PaymentID); err != nil {
		return err
	}
	if err := validRef("refund_no", r.RefundNo); err != nil {
		return err
	}
	return validAmount(r.AmountCents)
}

type replayRequest struct {
	Times    int   `json:"times"`
	Parallel *bool `json:"parallel"`
}

func invalid(detail string) error {
	return problem.New(problem.KindInvalid, ErrValidation.Code, detail)
}

// validRef accepts 1..64 visible ASCII characters: the references end up in logs and URLs.
func validRef(name, v string) error {
	if v == "" || len(v) > maxRefLen {
		return invalid(fmt.Sprintf("%s is required, 1 to %d characters", name, maxRefLen))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return invalid(fmt.Sprintf("%s must be visible ASCII without spaces", name))
		}
	}
	return nil
}

func validAmount(v int64) error {
	if v <= 0 || v > maxAmountCents {
		return invalid(fmt.Sprintf("amount_cents must be an integer 1..%d (minor units)", int64(maxAmountCents)))
	}
	return nil
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// decode reads the (size-limited) body and decodes it strictly into v.
func decode(c echo.Context, v any) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return fmt.Errorf("read request body: %w", err) // the body limit's 413 survives the wrap
	}
	return problem.DecodeJSON(body, v)
}

// createPayment is POST /v1/payments, idempotent on merchant_order_no. Validation runs before the chaos
// draw, so a malformed request changes nothing, not even the RNG's position. The draw comes before the
// store, because error_rate must fail without committing; so a well-formed create that then conflicts
// (409) has drawn, like any other create.
func (p *Platform) createPayment(c echo.Context) error {
	var req createPaymentRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	p.store.ask(req.MerchantOrderNo)
	fate := p.chaos.createDecision()
	if fate == createFail {
		p.metrics.creates.WithLabelValues("chaos_error").Inc()
		return ErrChaosUnavailable
	}
	pay, created, err := p.store.createPayment(req)
	if err != nil {
		p.metrics.creates.WithLabelValues("conflict").Inc()
		return err
	}
	if created {
		p.scheduleAutoApprove(pay.ID)
	}
	switch fate {
	case createTimeout:
		return p.answerTimeout(c, pay)
	case createReset:
		return p.answerReset(c, pay)
	}
	if !created {
		p.metrics.creates.WithLabelValues("replayed").Inc()
		return c.JSON(http.StatusOK, pay)
	}
	p.metrics.creates.WithLabelValues("created").Inc()
	return c.JSON(http.StatusCreated, pay)
}

// answerTimeout is the create_timeout chaos: the payment is committed, but the caller never learns it.
// The answer is held for CreateTimeoutDelay (or until the caller hangs up, or a shutdown begins), then it is a 504 with a
// plain-text body, the way a gateway in front of a real platform answers, not a problem document.
// A caller whose own timeout is shorter sees that timeout. Either way only the query API tells the truth.
func (p *Platform) answerTimeout(c echo.Context, pay Payment) error {
	p.metrics.creates.WithLabelValues("chaos_timeout").Inc()
	logging.From(c.Request().Context()).Info("chaos: payment committed, answering with a timeout",
		"payment_id", pay.ID, "merchant_order_no", pay.MerchantOrderNo)
	t := time.NewTimer(p.cfg.CreateTimeoutDelay)
	defer t.Stop()
	select {
	case <-c.Request().Context().Done():
	case <-t.C:
	case <-p.holdCtx.Done(): // shutting down (EndHeldAnswers)
	}
	return c.String(http.StatusGatewayTimeout, "upstream request timeout\n")
}

// answerReset is the reset chaos: the payment is committed, then the connection is closed without a
// single byte of answer. Over HTTP/1.1 the caller, whose request was fully sent, reads EOF or a reset:
// it cannot tell whether the platform got the request, which is exactly when it must not charge again
// blindly. Only the query API (or an idempotent retry) tells the truth.
func (p *Platform) answerReset(c echo.Context, pay Payment) error {
	p.metrics.creates.WithLabelValues("chaos_reset").Inc()
	lg := logging.From(c.Request().Context())
	lg.Info("chaos: payment committed, closing the connection without an answer",
		"payment_id", pay.ID, "merchant_order_no", pay.MerchantOrderNo)
	// No status was written; 0 keeps the access log and the request metric from claiming a 200.
	c.Response().Status = 0
	conn, _, err := c.Response().Hijack()
	if err != nil {
		// Not hijackable (HTTP/2, a test recorder): ErrAbortHandler is net/http's own way to drop a
		// response unanswered; it resets the stream or closes the connection.
		lg.Warn("chaos: cannot hijack the connection; aborting the handler instead", "err", err)
		panic(http.ErrAbortHandler)
	}
	if err := conn.Close(); err != nil {
		lg.Debug("chaos: close hijacked connection", "err", err)
	}
	return nil
}

func (p *Platform) getPayment(c echo.Context) error {
	pay, err := p.store.payment(c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, pay)
}

// paymentList is the body of GET /v1/payments: zero or one payment, since merchant_order_no is unique.
// An empty list is a definite "no payment was ever created for this order".
type paymentList struct {
	Payments []Payment `json:"payments"`
}

// oneMerchantOrderNo is the request's one merchant_order_no query parameter, validated. Sent twice, it
// is not one order: the first was answered, and a reader that takes the last would have asked about
// another.
func oneMerchantOrderNo(c echo.Context) (string, error) {
	if n := len(c.QueryParams()["merchant_order_no"]); n > 1 {
		return "", invalid(fmt.Sprintf("merchant_order_no sent %d times: ask about one order", n))
	}
	no := c.QueryParam("merchant_order_no")
	return no, validRef("merchant_order_no", no)
}

func (p *Platform) findPayments(c echo.Context) error {
	no, err := oneMerchantOrderNo(c)
	if err != nil {
		return err
	}
	out := paymentList{Payments: []Payment{}}
	if pay, ok := p.store.paymentByOrderNo(no); ok {
		out.Payments = append(out.Payments, pay)
	}
	return c.JSON(http.StatusOK, out)
}

// approvePayment answers 200 with the payment, which is FAILED when the amount triggers a decline.
func (p *Platform) approvePayment(c echo.Context) error {
	pay, err := p.approve(c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, pay)
}

func (p *Platform) declinePayment(c echo.Context) error {
	pay, err := p.settle(c.Param("id"), StatusFailed)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, pay)
}

// refundResponse is the body of POST /v1/refunds: the refund and the payment after it.
type refundResponse struct {
	Refund  Refund  `json:"refund"`
	Payment Payment `json:"payment"`
}

// createRefund is POST /v1/refunds, idempotent on refund_no: 201 the first time (and a REFUNDED
// callback), 200 with the same refund on a repeat.
func (p *Platform) createRefund(c echo.Context) error {
	var req refundRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	r, created, pay, ev, err := p.store.refund(req)
	if err != nil {
		return err
	}
	if !created {
		return c.JSON(http.StatusOK, refundResponse{Refund: r, Payment: pay})
	}
	p.dispatch(pay, *ev, "refund", 0, nil)
	return c.JSON(http.StatusCreated, refundResponse{Refund: r, Payment: pay})
}

// adminOnly guards /admin. With ADMIN_TOKEN set it wants that bearer token from anyone; without, it
// answers only to a loopback TCP peer. It reads the peer address itself: c.RealIP() would believe an
// X-Forwarded-For header, which any client can write.
func (p *Platform) adminOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if p.cfg.AdminToken != "" {
			// One Authorization line, as orders wants: of two, which one counts depends on the reader.
			if len(c.Request().Header.Values(echo.HeaderAuthorization)) > 1 {
				return ErrAdminTokenRequired
			}
			// The scheme in any case (RFC 9110 §11.1), as orders reads it: "bearer" was refused.
			scheme, got, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
			ok = ok && strings.EqualFold(scheme, "Bearer")
			// Hashing first makes the compare constant-time in the length too.
			g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(p.cfg.AdminToken))
			if !ok || subtle.ConstantTimeCompare(g[:], w[:]) != 1 {
				return ErrAdminTokenRequired
			}
			return next(c)
		}
		host, _, err := net.SplitHostPort(c.Request().RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return ErrAdminLoopbackOnly
		}
		return next(c)
	}
}

func (p *Platform) getChaos(c echo.Context) error {
	return c.JSON(http.StatusOK, p.chaos.settings())
}

// putChaos merges the given fields into the chaos settings (omitted fields keep their value) and
// answers the result. A seed in the body re-seeds the RNG. A field set to null is refused: it read as
// left out (the fields are pointers), so {"parallel":null} answered 200 and changed nothing.
func (p *Platform) putChaos(c echo.Context) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return fmt.Errorf("read request body: %w", err) // the body limit's 413 survives the wrap
	}
	var patch chaosPatch
	if err := problem.DecodeJSON(body, &patch); err != nil {
		return err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return problem.ErrMalformedBody.Wrap(err) // DecodeJSON took it as an object: not reached
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		if string(members[name]) == "null" {
			return problem.ErrMalformedBody.WithDetail(fmt.Sprintf("field %q must not be null: leave it out to keep its value", name))
		}
	}
	next, err := p.chaos.apply(patch)
	if err != nil {
		return err
	}
	logging.From(c.Request().Context()).Info("chaos settings changed", "chaos", fmt.Sprintf("%+v", next), "reseeded", patch.Seed != nil)
	return c.JSON(http.StatusOK, next)
}

// platformRecords is the body of GET /admin/payments: everything the platform holds, as the truth a
// soak run checks the shop against. Both lists are in creation order.
type platformRecords struct {
	Payments []Payment `json:"payments"`
	Refunds  []Refund  `json:"refunds"`
}

// records is GET /admin/payments: every payment (with its status and refunded_cents) and every refund.
// Both lists come from one read of the store, so refunded_cents always matches the refunds listed.
func (p *Platform) records(c echo.Context) error {
	pays, refs := p.store.records()
	return c.JSON(http.StatusOK, platformRecords{Payments: pays, Refunds: refs})
}

// createCount is the body of GET /admin/creates.
type createCount struct {
	MerchantOrderNo string `json:"merchant_order_no"`
	Requests        int64  `json:"requests"`
}

// creates is GET /admin/creates?merchant_order_no=: how many times a merchant asked to create a payment
// for that order. A shop that charges twice on this platform gets one payment back (create is
// idempotent on merchant_order_no), so only this count shows that it asked twice.
func (p *Platform) creates(c echo.Context) error {
	no, err := oneMerchantOrderNo(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, createCount{MerchantOrderNo: no, Requests: p.store.asks(no)})
}

// replayResponse is the body of POST /admin/payments/{id}/replay.
type replayResponse struct {
	PaymentID   string   `json:"payment_id"`
	EventID     string   `json:"event_id"`
	DeliveryIDs []string `json:"delivery_ids"`
}

// replay re-sends the payment's latest event (same event_id, same body) times times: the incident on
// demand. Jitter and ack loss still apply; duplicates and reorder do not, so times is exact.
func (p *Platform) replay(c echo.Context) error {
	var req replayRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Times < 1 || req.Times > MaxDuplicates {
		return invalid(fmt.Sprintf("times must be 1..%d", MaxDuplicates))
	}
	pay, ev, err := p.store.lastEvent(c.Param("id"))
	if err != nil {
		return err
	}
	if pay.NotifyURL == "" {
		return problem.New(problem.KindConflict, "no_notify_url", "the payment was created without a notify_url: it has no callbacks to replay")
	}
	ids, ok := p.dispatch(pay, ev, "replay", req.Times, req.Parallel)
	if !ok {
		return problem.ErrUnavailable
	}
	return c.JSON(http.StatusAccepted, replayResponse{PaymentID: pay.ID, EventID: ev.EventID, DeliveryIDs: ids})
}

// deliveryLog is the body of GET /admin/deliveries.
type deliveryLog struct {
	Deliveries []Attempt `json:"deliveries"`
}

// deliveries is GET /admin/deliveries[?payment_id=&event_id=][&format=json|jsonl]: the attempt log,
// oldest first, as one JSON document, or (jsonl) as a recording `loadtest replay` sends again.
func (p *Platform) deliveries(c echo.Context) error {
	// Each filter once, as for GET /v1/payments: of two, the first won, and a CI job that asked for
	// two payments got the first's attempts, or none (a helper's finding, 2026-12-06).
	for _, q := range []string{"payment_id", "event_id", "format"} {
		if n := len(c.QueryParams()[q]); n > 1 {
			return invalid(fmt.Sprintf("%s sent %d times: give it once", q, n))
		}
	}
	attempts := p.store.attempts(c.QueryParam("payment_id"), c.QueryParam("event_id"))
	switch c.QueryParam("format") {
	case "", "json":
		return c.JSON(http.StatusOK, deliveryLog{Deliveries: attempts})
	case "jsonl":
		return p.exportReplay(c, attempts)
	}
	return invalid("format must be json or jsonl")
}
