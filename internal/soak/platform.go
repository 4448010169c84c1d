package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// platform talks to the run's payments-mock: chaos, the back-office refund, and its own records.
type platform struct {
	base       string
	adminToken string
	http       *http.Client
}

func (p *platform) admin() []string {
	if p.adminToken == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + p.adminToken}
}

// Payment and Refund are the platform's records (the fields the check reads).
type Payment struct {
	ID              string `json:"id"`
	MerchantOrderNo string `json:"merchant_order_no"`
	AmountCents     int64  `json:"amount_cents"`
	Currency        string `json:"currency"`
	Status          string `json:"status"`
	RefundedCents   int64  `json:"refunded_cents"`
}

type Refund struct {
	RefundNo    string `json:"refund_no"`
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
}

// records is GET /admin/payments: every payment and refund the platform holds.
func (p *platform) records(ctx context.Context) ([]Payment, []Refund, error) {
	a := do(ctx, p.http, http.MethodGet, p.base+"/admin/payments", nil, p.admin()...)
	if a.err != nil {
		return nil, nil, fmt.Errorf("GET /admin/payments: %w", a.err)
	}
	if a.status != http.StatusOK {
		return nil, nil, fmt.Errorf("GET /admin/payments: HTTP %d: %.200s", a.status, a.body)
	}
	var out struct {
		Payments []Payment `json:"payments"`
		Refunds  []Refund  `json:"refunds"`
	}
	if err := json.Unmarshal(a.body, &out); err != nil {
		return nil, nil, fmt.Errorf("GET /admin/payments: %w", err)
	}
	return out.Payments, out.Refunds, nil
}

// payment is GET /v1/payments/{id}.
func (p *platform) payment(ctx context.Context, id string) (Payment, answer) {
	a := do(ctx, p.http, http.MethodGet, p.base+"/v1/payments/"+url.PathEscape(id), nil)
	var pay Payment
	if a.err == nil && a.status == http.StatusOK {
		_ = json.Unmarshal(a.body, &pay)
	}
	return pay, a
}

// refund is POST /v1/refunds, idempotent on refundNo.
func (p *platform) refund(ctx context.Context, paymentID, refundNo string, amount int64) answer {
	body, _ := json.Marshal(map[string]any{"payment_id": paymentID, "refund_no": refundNo, "amount_cents": amount})
	return do(ctx, p.http, http.MethodPost, p.base+"/v1/refunds", body)
}

// putChaos is PUT /admin/chaos.
func (p *platform) putChaos(ctx context.Context, settings map[string]any) answer {
	body, _ := json.Marshal(settings)
	var a answer
	for range 5 { // the platform is never killed, but be patient with a slow start
		a = do(ctx, p.http, http.MethodPut, p.base+"/admin/chaos", body, p.admin()...)
		if a.err == nil {
			return a
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(200 * time.Millisecond):
		}
	}
	return a
}

func (a answer) brief() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("HTTP %d: %s", a.status, strings.TrimSpace(string(a.body)))
}
