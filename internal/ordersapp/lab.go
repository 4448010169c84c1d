package ordersapp

import (
	"fmt"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/auth"
	"idemshop/internal/callback"
	"idemshop/internal/idempotency"
	"idemshop/internal/labview"
	"idemshop/internal/orders"
	"idemshop/internal/rewards"
)

// labParts is what the unsafe lab variants are built from: the same parts as the guarded routes, so
// that each unsafe twin differs from its guarded one by the guard alone. Every twin is mounted here, in
// the assembly, through its pattern's swap point: an idempotency.Runner (S2, S3, S10), a
// callback.Applier (S1, S5, S12), a rewards.TokenUse (S4), a handler of the pay flow's twin (S7).
// points.Dedup (S6, S11) is swapped in process by the lab itself; S8's late write runs here, through
// idempotency.Store.Finish or FinishUnfenced (lab_s8.go).
type labParts struct {
	d           Deps
	e           *echo.Echo
	v1          *echo.Group // /lab/unsafe/v1, authenticated like /v1
	authn       *auth.Authenticator
	repo        *orders.Repository
	idemMetrics *idempotency.Metrics
	settler     *callback.Service // the guarded callback service (the orders routes count its callbacks)
	redeemView  rewards.View      // the redeem pages, for the S4 twin\'s form posts
	live        *labview.Live     // the live view of every guard decision (GET /lab)
}

// LabWarning is what `orders serve` logs (WARN) at start in lab mode. The commands that build the app
// but serve nothing (sweep --once, reconcile --once) do not say it.
const LabWarning = "LAB MODE: deliberately UNSAFE variants are mounted under /lab/unsafe; never run this in production"

// mountLab mounts the deliberately unsafe variants of the lab table (docs/design.md). Only with ORDERS_LAB=true;
// never by default. Unsafe routes live under /lab/unsafe.
func mountLab(p labParts) error {
	for _, mount := range []func(labParts) error{mountLabCallbacks, mountLabIdempotency, mountLabFormToken, mountLabPayments, mountLabBench, mountLabOutbox, mountLabS8, mountLabLive} {
		if err := mount(p); err != nil {
			return err
		}
	}
	return nil
}

// mountLabCallbacks mounts the callback twins that, like the guarded route, take no lock: S1 (no state guard)
// and S12 (an early refund dropped). S5's, with a lock of its own, is in lab_payments.go.
func mountLabCallbacks(p labParts) error {
	for _, m := range []struct {
		id, path string
		applier  callback.Applier
	}{
		{"S1", "/lab/unsafe/payments/callback", callback.NoStateGuard},
		{"S12", "/lab/unsafe/s12/payments/callback", callback.DropEarlyRefund},
	} {
		if err := mountLabCallback(p, m.path, m.applier, nil); err != nil {
			return fmt.Errorf("lab %s: %w", m.id, err)
		}
	}
	return nil
}

// mountLabCallback mounts at path a callback route that applies with applier behind lock: the same
// database, repository and verifier as POST /v1/payments/callback. Its metrics go to a registry of its
// own: lab traffic must not count as the shop's (nor one twin's as another's).
func mountLabCallback(p labParts, path string, applier callback.Applier, lock callback.OrderLock) error {
	h, err := newCallbackRoute(p.d, p.repo, applier, lock, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	h.MountAt(p.e, path)
	return nil
}
