package ordersapp

import (
	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/callback"
	"idemshop/internal/idempotency"
	"idemshop/internal/orders"
)

// labParts is what the unsafe lab variants are built from: the same parts as the guarded routes, so
// that each unsafe twin differs from its guarded one by the guard alone.
type labParts struct {
	d           Deps
	e           *echo.Echo
	v1          *echo.Group // /lab/unsafe/v1, authenticated like /v1
	authn       *auth.Authenticator
	repo        *orders.Repository
	idemMetrics *idempotency.Metrics
	callbacks   *callback.Handler
}

// mountLab mounts the deliberately unsafe variants of the lab table (docs/design.md). Only with ORDERS_LAB=true;
// never by default. Unsafe routes live under /lab/unsafe.
func mountLab(p labParts) error {
	p.d.Logger.Warn("LAB MODE: deliberately UNSAFE variants are mounted under /lab/unsafe; never run this in production")
	p.callbacks.MountUnsafe(p.e)            // S1
	p.callbacks.MountUnsafeEarlyRefund(p.e) // S12
	for _, mount := range []func(labParts) error{mountLabIdempotency, mountLabFormToken, mountLabPayments, mountLabBench} {
		if err := mount(p); err != nil {
			return err
		}
	}
	return nil
}
