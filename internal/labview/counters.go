package labview

import (
	"context"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
)

// counters are the numbers a trainer points at beside the decisions: the shop's own tables, read
// fresh (the callbacks of the whole run; the first products and users, which are the demo's).
type counters struct {
	Callbacks struct {
		Received  int64 `json:"received"`
		Applied   int64 `json:"applied"`
		Duplicate int64 `json:"duplicate"`
		Stale     int64 `json:"stale"`
		Recorded  int64 `json:"recorded"` // a refund's fact stored, no status changed (a partial refund, one before its SUCCESS)
		Rejected  int64 `json:"rejected"`
	} `json:"callbacks"`
	Outbox struct {
		Published int64 `json:"published"`
		Pending   int64 `json:"pending"`
	} `json:"outbox"`
	Products []productStock `json:"products"`
	Balances []userBalance  `json:"balances"`
	// PointsConsumer is "up" once points-consumer's /metrics answered, else why not.
	PointsConsumer string `json:"points_consumer"`
}

type productStock struct {
	ID    int64  `json:"id"`
	Name  string `json:"name"`
	Stock int64  `json:"stock"`
}

type userBalance struct {
	User    string `json:"user"`
	Balance int64  `json:"balance"`
}

func (l *Live) counters(ctx context.Context) (counters, error) {
	var cs counters
	db := l.db.WithContext(ctx)
	cb := &cs.Callbacks
	if err := db.Raw(`SELECT count(*),
			count(*) FILTER (WHERE outcome = 'applied'), count(*) FILTER (WHERE outcome = 'duplicate'),
			count(*) FILTER (WHERE outcome = 'stale'), count(*) FILTER (WHERE outcome = 'recorded'),
			count(*) FILTER (WHERE outcome = 'rejected')
		FROM payment_callbacks`).Row().Scan(&cb.Received, &cb.Applied, &cb.Duplicate, &cb.Stale, &cb.Recorded, &cb.Rejected); err != nil {
		return cs, fmt.Errorf("lab counters: callbacks: %w", err)
	}
	if err := db.Raw(`SELECT count(*) FILTER (WHERE published_at IS NOT NULL), count(*) FILTER (WHERE published_at IS NULL)
		FROM outbox`).Row().Scan(&cs.Outbox.Published, &cs.Outbox.Pending); err != nil {
		return cs, fmt.Errorf("lab counters: outbox: %w", err)
	}
	if err := db.Raw(`SELECT id, name, stock FROM products ORDER BY id LIMIT 6`).Scan(&cs.Products).Error; err != nil {
		return cs, fmt.Errorf("lab counters: products: %w", err)
	}
	if err := db.Raw(`SELECT u.name AS "user", coalesce(a.balance, 0) AS balance FROM users u
		LEFT JOIN points_accounts a ON a.user_id = u.id WHERE u.name NOT LIKE 'lab-%' ORDER BY u.id LIMIT 6`).
		Scan(&cs.Balances).Error; err != nil {
		return cs, fmt.Errorf("lab counters: balances: %w", err)
	}
	cs.PointsConsumer = l.poller.status()
	return cs, nil
}

func (l *Live) countersHandler(c echo.Context) error {
	cs, err := l.counters(c.Request().Context())
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, cs)
}
