package pay

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/idempotency"
	"idemshop/internal/orders"
	"idemshop/internal/platform/problem"
)

// Handler is POST /v1/orders/{id}/pay.
type Handler struct {
	payer   *Payer
	metrics *idempotency.Metrics
}

// NewHandler returns the pay route.
func NewHandler(payer *Payer, m *idempotency.Metrics) (*Handler, error) {
	if payer == nil || m == nil {
		return nil, errors.New("pay: NewHandler needs a payer and metrics")
	}
	return &Handler{payer: payer, metrics: m}, nil
}

// Mount adds the route to g, which must already authenticate.
func (h *Handler) Mount(g *echo.Group) {
	h.metrics.ExpectRoute(g.POST("/orders/:id/pay", h.pay).Path)
}

func (h *Handler) pay(c echo.Context) error {
	u, err := auth.MustUser(c)
	if err != nil {
		return err
	}
	id, ok := orders.ParseID(c.Param("id"))
	if !ok {
		return orders.ErrOrderNotFound
	}
	key, err := idempotency.KeyFromHeader(c.Request().Header)
	if err != nil {
		h.metrics.Count(c.Path(), idempotency.OutcomeInvalid)
		return err
	}
	body, err := problem.ReadBody(c.Request().Body)
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	// The order says what to pay: the body must be empty or {}. Anything else is refused rather than
	// silently ignored (a client sending an amount must learn that it is not used).
	if len(bytes.TrimSpace(body)) > 0 {
		if err := problem.DecodeJSON(body, &struct{}{}); err != nil {
			return err
		}
	}
	fp, err := idempotency.Fingerprint(c.Request().Method, c.Request().URL.Path, body)
	if err != nil {
		return problem.ErrMalformedBody.Wrap(err)
	}
	return h.payer.Pay(c, u.ID, id, key, fp)
}
