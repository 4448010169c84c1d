package points

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/auth"
)

// ledgerLimit bounds the entries GET /v1/points returns (the newest first); the balance covers all.
const ledgerLimit = 100

// Handler serves GET /v1/points.
type Handler struct {
	ledger *Ledger
}

// NewHandler returns the points routes over db.
func NewHandler(db *gorm.DB) (*Handler, error) {
	if db == nil {
		return nil, errors.New("points: NewHandler needs a db")
	}
	l, err := NewLedger(db)
	if err != nil {
		return nil, err
	}
	return &Handler{ledger: l}, nil
}

// Mount adds the routes to g, which must already authenticate (auth.Middleware).
func (h *Handler) Mount(g *echo.Group) {
	g.GET("/points", h.get)
}

type entryJSON struct {
	BizID     string `json:"biz_id"`
	Delta     int64  `json:"delta"`
	Reason    string `json:"reason"`
	CreatedAt string `json:"created_at"`
}

type pointsJSON struct {
	Balance int64       `json:"balance"`
	Ledger  []entryJSON `json:"ledger"`
}

// get is GET /v1/points: the caller's own balance and newest ledger entries. A user who never earned
// points has balance 0 and an empty ledger, not a 404.
func (h *Handler) get(c echo.Context) error {
	u, err := auth.MustUser(c)
	if err != nil {
		return err
	}
	balance, entries, err := h.ledger.Balance(c.Request().Context(), u.ID, ledgerLimit)
	if err != nil {
		return err
	}
	out := pointsJSON{Balance: balance, Ledger: make([]entryJSON, 0, len(entries))}
	for _, e := range entries {
		out.Ledger = append(out.Ledger, entryJSON{BizID: e.BizID, Delta: e.Delta, Reason: e.Reason,
			// the orders' wire format: UTC, RFC 3339 with microseconds (PostgreSQL's precision)
			CreatedAt: e.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00")})
	}
	return c.JSON(http.StatusOK, out)
}
