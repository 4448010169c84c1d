package callback

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

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
func (h *Handler) Mount(e *echo.Echo) { h.MountAt(e, "/v1/payments/callback") }

// MountAt adds the callback route at path; the lab mounts its twins' services this way.
func (h *Handler) MountAt(e *echo.Echo, path string) {
	e.POST(path, serveCallback(h.svc.Handle))
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
		// Several signature lines are judged as the one comma-separated value they make (RFC 9110 §5.3),
		// the value a proxy that joins them would forward: reading the first line alone let a request
		// through that the same request joined on its way was refused for.
		sig := strings.Join(c.Request().Header.Values(paysig.Header), ",")
		if _, err := handle(c.Request().Context(), sig, raw); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, callbackAck)
	}
}
