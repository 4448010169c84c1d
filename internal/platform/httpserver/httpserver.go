// Package httpserver builds the Echo instance every binary shares (request ids, request-scoped logging,
// body limit, panic recovery, RFC 9457 errors), the ops routes /healthz, /readyz and /metrics, and runs
// it behind an http.Server with every timeout set and a graceful shutdown.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/problem"
)

// Config holds the server limits. Durations are wall-clock; BodyLimit is in bytes.
type Config struct {
	Addr              string
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration
	BodyLimit         int64
}

// New returns an Echo instance with the shared middleware chain. Every request gets an X-Request-ID
// (kept from the client when present) and a logger carrying it, reachable with logging.From(ctx).
// translate classifies errors no handler did (httpproblem.Handler); orders passes postgres.TranslateError.
func New(logger *slog.Logger, reg prometheus.Registerer, bodyLimit int64, translate ...func(error) error) *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = httpproblem.Handler(func(c echo.Context) *slog.Logger {
		return logging.From(c.Request().Context())
	}, translate...)

	reqDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "idemshop_http_request_duration_seconds",
		Help:    "HTTP request latency by route pattern, method and status code.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"route", "method", "code"})
	reg.MustRegister(reqDuration)

	// HEAD is answered as GET would be, without the body (RFC 9110 §9.3.2: a server that supports GET
	// on a resource supports HEAD on it too). Echo routes HEAD only where a route names it, so a HEAD on
	// an order that exists was a 404. The request is routed as a GET, then gets its method back before
	// anything else sees it: the handler and the access log see HEAD, and net/http, which answers the
	// same request, drops the body itself.
	e.Pre(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if r := c.Request(); r.Method == http.MethodHead {
				r.Method = http.MethodGet
				c.Set(headKey, true)
			}
			return next(c)
		}
	})
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Get(headKey) != nil {
				c.Request().Method = http.MethodHead
			}
			// The router found the path but not the method (405, or OPTIONS): the Allow header it
			// writes lists the routed methods, and HEAD goes wherever GET does.
			if _, ok := c.Get(echo.ContextKeyHeaderAllow).(string); ok {
				res := c.Response()
				res.Before(func() {
					if allow := res.Header().Get(echo.HeaderAllow); allow != "" {
						res.Header().Set(echo.HeaderAllow, allowWithHead(allow))
					}
				})
			}
			return next(c)
		}
	})

	// A client's X-Request-ID is kept (it ties our logs to theirs) only if it sent one, short and visible
	// ASCII; otherwise a fresh one replaces it.
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if _, ok := clientRequestID(c.Request().Header); !ok {
				c.Request().Header.Del(echo.HeaderXRequestID)
			}
			return next(c)
		}
	})
	e.Use(middleware.RequestID())
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id := c.Response().Header().Get(echo.HeaderXRequestID)
			req := c.Request()
			c.SetRequest(req.WithContext(logging.With(req.Context(), logger.With("request_id", id))))
			start := time.Now()
			err := next(c)
			if err != nil {
				// Render the problem now so the access log and the metric see the real status.
				c.Error(err)
			}
			status := c.Response().Status
			reqDuration.WithLabelValues(c.Path(), metricMethod(req.Method), strconv.Itoa(status)).Observe(time.Since(start).Seconds())
			level := slog.LevelInfo
			if status < 400 && opsPaths[req.URL.Path] {
				level = slog.LevelDebug
			}
			ctx := c.Request().Context()
			logging.From(ctx).Log(ctx, level, "http request",
				"method", req.Method, "path", req.URL.Path, "status", status,
				"duration_ms", float64(time.Since(start).Microseconds())/1000)
			return nil
		}
	})
	e.Use(middleware.Recover())
	e.Use(middleware.BodyLimit(strconv.FormatInt(bodyLimit, 10)))
	e.Use(refuseContentCodings)
	return e
}

