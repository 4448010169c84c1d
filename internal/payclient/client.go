// Package payclient is the Go client of the payment platform API (payments-mock, or anything that speaks
// its contract in docs/design.md and docs/payments-mock.md). orders uses it to create payments and refunds, and its sweeper uses the
// query API to learn what happened to a request whose answer was lost.
//
// Every call is bounded by the client's timeout and the context. Errors are classified (see ErrRefused,
// OutcomeUnknown) because the right reaction differs: a 4xx means nothing happened, anything else means
// "maybe", and only the query API can settle a maybe.
package payclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxResponseBody bounds how much of an answer is read.
const maxResponseBody = 1 << 20

// StatusPending is a payment the platform has not settled: the payer has neither paid nor been declined.
// (SUCCESS, FAILED and REFUNDED are the callbacks' statuses: callback.StatusSuccess and the others.)
const StatusPending = "PENDING"

// Payment mirrors the platform's payment. Status is PENDING, SUCCESS, FAILED or REFUNDED; money is int64
// cents.
type Payment struct {
	ID              string    `json:"id"`
	MerchantOrderNo string    `json:"merchant_order_no"`
	AmountCents     int64     `json:"amount_cents"`
	Currency        string    `json:"currency"`
	Status          string    `json:"status"`
	RefundedCents   int64     `json:"refunded_cents"`
	NotifyURL       string    `json:"notify_url"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// Refund mirrors the platform's refund.
type Refund struct {
	ID          string    `json:"id"`
	RefundNo    string    `json:"refund_no"`
	PaymentID   string    `json:"payment_id"`
	AmountCents int64     `json:"amount_cents"`
	Currency    string    `json:"currency"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"created_at"`
}

// CreatePaymentRequest is the body of POST /v1/payments. MerchantOrderNo is the idempotency key: the
// same order number and amount return the existing payment.
type CreatePaymentRequest struct {
	MerchantOrderNo string `json:"merchant_order_no"`
	AmountCents     int64  `json:"amount_cents"`
	Currency        string `json:"currency"`
	NotifyURL       string `json:"notify_url"`
}

// RefundRequest is the body of POST /v1/refunds; RefundNo is its idempotency key.
type RefundRequest struct {
	PaymentID   string `json:"payment_id"`
	RefundNo    string `json:"refund_no"`
	AmountCents int64  `json:"amount_cents"`
}

// Client calls the platform API. It is safe for concurrent use.
type Client struct {
	base *url.URL
	http *http.Client
}

// New returns a client for the platform at baseURL (e.g. http://127.0.0.1:8081). timeout bounds each
// call from dial to the last body byte and must be > 0.
func New(baseURL string, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("payclient: base URL %q is not an absolute http(s) URL", baseURL)
	}
	if timeout <= 0 {
		return nil, errors.New("payclient: timeout must be > 0")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = timeout
	tr.ResponseHeaderTimeout = timeout
	return &Client{base: u, http: &http.Client{Timeout: timeout, Transport: tr}}, nil
}

// CreatePayment creates a payment, or returns the existing one for the same merchant order number and
// amount (created=false). A different amount for that number is a 409 merchant_order_no_conflict
// refusal. On OutcomeUnknown, the payment may exist: look it up with FindByMerchantOrderNo.
func (c *Client) CreatePayment(ctx context.Context, req CreatePaymentRequest) (p Payment, created bool, err error) {
	status, err := c.do(ctx, http.MethodPost, "/v1/payments", nil, req, &p)
	if err != nil {
		return Payment{}, false, fmt.Errorf("create payment %s: %w", req.MerchantOrderNo, err)
	}
	return p, status == http.StatusCreated, nil
}

// GetPayment returns the payment with id; an unknown id is a 404 refusal (IsNotFound).
func (c *Client) GetPayment(ctx context.Context, id string) (Payment, error) {
	var p Payment
	if _, err := c.do(ctx, http.MethodGet, "/v1/payments/"+url.PathEscape(id), nil, nil, &p); err != nil {
		return Payment{}, fmt.Errorf("get payment %s: %w", id, err)
	}
	return p, nil
}

// FindByMerchantOrderNo returns the payment created for a merchant order number. found=false with a nil
// error is the definite answer "no payment exists", which the sweeper needs to fail a stuck request
// safely.
func (c *Client) FindByMerchantOrderNo(ctx context.Context, no string) (p Payment, found bool, err error) {
	var out struct {
		Payments []Payment `json:"payments"`
	}
	q := url.Values{"merchant_order_no": {no}}
	if _, err := c.do(ctx, http.MethodGet, "/v1/payments", q, nil, &out); err != nil {
		return Payment{}, false, fmt.Errorf("find payment for %s: %w", no, err)
	}
	if len(out.Payments) == 0 {
		return Payment{}, false, nil
	}
	return out.Payments[0], true, nil
}

// Approve simulates the payer approving; the result is FAILED for amounts the platform declines.
func (c *Client) Approve(ctx context.Context, id string) (Payment, error) {
	return c.settle(ctx, id, "approve")
}

// Decline simulates the payer declining.
func (c *Client) Decline(ctx context.Context, id string) (Payment, error) {
	return c.settle(ctx, id, "decline")
}

func (c *Client) settle(ctx context.Context, id, action string) (Payment, error) {
	var p Payment
	if _, err := c.do(ctx, http.MethodPost, "/v1/payments/"+url.PathEscape(id)+"/"+action, nil, nil, &p); err != nil {
		return Payment{}, fmt.Errorf("%s payment %s: %w", action, id, err)
	}
	return p, nil
}

// Refund refunds part or all of a SUCCESS payment, once per RefundNo: a repeat returns the stored refund
// with created=false. Over-refunding is a 400 refund_exceeds_payment refusal.
func (c *Client) Refund(ctx context.Context, req RefundRequest) (r Refund, created bool, err error) {
	var out struct {
		Refund  Refund  `json:"refund"`
		Payment Payment `json:"payment"`
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/refunds", nil, req, &out)
	if err != nil {
		return Refund{}, false, fmt.Errorf("refund %s: %w", req.RefundNo, err)
	}
	return out.Refund, status == http.StatusCreated, nil
}

// do sends one request and decodes a 2xx JSON answer into out. It returns the status, or an error that
// errors.Is one of the package's classes.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (int, error) {
	u := c.base.JoinPath(path)
	u.RawQuery = q.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return 0, fmt.Errorf("%w: build request: %w", ErrConnection, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, classifyTransport(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		// The status line arrived but the body broke off: for a 2xx the effect happened, but we cannot
		// show it; for an error answer nothing changes. Either way, the caller must look it up.
		return 0, classifyTransport(err)
	}
	if resp.StatusCode >= 300 {
		se := &StatusError{Status: resp.StatusCode}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			var pb struct {
				Code   string `json:"code"`
				Detail string `json:"detail"`
			}
			if json.Unmarshal(raw, &pb) == nil {
				se.Code, se.Detail = pb.Code, pb.Detail
			}
		}
		if resp.StatusCode < 400 {
			return 0, fmt.Errorf("%w: HTTP %d", ErrProtocol, resp.StatusCode)
		}
		return 0, se
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return 0, fmt.Errorf("%w: decode HTTP %d body: %w", ErrProtocol, resp.StatusCode, err)
	}
	return resp.StatusCode, nil
}

// classifyTransport sorts a failure without an answer into ErrTimeout or ErrConnection, and marks a
// failed dial ErrNotSent as well: the only failure after which the request certainly did not arrive.
func classifyTransport(err error) error {
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("%w: %w: %w", ErrConnection, ErrNotSent, err)
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrConnection, err)
}
