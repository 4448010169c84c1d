package pay

// LAB ONLY — the second charge (lab scenario S7): the pay flow as it is written before the first
// incident. It calls the platform first and records afterwards, keeps no idempotency record, and gives
// the platform a fresh reference per request (the request id), as a client that sends a new request id
// on every call would. When the platform commits the payment but its answer is lost (a timeout, or a
// crash right after the call), nothing on the shop's side remembers it: the order is still PENDING, the
// client retries, the retry carries a new reference, and the platform, idempotent on merchant_order_no,
// sees a new payment and charges again. Mounted only with ORDERS_LAB=true, at
// POST /lab/unsafe/v1/s7/orders/{id}/pay. Compare PayUnsafe with Pay in pay.go: the guard is the record
// claimed before the call (ladder step 2), the sweeper that settles it from the platform's query API
// (step 3), and merchant_order_no = the order id, so the platform itself can tell a retry from a new
// payment.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/idempotency"
	"idemshop/internal/orders"
	"idemshop/internal/payclient"
)

// UnsafeReference is the platform reference PayUnsafe sends: the order id and the request id, so
// every request, retries included, looks like a new payment to the platform.
func UnsafeReference(orderID int64, requestID string) string {
	return strconv.FormatInt(orderID, 10) + "-" + requestID
}

// PayUnsafe is Pay without the idempotency record, the lock and the business reference. requestID is
// the request's X-Request-ID, which becomes part of the platform reference.
func (p *Payer) PayUnsafe(ctx context.Context, userID, orderID int64, requestID string) (idempotency.Answer, error) {
	o, err := p.orders.Get(ctx, userID, orderID)
	if err != nil {
		return idempotency.Answer{}, err
	}
	// The only check: a PENDING order. A payment whose answer was lost left the order PENDING, so the
	// retry passes it.
	if o.Status != orders.StatusPending {
		return idempotency.Answer{}, ErrNotPayable.Wrap(fmt.Errorf("order %d is %s", o.ID, o.Status))
	}
	// RPC first. The reference changes with every request, so the platform's idempotency cannot help.
	ref := UnsafeReference(o.ID, requestID)
	payment, _, err := p.platform.CreatePayment(ctx, payclient.CreatePaymentRequest{
		MerchantOrderNo: ref, AmountCents: o.AmountCents, Currency: o.Currency, NotifyURL: p.cfg.CallbackURL})
	if err != nil {
		// Treated as "nothing happened": nothing is recorded, and the client is told to try again.
		return idempotency.Answer{}, ErrPaymentUnavailable.Wrap(err)
	}
	// Record after, if we get here at all.
	if _, err := p.orders.Transition(ctx, p.db, o.ID, orders.StatusPaying, payment.ID); err != nil {
		return idempotency.Answer{}, err
	}
	body, err := json.Marshal(p.response(o.ID, payment.ID))
	if err != nil {
		return idempotency.Answer{}, err
	}
	return idempotency.Answer{Status: http.StatusCreated, Body: body}, nil
}

// ServeUnsafe is the S7 twin of Handler.pay, for POST /orders/:id/pay in an authenticated group (the
// lab's /lab/unsafe/v1/s7): no Idempotency-Key is read, and the request's X-Request-ID goes to
// PayUnsafe. Lab mode only; the assembly mounts it.
func ServeUnsafe(p *Payer) echo.HandlerFunc {
	return func(c echo.Context) error {
		u, err := auth.MustUser(c)
		if err != nil {
			return err
		}
		id, err := strconv.ParseInt(c.Param("id"), 10, 64)
		if err != nil || id <= 0 {
			return orders.ErrOrderNotFound
		}
		ans, err := p.PayUnsafe(c.Request().Context(), u.ID, id, c.Response().Header().Get(echo.HeaderXRequestID))
		if err != nil {
			return err
		}
		return ans.Write(c)
	}
}
