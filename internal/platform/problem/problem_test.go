package problem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/problem"
)

func TestResolveFindsWrappedErrors(t *testing.T) {
	t.Parallel()
	conflict := problem.New(problem.KindConflict, "busy", "try later")
	cases := []struct {
		name string
		err  error
		code string
	}{
		{"domain error wrapped twice", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", conflict)), "busy"},
		{"echo body limit wrapped", fmt.Errorf("read body: %w", echo.ErrStatusRequestEntityTooLarge), "body_too_large"},
		{"echo not found", echo.ErrNotFound, "not_found"},
		{"echo method", echo.ErrMethodNotAllowed, "method_not_allowed"},
		{"plain error", errors.New("boom"), "internal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.code, problem.Resolve(tc.err).Code)
		})
	}
}

func TestIsComparesCodesAcrossCopies(t *testing.T) {
	t.Parallel()
	base := problem.New(problem.KindConflict, "busy", "try later")
	copied := base.WithRetryAfter(time.Second).Wrap(errors.New("cause"))
	assert.ErrorIs(t, fmt.Errorf("x: %w", copied), base)
	assert.NotErrorIs(t, copied, problem.ErrNotFound)
}

func TestHandlerWritesRFC9457(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = problem.Handler(func(echo.Context) *slog.Logger { return slog.New(slog.DiscardHandler) })
	e.GET("/x", func(echo.Context) error {
		return fmt.Errorf("wrapped: %w", problem.New(problem.KindConflict, "busy", "try later").WithRetryAfter(1500*time.Millisecond))
	})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Equal(t, problem.ContentType, rec.Header().Get("Content-Type"))
	assert.Equal(t, "2", rec.Header().Get("Retry-After"), "rounded up to whole seconds")
	var b problem.Body
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
	assert.Equal(t, problem.Body{Type: "about:blank", Title: "Conflict", Status: 409, Detail: "try later",
		Instance: "/x", Code: "busy"}, b)
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	type body struct {
		A int `json:"a"`
	}
	for in, wantErr := range map[string]bool{
		`{"a":1}`: false, `{"a":1,"b":2}`: true, `{"a":"x"}`: true, `{"a":1} {}`: true, ``: true, `{`: true,
		`{"A":1}`: true, `{"a":1,"a":2}`: true, `[]`: true, `{ "a" : 1 }`: false,
	} {
		var v body
		err := problem.DecodeJSON([]byte(in), &v)
		if !wantErr {
			assert.NoError(t, err, in)
			continue
		}
		assert.ErrorIs(t, err, problem.ErrMalformedBody, in)
	}
}
