// Package labview is the lab's live view, mounted by orders only with ORDERS_LAB=true: GET /lab, a page
// that shows every guard decision as it happens beside the counters a trainer points at, and
// GET /lab/events, the same decisions as Server-Sent Events. The guards know nothing of it: they report
// to a decisions.Bus (internal/decisions), and this package only reads the bus, the database (counters,
// the points ledger) and points-consumer's /metrics, and proxies the page's controls to payments-mock.
package labview

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/decisions"
	"idemshop/internal/points"
)

//go:embed assets
var assets embed.FS

// Config is what the live view reaches and how long it waits for each.
type Config struct {
	// PaymentsURL is payments-mock's base URL; its admin API holds the chaos settings and the replay.
	PaymentsURL string
	// PaymentsAdminToken is sent as a bearer token to payments-mock's admin API, if set.
	PaymentsAdminToken string
	// PaymentsTimeout bounds one call to payments-mock's admin API.
	PaymentsTimeout time.Duration
	// PointsMetricsURL is points-consumer's /metrics: its duplicate count is what "points suppressed" is
	// made of (a suppressed message writes no ledger row). Empty: not polled.
	PointsMetricsURL string
	// PollInterval is how often the points ledger and points-consumer's /metrics are read.
	PollInterval time.Duration
	// Heartbeat is how often an idle event stream sends a comment line, so that proxies keep it open.
	Heartbeat time.Duration
	// WriteTimeout bounds one write to an event stream: a client that stops reading is dropped.
	WriteTimeout time.Duration
}

// DefaultConfig fills the timings; the URLs come from the caller.
func DefaultConfig() Config {
	return Config{PaymentsTimeout: 3 * time.Second, PollInterval: time.Second, Heartbeat: 15 * time.Second,
		WriteTimeout: 10 * time.Second}
}

// Live is the live view: its routes and its poller.
type Live struct {
	bus    *decisions.Bus
	db     *gorm.DB
	ledger *points.Ledger
	cfg    Config
	logger *slog.Logger
	client *http.Client
	page   *template.Template
	poller *poller
}

// New returns the live view over bus (which the guards report to) and db.
func New(bus *decisions.Bus, db *gorm.DB, cfg Config, logger *slog.Logger) (*Live, error) {
	if bus == nil || db == nil || logger == nil {
		return nil, errors.New("labview: New needs a bus, a db and a logger")
	}
	if cfg.PaymentsURL == "" || cfg.PaymentsTimeout <= 0 || cfg.PollInterval <= 0 || cfg.Heartbeat <= 0 || cfg.WriteTimeout <= 0 {
		return nil, errors.New("labview: Config needs PaymentsURL and positive timings")
	}
	ledger, err := points.NewLedger(db)
	if err != nil {
		return nil, err
	}
	page, err := template.ParseFS(assets, "assets/lab.html")
	if err != nil {
		return nil, err
	}
	l := &Live{bus: bus, db: db, ledger: ledger, cfg: cfg, logger: logger.With("component", "lab-live"),
		client: &http.Client{Timeout: cfg.PaymentsTimeout}, page: page}
	l.poller = &poller{live: l, client: &http.Client{Timeout: min(cfg.PollInterval*2, 5*time.Second)},
		holes: map[int64]time.Time{}}
	return l, nil
}

// Mount adds the live view's routes to e:
//
//	GET  /lab                    the page
//	GET  /lab/lab.js             its script
//	GET  /lab/events[?since=N]   Server-Sent Events: one decision per data: line
//	GET  /lab/counters           stock, balances, callbacks received vs applied, outbox (JSON)
//	GET  /lab/platform/chaos     payments-mock's chaos settings (proxied)
//	PUT  /lab/platform/chaos     change them (proxied: omitted fields keep their value)
//	POST /lab/platform/replay    {"times","parallel","payment_id"}: resend a payment's last event (default: the newest payment)
//	POST /lab/earn               {"user"}: credit 100 points through the points ledger (lab only)
func (l *Live) Mount(e *echo.Echo) {
	e.GET("/lab", l.pageHandler)
	e.GET("/lab/lab.js", l.script)
	e.GET("/lab/events", l.events)
	e.GET("/lab/counters", l.countersHandler)
	e.GET("/lab/platform/chaos", l.getChaos)
	e.PUT("/lab/platform/chaos", l.putChaos)
	e.POST("/lab/platform/replay", l.replay)
	e.POST("/lab/earn", l.earn)
}

// Run polls the points ledger and points-consumer until ctx ends, then closes the bus, which ends
// every open event stream: a graceful shutdown waits for open requests, and a stream never finishes
// on its own.
func (l *Live) Run(ctx context.Context) {
	defer l.bus.Close()
	l.poller.run(ctx)
}

// pageData is what lab.html renders.
type pageData struct {
	Backlog  []decisions.Decision
	Counters counters
	Users    []string
}

func (l *Live) pageHandler(c echo.Context) error {
	ctx := c.Request().Context()
	cs, err := l.counters(ctx)
	if err != nil {
		return err
	}
	var users []string
	if err := l.db.WithContext(ctx).Raw(`SELECT name FROM users WHERE name NOT LIKE 'lab-%' ORDER BY id LIMIT 10`).
		Scan(&users).Error; err != nil {
		return err
	}
	backlog := l.bus.Recent(0)
	if backlog == nil {
		backlog = []decisions.Decision{}
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().WriteHeader(http.StatusOK)
	return l.page.Execute(c.Response(), pageData{Backlog: backlog, Counters: cs, Users: users})
}

func (l *Live) script(c echo.Context) error {
	b, err := assets.ReadFile("assets/lab.js")
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "text/javascript; charset=utf-8", b)
}
