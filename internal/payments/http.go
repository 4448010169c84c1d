package payments

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"idemshop/internal/paysig"
	"idemshop/internal/platform/problem"
)

// Handler is the callback route. It carries no bearer auth: the signature is the authentication.
type Handler struct {
	svc *Service
}

// NewHandler returns the callback route.
func NewHandler(svc *Service) (*Handler, error) {
	if svc == nil {
		return nil, errors.New("payments: NewHandler needs a service")
	}
	return &Handler{svc: svc}, nil
}

// Mount adds POST /v1/payments/callback to e (outside the authenticated /v1 group).
func (h *Handler) Mount(e *echo.Echo) {
	e.POST("/v1/payments/callback", h.callback)
}

// callbackAck is what the platform waits for: any 2xx with this body stops its retries.
var callbackAck = map[string]string{"result": "success"}

func (h *Handler) callback(c echo.Context) error {
	raw, err := problem.ReadBody(c.Request().Body)
	if err != nil {
		return fmt.Errorf("read callback body: %w", err)
	}
	if _, err := h.svc.Handle(c.Request().Context(), c.Request().Header.Get(paysig.Header), raw); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, callbackAck)
}

// MountUnsafe adds the lab's unguarded twin, POST /lab/unsafe/payments/callback (S1). Lab mode only.
func (h *Handler) MountUnsafe(e *echo.Echo) {
	e.POST("/lab/unsafe/payments/callback", func(c echo.Context) error {
		raw, err := problem.ReadBody(c.Request().Body)
		if err != nil {
			return fmt.Errorf("read callback body: %w", err)
		}
		if _, err := h.svc.HandleUnsafe(c.Request().Context(), c.Request().Header.Get(paysig.Header), raw); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, callbackAck)
	})
}
