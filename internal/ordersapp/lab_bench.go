package ordersapp

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/idempotency"
	"idemshop/internal/orders"
	"idemshop/internal/platform/httpproblem"
)

// mountLabBench mounts the baseline that `loadtest bench` compares POST /v1/orders against:
// POST /lab/unsafe/v1/nokey/orders is the same handler, repository, transaction and middleware chain
// with the idempotency key layer switched off. It is unsafe in exactly the way S2 shows (a retry
// creates a second order), which is why it only exists in lab mode.
func mountLabBench(p labParts) error {
	runner, err := newNoKeyRunner(p.d.DB)
	if err != nil {
		return fmt.Errorf("lab bench: %w", err)
	}
	h, err := orders.NewHandler(p.repo, runner, p.settler)
	if err != nil {
		return fmt.Errorf("lab bench: %w", err)
	}
	h.Mount(p.v1.Group("/nokey"))
	return nil
}

// noKeyRunner is the Guard minus the key layer: no Idempotency-Key check, no fingerprint, no key read,
// no key row. What is left (read the body, run the work in one transaction, answer its JSON)
// is what the Guard does too, so the difference in a benchmark is the cost of the guard alone.
type noKeyRunner struct{ db *gorm.DB }

func newNoKeyRunner(db *gorm.DB) (*noKeyRunner, error) {
	if db == nil {
		return nil, errors.New("no-key runner needs a db")
	}
	return &noKeyRunner{db: db}, nil
}

// Run implements idempotency.Runner.
func (n *noKeyRunner) Run(c echo.Context, _ int64, work idempotency.Work) error {
	ctx := c.Request().Context()
	body, err := httpproblem.ReadBody(c.Request().Body)
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	var (
		status int
		v      any
	)
	err = n.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		status, v, err = work(ctx, tx, body)
		return err
	})
	if err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	return c.Blob(status, echo.MIMEApplicationJSON, b)
}
