package orders

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/auth"
	"idemshop/internal/idempotency"
	"idemshop/internal/platform/problem"
)

// CallbackCounter counts an order's signed payment callbacks: received, and of those applied. The
// callback audit owns them (callback.Service.Counts); the order page only shows them, so this package
// does not import the callback guard.
type CallbackCounter interface {
	Counts(ctx context.Context, orderID int64) (received, applied int64, err error)
}

// Handler holds the order routes.
type Handler struct {
	repo      *Repository
	runner    idempotency.Runner
	callbacks CallbackCounter
}

// NewHandler returns the order routes; runner guards POST /v1/orders, callbacks fills the order page's
// callback counts.
func NewHandler(repo *Repository, runner idempotency.Runner, callbacks CallbackCounter) (*Handler, error) {
	if repo == nil || runner == nil || callbacks == nil {
		return nil, errors.New("orders: NewHandler needs a repository, a runner and a callback counter")
	}
	return &Handler{repo: repo, runner: runner, callbacks: callbacks}, nil
}

// Mount adds the routes to g, which must already authenticate.
func (h *Handler) Mount(g *echo.Group) {
	g.GET("/products", h.listProducts)
	g.POST("/orders", h.createOrder)
	g.GET("/orders/:id", h.getOrder)
}

// orderJSON fixes the wire format: created_at in UTC, RFC 3339 with microseconds (PostgreSQL's precision).
type orderJSON struct {
	ID          int64  `json:"id"`
	Status      Status `json:"status"`
	ProductID   int64  `json:"product_id"`
	Quantity    int    `json:"quantity"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	CreatedAt   string `json:"created_at"`
}

// orderWithCallbacks is GET /v1/orders/{id}: the order plus "refunded_cents" and
// "callbacks":{"received":N,"applied":M}, so an operator sees at a glance that 3 identical callbacks
// arrived and 1 was applied, and a customer how much of a PAID order's amount the platform has given
// back (partial refunds add up; the order becomes REFUNDED only at the full amount).
type orderWithCallbacks struct {
	orderJSON
	// RefundedCents is in minor units of Currency, 0..amount_cents.
	RefundedCents int64          `json:"refunded_cents"`
	Callbacks     callbackCounts `json:"callbacks"`
}

type callbackCounts struct {
	Received int64 `json:"received"`
	Applied  int64 `json:"applied"`
}

func toJSON(o Order) orderJSON {
	return orderJSON{ID: o.ID, Status: o.Status, ProductID: o.ProductID, Quantity: o.Quantity,
		AmountCents: o.AmountCents, Currency: o.Currency,
		CreatedAt: o.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00")}
}

func (h *Handler) listProducts(c echo.Context) error {
	ps, err := h.repo.Products(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ps)
}

// createOrder is POST /v1/orders. The decode, validation and insert all run inside the idempotency
// transaction, so a refused request rolls back its key row and a corrected retry with the key runs.
func (h *Handler) createOrder(c echo.Context) error {
	u, err := auth.MustUser(c)
	if err != nil {
		return err
	}
	return h.runner.Run(c, u.ID, func(ctx context.Context, tx *gorm.DB, body []byte) (int, any, error) {
		var req CreateRequest
		if err := problem.DecodeJSON(body, &req); err != nil {
			return 0, nil, err
		}
		if err := req.Validate(); err != nil {
			return 0, nil, err
		}
		o, err := h.repo.Create(ctx, tx, u.ID, req)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusCreated, toJSON(o), nil
	})
}

func (h *Handler) getOrder(c echo.Context) error {
	u, err := auth.MustUser(c)
	if err != nil {
		return err
	}
	id, ok := ParseID(c.Param("id"))
	if !ok {
		return ErrOrderNotFound
	}
	o, err := h.repo.Get(c.Request().Context(), u.ID, id)
	if err != nil {
		return err
	}
	received, applied, err := h.callbacks.Counts(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, orderWithCallbacks{orderJSON: toJSON(o), RefundedCents: o.RefundedCents,
		Callbacks: callbackCounts{Received: received, Applied: applied}})
}
