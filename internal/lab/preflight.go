package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"idemshop/internal/paysig"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/rabbitmq"
)

// ErrNotLabMode is CheckServices' error for an orders that answers but serves no lab routes.
var ErrNotLabMode = errors.New("orders is not in lab mode")

// ErrPlatformAdmin is CheckPlatformAdmin's error for a payments-mock whose admin API refuses loadtest.
var ErrPlatformAdmin = errors.New("payments-mock's admin API refuses loadtest")

// CheckPlatformAdmin asks payments-mock for its chaos (GET /admin/chaos) as the lab and the incident
// will set it, with ADMIN_TOKEN as the bearer token: a 401 or 403 is a set-up error (exit 2) before the
// run, not a scenario that errs halfway with a summary that reads as a result.
func (e *Env) CheckPlatformAdmin(ctx context.Context) error {
	r, err := e.Do(ctx, http.MethodGet, e.PaymentsURL+"/admin/chaos", nil, e.adminHeaders()...)
	if err != nil {
		return fmt.Errorf("payments-mock at %s (PAYMENTS_URL): GET /admin/chaos: %w", config.RedactURL(e.PaymentsURL), err)
	}
	if r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden {
		return fmt.Errorf("%w: GET %s/admin/chaos answered HTTP %d; set ADMIN_TOKEN to payments-mock's ADMIN_TOKEN",
			ErrPlatformAdmin, config.RedactURL(e.PaymentsURL), r.Status)
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
			return fmt.Errorf("%s at %s (%s) does not answer: %w", s.name, config.RedactURL(s.url), s.variable, err)
		}
	}
	if !needLab {
		return nil
	}
	r, err := e.Do(ctx, http.MethodGet, e.OrdersURL+"/lab/lab.js", nil)
	if err != nil {
		return fmt.Errorf("orders at %s (ORDERS_URL): GET /lab/lab.js: %w", config.RedactURL(e.OrdersURL), err)
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("%w: GET %s/lab/lab.js answered HTTP %d; start orders with ORDERS_LAB=true",
			ErrNotLabMode, config.RedactURL(e.OrdersURL), r.Status)
	}
	return nil
}

// ErrShopSetup is CheckShop's error for settings that do not match the shop's: the lab's database or its
// webhook secret, or a Redis or a broker the lab cannot reach.
var ErrShopSetup = errors.New("the lab's settings do not match the shop's")

// CheckShop asks the shop whether the lab's own settings are its: a throwaway lab user (created in
// DATABASE_URL, deleted at once) reads GET /v1/points, which orders answers 401 when it reads another
// database; and a signed callback with an empty body, which orders answers 401 signature_invalid when
// PAYMENT_WEBHOOK_SECRET is not its own (and 400 otherwise: nothing applied, one audit row). With
// stores, Redis (REDIS_URL) and RabbitMQ (AMQP_URL) must answer too: the lab scenarios use them
// directly. Each mismatch is a set-up error (exit 2) before the run: inside a scenario it read as an
// ERROR row, or as a guard that did not hold.
func (e *Env) CheckShop(ctx context.Context, stores bool) error {
	f, err := e.NewFixture(ctx, "preflight")
	if err != nil {
		return fmt.Errorf("%w: %w (DATABASE_URL)", ErrShopSetup, err)
	}
	keep := e.Keep
	e.Keep = false
	defer func() { _ = f.Close(ctx); e.Keep = keep }()
	r, err := f.Do(ctx, http.MethodGet, "/v1/points", nil)
	if err != nil {
		return fmt.Errorf("orders at %s (ORDERS_URL): GET /v1/points: %w", config.RedactURL(e.OrdersURL), err)
	}
	if r.Status == http.StatusUnauthorized {
		return fmt.Errorf("%w: orders does not know the lab's user (GET /v1/points answered 401): DATABASE_URL must name the database orders uses", ErrShopSetup)
	}
	if r.Status != http.StatusOK {
		// Another service at ORDERS_URL (payments-mock's port, say) answered 404, and the run went on
		// until its first create failed, the variable unnamed (a helper's finding, 2026-12-06).
		return fmt.Errorf("%w: GET %s/v1/points answered HTTP %d, not orders' 200: ORDERS_URL must be orders'", ErrShopSetup, config.RedactURL(e.OrdersURL), r.Status)
	}
	r, err = e.Do(ctx, http.MethodPost, e.OrdersURL+"/v1/payments/callback", []byte(`{}`),
		paysig.Header, paysig.Sign(e.Secret, time.Now(), []byte(`{}`)))
	if err != nil {
		return fmt.Errorf("orders at %s (ORDERS_URL): POST /v1/payments/callback: %w", config.RedactURL(e.OrdersURL), err)
	}
	if r.Status == http.StatusUnauthorized {
		return fmt.Errorf("%w: orders refused the lab's signature (%s): PAYMENT_WEBHOOK_SECRET must be the one orders uses", ErrShopSetup, r.Code())
	}
	if !stores {
		return nil
	}
	if err := e.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: Redis at REDIS_URL does not answer: %w", ErrShopSetup, err)
	}
	conn, err := rabbitmq.Dial(ctx, e.AMQPURL)
	if err != nil {
		return fmt.Errorf("%w: RabbitMQ at AMQP_URL does not answer: %w", ErrShopSetup, err)
	}
	_ = conn.Close()
	return nil
}
