package ordersapp

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/outbox"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
)

// LabOutboxPath is the lab-only route that `loadtest bench` measures the outbox lag through (lab mode).
// POST {"routing_key": "bench.…", "seq": n} writes one outbox row whose payload is
// {"bench_seq": n, "user_id": <the caller>} with outbox.Insert and, once it has committed, wakes the
// relay, as the shop's writers do (the callbacks, callback.go). The row is the route's only write, so
// its INSERT is its own transaction (one statement is atomic): one round trip, not BEGIN, INSERT and
// COMMIT. What a writer's other statements cost is that writer's, not the outbox's; at 2,000 events/s
// on the 2-core machine the two round trips saved per event were CPU the relay's confirms waited for
// (docs/performance.md). It answers 204 after both. Only routing keys under "bench." are taken: nothing else is bound to them, so the events
// never reach points-consumer.
const LabOutboxPath = "/lab/bench/outbox"

// labOutboxRoutingPrefix is the only routing-key prefix LabOutboxPath writes.
const labOutboxRoutingPrefix = "bench."

var errLabOutboxRoutingKey = problem.New(problem.KindInvalid, "invalid_routing_key",
	`routing_key must start with "`+labOutboxRoutingPrefix+`"`)

// mountLabOutbox mounts LabOutboxPath, bearer-authenticated like /v1.
func mountLabOutbox(p labParts) error {
	p.e.Group("/lab/bench", p.authn.Middleware()).POST("/outbox", func(c echo.Context) error {
		u, err := auth.MustUser(c)
		if err != nil {
			return err
		}
		raw, err := httpproblem.ReadBody(c.Request().Body)
		if err != nil {
			return err
		}
		var req struct {
			RoutingKey string `json:"routing_key"`
			Seq        int64  `json:"seq"`
		}
		if err := json.Unmarshal(raw, &req); err != nil {
			return problem.ErrMalformedBody
		}
		if !strings.HasPrefix(req.RoutingKey, labOutboxRoutingPrefix) || len(req.RoutingKey) > 200 {
			return errLabOutboxRoutingKey
		}
		payload := struct {
			Seq    int64 `json:"bench_seq"`
			UserID int64 `json:"user_id"`
		}{req.Seq, u.ID}
		ctx := c.Request().Context()
		if err := outbox.Insert(ctx, p.d.DB, uuid.NewString(), req.RoutingKey, payload); err != nil {
			return err
		}
		p.d.relay.Wake() // after the commit, as callback.Service does
		return c.NoContent(http.StatusNoContent)
	})
	return nil
}
