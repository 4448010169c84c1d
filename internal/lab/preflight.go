package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// ErrNotLabMode is CheckServices' error for an orders that answers but serves no lab routes.
var ErrNotLabMode = errors.New("orders is not in lab mode")

// ErrPlatformAdmin is CheckPlatformAdmin's error for a payments-mock whose admin API refuses loadtest.
var ErrPlatformAdmin = errors.New("payments-mock's admin API refuses loadtest")

// CheckPlatformAdmin asks payments-mock for its chaos (GET /admin/chaos) as the lab and the incident
// will set it, with ADMIN_TOKEN as the bearer token: a 401 or 403 is a set-up error (exit 2) before the
// run, not a scenario that errs halfway with a summary that reads as a result.
func (e *Env) CheckPlatformAdmin(ctx context.Context) error {
	var h []string
	if e.AdminToken != "" {
		h = []string{"Authorization", "Bearer " + e.AdminToken}
	}
	r, err := e.Do(ctx, http.MethodGet, e.PaymentsURL+"/admin/chaos", nil, h...)
	if err != nil {
		return fmt.Errorf("payments-mock at %s (PAYMENTS_URL): GET /admin/chaos: %w", e.PaymentsURL, err)
	}
	if r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden {
		return fmt.Errorf("%w: GET %s/admin/chaos answered HTTP %d; set ADMIN_TOKEN to payments-mock's ADMIN_TOKEN",
			ErrPlatformAdmin, e.PaymentsURL, r.Status)
	}
	return nil
}

// CheckServices asks orders and payments-mock whether they are up (GET /readyz answers at all: a
// degraded 503 still counts, the scenarios report what it costs them), and, when needLab, whether
// orders serves the lab routes (GET /lab/lab.js, the live page's static script, is 200 only with
// ORDERS_LAB=true and reads nothing from the stores). It runs before a lab run, an unsafe incident or
// a bench, so that a shop that is down or not in lab mode is a set-up error of its own (exit 2), never
// a scenario's failure: an unsafe variant that answers 404 would otherwise read as a failure that
// did not show, or a guard that did not hold.
func (e *Env) CheckServices(ctx context.Context, needLab bool) error {
	for _, s := range []struct{ name, variable, url string }{
		{"orders", "ORDERS_URL", e.OrdersURL}, {"payments-mock", "PAYMENTS_URL", e.PaymentsURL},
	} {
		if _, err := e.Do(ctx, http.MethodGet, s.url+"/readyz", nil); err != nil {
			return fmt.Errorf("%s at %s (%s) does not answer: %w", s.name, s.url, s.variable, err)
		}
	}
	if !needLab {
		return nil
	}
	r, err := e.Do(ctx, http.MethodGet, e.OrdersURL+"/lab/lab.js", nil)
	if err != nil {
		return fmt.Errorf("orders at %s (ORDERS_URL): GET /lab/lab.js: %w", e.OrdersURL, err)
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("%w: GET %s/lab/lab.js answered HTTP %d; start orders with ORDERS_LAB=true",
			ErrNotLabMode, e.OrdersURL, r.Status)
	}
	return nil
}