// refuseContentCodings answers 415 to a body sent with a content coding (RFC 9110 §8.4), before any
// handler reads it, and names the one coding read in Accept-Encoding (§15.5.16). No route decodes one:
// a gzip body was read as JSON and refused for its syntax, and a plain body labelled br was taken as it
// was (a helper's finding, 2026-12-06). A request without a body is left alone.
func refuseContentCodings(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.ContentLength == 0 {
			return next(c)
		}
		for _, v := range req.Header.Values(echo.HeaderContentEncoding) {
			for coding := range strings.SplitSeq(v, ",") {
				if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
					c.Response().Header().Set(echo.HeaderAcceptEncoding, "identity")
					return problem.ErrContentEncoding
				}
			}
		}
		return next(c)
	}
}

// metricMethod is the method label of a request: its method if RFC 9110 §9 defines it (or PATCH),
// else "OTHER". Any token is a valid method, and each label value is a series /metrics keeps for
// ever: a client that made up methods (a 405 each) grew every scrape by megabytes, for good.
func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// allowWithHead is an Allow header value ("OPTIONS, GET, POST") with HEAD added if it lists GET.
func allowWithHead(allow string) string {
	methods := strings.Split(allow, ", ")
	if slices.Contains(methods, http.MethodGet) && !slices.Contains(methods, http.MethodHead) {
		return allow + ", " + http.MethodHead
	}
	return allow
}

// headKey marks, in the echo.Context, a HEAD request routed as a GET.
const headKey = "httpserver.head"

// opsPaths are polled by probes, Prometheus and the lab page (every second): their successful requests
// are logged at DEBUG, so that an INFO log shows the traffic of the API. A failure is logged at INFO.
var opsPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// AnswerReserve is the part of HTTP_WRITE_TIMEOUT kept for writing a request's answer once Deadline has
// ended its work: a quarter, at most 1 s. The server's write deadline runs from the request's header
// on, so an answer written at that instant is not sent: the client saw the connection close without a
// status (the 503 that the end of the work gives was logged, never received).
func AnswerReserve(writeTimeout time.Duration) time.Duration { return min(writeTimeout/4, time.Second) }

// WorkTime is how long Deadline lets a request work: writeTimeout less its AnswerReserve.
func WorkTime(writeTimeout time.Duration) time.Duration {
	return writeTimeout - AnswerReserve(writeTimeout)
}

// Deadline ends each request's context after WorkTime(writeTimeout) (HTTP_WRITE_TIMEOUT: the server can
// no longer write an answer after it), except on the paths in except, which keep their own (a stream).
// A request's database work goes by its context: a connection that stops answering without closing
// (half-open) held a request, and its pooled connection, for good, since the server-side statement
// timeout never starts on a statement that never reached the server. Its end is a timeout of the
// driver's, which the database's error translation makes a 503, written within the reserve.
func Deadline(writeTimeout time.Duration, except ...string) echo.MiddlewareFunc {
	work := WorkTime(writeTimeout)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if slices.Contains(except, c.Path()) {
				return next(c)
			}
			ctx, cancel := context.WithTimeout(c.Request().Context(), work)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	}
}

// Check is one readiness probe. A failing Critical check makes /readyz answer 503; a failing
// non-critical one (Redis, an efficiency layer only) makes it answer 200 with status "degraded".
type Check struct {
	Name     string
	Critical bool
	Probe    func(ctx context.Context) error
}

