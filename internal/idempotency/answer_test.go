package idempotency

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
)

func TestReplay(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	created, refused := http.StatusCreated, http.StatusUnprocessableEntity
	done := Record{Fingerprint: "fp", State: StateCompleted, ResponseStatus: &created, ResponseBody: []byte(`{"id":1}`)}

	a, err := Replay(m, "/r", done, "fp", time.Second)
	require.NoError(t, err)
	assert.Equal(t, Answer{Status: created, Body: []byte(`{"id":1}`), Replayed: true}, a)

	_, err = Replay(m, "/r", done, "other", time.Second)
	assert.True(t, errors.Is(err, ErrKeyReused), "the mismatch check comes first: %v", err)

	failed := Record{Fingerprint: "fp", State: StateFailedPermanent, ResponseStatus: &refused, ResponseBody: []byte(`{}`)}
	a, err = Replay(m, "/r", failed, "fp", time.Second)
	require.NoError(t, err)
	assert.Equal(t, refused, a.Status)
	assert.True(t, a.Replayed)

	// A record that may run again is never replayed, not even with a stored answer (a FAILED_RETRYABLE
	// pay keeps its 503): the retry is told to come back, and runs when it does (mutant replay-final-only).
	unavailable := http.StatusServiceUnavailable
	for _, rec := range []Record{
		{Fingerprint: "fp", State: StateProcessing},
		{Fingerprint: "fp", State: StateFailedRetryable},
		{Fingerprint: "fp", State: StateFailedRetryable, ResponseStatus: &unavailable, ResponseBody: []byte(`{}`)},
	} {
		_, err = Replay(m, "/r", rec, "fp", 3*time.Second)
		var pe *problem.Error
		require.True(t, errors.As(err, &pe), "%s: %v", rec.State, err)
		assert.Equal(t, ErrKeyInUse.Code, pe.Code, rec.State)
	}
}

func TestAnswerWrite(t *testing.T) {
	e := echo.New()
	for _, c := range []struct {
		a        Answer
		ct       string
		replayed string
	}{
		{Answer{Status: 201, Body: []byte(`{}`)}, echo.MIMEApplicationJSON, ""},
		{Answer{Status: 201, Body: []byte(`{}`), Replayed: true}, echo.MIMEApplicationJSON, "true"},
		{Answer{Status: 422, Body: []byte(`{}`), Replayed: true}, httpproblem.ContentType, "true"},
	} {
		rec := httptest.NewRecorder()
		require.NoError(t, c.a.Write(e.NewContext(httptest.NewRequest(http.MethodPost, "/", nil), rec)))
		assert.Equal(t, c.a.Status, rec.Code)
		assert.Equal(t, c.ct, rec.Header().Get(echo.HeaderContentType))
		assert.Equal(t, c.replayed, rec.Header().Get(ReplayedHeader))
		assert.Equal(t, string(c.a.Body), rec.Body.String())
	}
}
