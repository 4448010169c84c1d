package pay

import (
	"errors"

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

// pay reads the request (the keyed-request reader every Idempotency-Key route shares), runs the pay
// flow, and writes its answer; errors go to httpproblem.Handler.
func (h *Handler) pay(c echo.Context) error {
	u, err := auth.MustUser(c)
	if err != nil {
		return err
	}
	id, idOK := orders.ParseID(c.Param("id"))
	kr, err := idempotency.ReadKeyedRequest(c, h.metrics, u.ID)
	if err != nil {
		if !idOK {
			return orders.ErrOrderNotFound // an id that names no order comes first, as it always has
		}
		return err
	}
	req := PayRequest{UserID: u.ID, OrderID: id, Key: kr.Scope.Key,
		Fingerprint: kr.Fingerprint, Method: kr.Method, Path: kr.Path, Route: kr.Route}
	// A request refused before the flow is still answered as a reused key when its key names another
	// request: the client learns first that the key is spent, as on create, whose body is read after
	// the key's lookup (a key adversary's finding, 2026-12-07: 400 and 404 where design.md says 422).
	refuse := func(cause error) error {
		if err := h.payer.KeyReused(c.Request().Context(), req); err != nil {
			return err
		}
		return cause
	}
	if !idOK {
		return refuse(orders.ErrOrderNotFound)
	}
	// The order says what to pay: the body must be empty or {}. Anything else is refused rather than
	// silently ignored (a client sending an amount must learn that it is not used).
	if !problem.BlankJSON(kr.Body) {
		if err := problem.DecodeJSON(kr.Body, &struct{}{}); err != nil {
			return refuse(err)
		}
	}
	ans, err := h.payer.Pay(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return ans.Write(c)
}
