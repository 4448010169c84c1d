package callback

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"idemshop/internal/paysig"
	"idemshop/internal/platform/httpproblem"
)

// Handler is the callback route. It carries no bearer auth: the signature is the authentication.
type Handler struct {
	svc *Service
}

// Service returns the callback service behind the routes; the pay flow and the reconciler apply the
// platform's answers through it.
func (h *Handler) Service() *Service { return h.svc }

// NewHandler returns the callback route.
func NewHandler(svc *Service) (*Handler, error) {
	if svc == nil {
		return nil, errors.New("callback: NewHandler needs a service")
	}
	return &Handler{svc: svc}, nil
}

// Mount adds POST /v1/payments/callback to e (outside the authenticated /v1 group).
func (h *Handler) Mount(e *echo.Echo) {
	e.POST("/v1/payments/callback", serveCallback(h.svc.Handle))
}

// MountUnsafe adds the lab's unguarded twin, POST /lab/unsafe/payments/callback (S1). Lab mode only.
func (h *Handler) MountUnsafe(e *echo.Echo) {
	e.POST("/lab/unsafe/payments/callback", serveCallback(h.svc.HandleUnsafe))
}

// MountUnsafeEarlyRefund adds the lab's S12 twin, POST /lab/unsafe/s12/payments/callback, where a refund
// that arrives before its order is PAID is acknowledged and dropped. Lab mode only.
func (h *Handler) MountUnsafeEarlyRefund(e *echo.Echo) {
	e.POST("/lab/unsafe/s12/payments/callback", serveCallback(h.svc.HandleUnsafeEarlyRefund))
}

// callbackAck is what the platform waits for: any 2xx with this body stops its retries.
var callbackAck = map[string]string{"result": "success"}

// serveCallback reads the raw body (the signature covers its exact bytes), hands it to handle with the
// signature header, and acknowledges applied, duplicate and stale callbacks alike.
func serveCallback(handle func(ctx context.Context, signature string, raw []byte) (Outcome, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		raw, err := httpproblem.ReadBody(c.Request().Body)
		if err != nil {
			return fmt.Errorf("read callback body: %w", err)
		}
		if _, err := handle(c.Request().Context(), c.Request().Header.Get(paysig.Header), raw); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, callbackAck)
	}
}