// Readiness is the /readyz body: {"status":"ok"|"degraded"|"unavailable","checks":{"postgres":"ok",...}}.
type Readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// MountOps adds GET /healthz (process alive), GET /readyz (dependencies reachable, each probe bounded by
// probeTimeout) and GET /metrics (Prometheus exposition from g).
//
// The probes run at once, so /readyz answers within probeTimeout however many dependencies stop
// answering: run one after the other, two blackholed ones made a 2 s probe answer in 4 s, and a
// prober whose own timeout sat between the two saw a timeout instead of the 503 and its reasons (a
// partition tester's finding, 2026-12-07).
func MountOps(e *echo.Echo, g prometheus.Gatherer, probeTimeout time.Duration, checks ...Check) {
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", func(c echo.Context) error {
		r := Readiness{Status: "ok", Checks: make(map[string]string, len(checks))}
		code := http.StatusOK
		errs := make([]error, len(checks))
		var wg sync.WaitGroup
		for i, chk := range checks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(c.Request().Context(), probeTimeout)
				defer cancel()
				errs[i] = chk.Probe(ctx)
			}()
		}
		wg.Wait()
		for i, chk := range checks {
			err := errs[i]
			if err == nil {
				r.Checks[chk.Name] = "ok"
				continue
			}
			r.Checks[chk.Name] = "down: " + err.Error()
			if chk.Critical {
				r.Status, code = "unavailable", http.StatusServiceUnavailable
			} else if r.Status == "ok" {
				r.Status = "degraded"
			}
		}
		return c.JSON(code, r)
	})
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{})))
}

// Run serves e on cfg.Addr until ctx is cancelled, then shuts down gracefully: it stops accepting, waits
// up to cfg.ShutdownTimeout for in-flight requests, and returns. ready, when non-nil, receives the bound
// address once the listener is open (useful with ":0").
func Run(ctx context.Context, e *echo.Echo, cfg Config, ready func(addr net.Addr)) error {
	ln, err := Listen(cfg.Addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	return Serve(ctx, ln, e, cfg)
}

// Listen opens the TCP listener for addr. A process that must answer /healthz while it still waits for
// its dependencies listens first, so that a taken port fails it at once rather than after the wait.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// NewServer is the http.Server for h with cfg's timeouts (tests serve through it too, so that they meet
// the timeouts the binaries have).
func NewServer(h http.Handler, cfg Config) *http.Server {
	return &http.Server{
		Addr:              cfg.Addr,
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}
}

// Serve is Run on an open listener with any handler (a Starting gate, say); it closes ln.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, cfg Config) error {
	srv := NewServer(h, cfg)
	open := &openConns{state: make(map[net.Conn]http.ConnState)}
	srv.ConnState = open.track
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// A connection still open at SHUTDOWN_TIMEOUT (a slow body, a silent client, a request in its
		// work) held the process there, which then exited 1 without closing it. It is closed now,
		// which ends its request's context; the client retries with its key, as after any cut. The
		// count goes into the WARN: the cut requests are logged unevenly, or not at all.
		n := open.busy()
		_ = srv.Close()
		<-errc
		return fmt.Errorf("%w (%d connections): %w", ErrDrainCut, n, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// openConns follows the server's connections through its ConnState hook, to count those a shutdown
// waited for in vain.
type openConns struct {
	mu    sync.Mutex
	state map[net.Conn]http.ConnState
}

func (o *openConns) track(c net.Conn, s http.ConnState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s == http.StateClosed || s == http.StateHijacked {
		delete(o.state, c)
		return
	}
	o.state[c] = s
}

// busy is how many connections are open and not idle: a request in its work or still being read, or a
// client that connected and has sent nothing yet.
func (o *openConns) busy() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, s := range o.state {
		if s != http.StateIdle {
			n++
		}
	}
	return n
}

// ErrDrainCut is Serve's answer when connections were still open SHUTDOWN_TIMEOUT after the signal:
// it closed them. A stop that kept its bound, worth a WARN, not a failed exit (docs/testing.md:
// SIGTERM exits 0).
var ErrDrainCut = errors.New("connections still open at SHUTDOWN_TIMEOUT were closed")

// clientRequestID returns the client's X-Request-ID when it sent exactly one and it is valid. Sent
// twice, it is not "one" id: neither is the client's.
func clientRequestID(h http.Header) (string, bool) {
	ids := h.Values(echo.HeaderXRequestID)
	if len(ids) != 1 || !validRequestID(ids[0]) {
		return "", false
	}
	return ids[0], true
}

// validRequestID accepts 1..128 visible ASCII characters (0x21–0x7E: no space, no control).
func validRequestID(id string) bool {
	if len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
