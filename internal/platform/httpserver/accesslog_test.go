package httpserver_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"

	"idemshop/internal/platform/httpserver"
)

// The access log shows the API's traffic at INFO; the successful polls of /healthz, /readyz and /metrics
// (probes, Prometheus, the lab page every second) only at DEBUG, and a failed one at INFO again.
func TestAccessLogKeepsPollsAtDebug(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := httpserver.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), prometheus.NewRegistry(), 1<<10)
	e.GET("/healthz", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/readyz", func(c echo.Context) error { return c.NoContent(http.StatusServiceUnavailable) })
	e.GET("/v1/products", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	for _, path := range []string{"/healthz", "/readyz", "/v1/products"} {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	log := buf.String()
	assert.NotContains(t, log, "path=/healthz", "a successful poll is not at INFO")
	assert.Contains(t, log, "path=/readyz status=503", "a failed one is")
	assert.Contains(t, log, "path=/v1/products status=200")
	assert.Equal(t, 2, strings.Count(log, `msg="http request"`))
}
