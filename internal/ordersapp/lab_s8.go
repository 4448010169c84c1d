package ordersapp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/auth"
	"idemshop/internal/idempotency"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
)

// labS8Kind is the kind of S8's pay-like records (internal/lab/s8.go): the only records these routes
// write, so that they can never touch a real pay record.
const labS8Kind = "lab_s8"

// mountLabS8 mounts the late write of S8's paused holder, so that it runs in the orders process, through
// an idempotency.Store like the pay flow's:
//
//   - POST /lab/v1/s8/records/{id}/finish: the guarded write, Store.Finish with the holder's fencing
//     token, on the shop's idempotency metrics: a refusal answers 409 "fenced" and counts in this
//     process's idemshop_idempotency_fence_rejections_total, as a real pay flow's would;
//   - POST /lab/unsafe/v1/s8/records/{id}/finish: the unsafe twin, Store.FinishUnfenced (no token), on
//     metrics of its own registry.
//
// Body: {"fence": n, "state": "FAILED_RETRYABLE", "status": 503, "body": {...}}; 204 when written. Both
// are authenticated, and take only the caller's own records of kind lab_s8.
func mountLabS8(p labParts) error {
	guarded, err := idempotency.NewStore(p.d.DB, p.idemMetrics)
	if err != nil {
		return fmt.Errorf("lab S8: %w", err)
	}
	unsafe, err := idempotency.NewStore(p.d.DB, idempotency.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		return fmt.Errorf("lab S8: %w", err)
	}
	p.e.Group("/lab/v1", p.authn.Middleware()).POST("/s8/records/:id/finish", labS8Finish(p, func(c echo.Context, w labS8Write) error {
		return guarded.Finish(c.Request().Context(), p.d.DB, w.id, w.Fence, w.State, w.Status, w.Body)
	}))
	p.v1.POST("/s8/records/:id/finish", labS8Finish(p, func(c echo.Context, w labS8Write) error {
		return unsafe.FinishUnfenced(c.Request().Context(), p.d.DB, w.id, w.State, w.Status, w.Body)
	}))
	return nil
}

// labS8Write is the late write a holder asks for.
type labS8Write struct {
	id     int64
	Fence  int64             `json:"fence"`
	State  idempotency.State `json:"state"`
	Status int               `json:"status"`
	Body   json.RawMessage   `json:"body"`
}

// errLabS8Fenced answers a write the fence refused.
var errLabS8Fenced = problem.New(problem.KindConflict, "fenced",
	"a holder with a newer fencing token owns this record; the write was not applied")

func labS8Finish(p labParts, finish func(echo.Context, labS8Write) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		u, err := auth.MustUser(c)
		if err != nil {
			return err
		}
		var w labS8Write
		w.id, err = strconv.ParseInt(c.Param("id"), 10, 64)
		if err != nil {
			return problem.ErrNotFound
		}
		raw, err := httpproblem.ReadBody(c.Request().Body)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &w); err != nil || w.State == "" || w.Status == 0 {
			return problem.ErrMalformedBody
		}
		var n int64
		err = p.d.DB.WithContext(c.Request().Context()).Raw(`SELECT count(*) FROM idempotency_keys
			WHERE id = ? AND user_id = ? AND kind = ?`, w.id, u.ID, labS8Kind).Scan(&n).Error
		if err != nil {
			return err
		}
		if n == 0 {
			return problem.ErrNotFound
		}
		if err := finish(c, w); err != nil {
			if errors.Is(err, idempotency.ErrFenced) {
				return errLabS8Fenced
			}
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}
