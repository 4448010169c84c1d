package pay

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/idempotency"
	"idemshop/internal/orders"
	"idemshop/internal/payclient"
	"idemshop/internal/platform/fault"
	"idemshop/internal/platform/httpproblem"
)

func TestMayRunAgain(t *testing.T) {
	for state, want := range map[idempotency.State]bool{
		idempotency.StateProcessing:      true, // the claim decides whether its lease ran out
		idempotency.StateFailedRetryable: true,
		idempotency.StateCompleted:       false,
		idempotency.StateFailedPermanent: false,
	} {
		assert.Equal(t, want, mayRunAgain(idempotency.Record{State: state, Fingerprint: "fp"}, "fp"), state)
		assert.False(t, mayRunAgain(idempotency.Record{State: state, Fingerprint: "fp"}, "other"),
			"%s with another body is answered from the record", state)
	}
}

// sentErr is what the client returns for a failure after the request may have been written.
func sentErr(class error) error { return fmt.Errorf("%w: boom", class) }

func TestIsRetryable(t *testing.T) {
	for name, c := range map[string]struct {
		err  error
		want bool
	}{
		"503":                 {&payclient.StatusError{Status: 503}, true},
		"408":                 {&payclient.StatusError{Status: 408}, true},
		"429":                 {&payclient.StatusError{Status: 429}, true},
		"dial failed":         {fmt.Errorf("%w: %w: refused", payclient.ErrConnection, payclient.ErrNotSent), true},
		"500":                 {&payclient.StatusError{Status: 500}, false},
		"502":                 {&payclient.StatusError{Status: 502}, false},
		"504":                 {&payclient.StatusError{Status: 504}, false},
		"422 (a refusal)":     {&payclient.StatusError{Status: 422}, false},
		"reset after sending": {sentErr(payclient.ErrConnection), false},
		"timeout":             {sentErr(payclient.ErrTimeout), false},
		"garbled answer":      {sentErr(payclient.ErrProtocol), false},
	} {
		assert.Equal(t, c.want, isRetryable(c.err), name)
	}
}

// TestOutcome pins the map from the platform's answer to the record's next state and the client's answer.
func TestOutcome(t *testing.T) {
	p := &Payer{cfg: Config{PaymentsURL: "http://pay", Lease: 3 * time.Second}}
	o := orders.Order{ID: 7}

	r, err := p.outcome(o, "/v1/orders/7/pay", payclient.Payment{ID: "pay_1"}, nil)
	require.NoError(t, err)
	assert.Equal(t, idempotency.StateCompleted, r.state)
	assert.Equal(t, http.StatusCreated, r.status)
	assert.JSONEq(t, `{"order_id":7,"payment_id":"pay_1","status":"PAYING","pay_url":"http://pay/v1/payments/pay_1"}`, string(r.body))
	assert.Nil(t, r.answer)

	// PAYMENTS_URL's credentials are the shop's: never in the answer, which is stored and replayed.
	withUser := &Payer{cfg: Config{PaymentsURL: "http://shop:s3cret@pay:8081/base", Lease: 3 * time.Second}}
	r, err = withUser.outcome(o, "/v1/orders/7/pay", payclient.Payment{ID: "pay_1"}, nil)
	require.NoError(t, err)
	assert.JSONEq(t, `{"order_id":7,"payment_id":"pay_1","status":"PAYING","pay_url":"http://pay:8081/base/v1/payments/pay_1"}`, string(r.body))

	r, err = p.outcome(o, "/v1/orders/7/pay", payclient.Payment{}, &payclient.StatusError{Status: 422, Code: "card_declined"})
	require.NoError(t, err)
	assert.Equal(t, idempotency.StateFailedPermanent, r.state)
	assert.Equal(t, http.StatusUnprocessableEntity, r.status)
	var b httpproblem.Body
	require.NoError(t, json.Unmarshal(r.body, &b))
	assert.Equal(t, ErrPaymentRefused.Code, b.Code)
	assert.Equal(t, "/v1/orders/7/pay", b.Instance, "stored with its instance, as a live problem has one")
	assert.Nil(t, r.answer, "a refusal is answered with its stored body")

	r, err = p.outcome(o, "/v1/orders/7/pay", payclient.Payment{}, &payclient.StatusError{Status: 503})
	require.NoError(t, err)
	assert.Equal(t, idempotency.StateFailedRetryable, r.state)
	assert.Equal(t, http.StatusServiceUnavailable, r.status)
	assert.True(t, errors.Is(r.answer, ErrPaymentUnavailable), "%v", r.answer)

	r, err = p.outcome(o, "/v1/orders/7/pay", payclient.Payment{}, sentErr(payclient.ErrTimeout))
	require.NoError(t, err)
	assert.Equal(t, idempotency.StateProcessing, r.state, "outcome unknown: nothing is written")
	assert.Nil(t, r.body)
	assert.True(t, errors.Is(r.answer, ErrOutcomeUnknown), "%v", r.answer)
}

// Every crash window is one PAY_FAULT names: "crash-<after what>", the scheme of internal/platform/fault.
func TestPointsAreArmable(t *testing.T) {
	for _, p := range Points {
		h, err := fault.Kill("PAY_FAULT", p, Points, slog.New(slog.DiscardHandler))
		require.NoError(t, err, p)
		assert.NotNil(t, h, p)
		assert.True(t, strings.HasPrefix(string(p), "crash-"), p)
	}
}

// A stored result answers with its body, unless the answer needs more than the body (a 503's Retry-After).
func TestAnswerOf(t *testing.T) {
	a, err := result{state: idempotency.StateCompleted, status: 201, body: []byte(`{}`)}.answerOf()
	require.NoError(t, err)
	assert.Equal(t, idempotency.Answer{Status: 201, Body: []byte(`{}`)}, a, "fresh, not replayed")

	_, err = result{state: idempotency.StateFailedRetryable, status: 503, body: []byte(`{}`),
		answer: ErrPaymentUnavailable.WithRetryAfter(time.Second)}.answerOf()
	assert.True(t, errors.Is(err, ErrPaymentUnavailable), "%v", err)
}
