package httpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
)

// Starting is the handler of a process that is alive but still waiting for its dependencies
// (docs/reliability.md, "Start-up order"). Until Open it answers /healthz 200, /readyz 503 with what it
// waits for, /metrics from its gatherer, and everything else 503 with Retry-After; after Open every
// request goes to the application's handler, which has its own /healthz and /readyz. An orchestrator
// therefore keeps the process alive (liveness) and sends it no traffic (readiness) while it waits,
// instead of restarting it in a loop.
type Starting struct {
	metrics http.Handler
	next    atomic.Pointer[http.Handler]

	mu      sync.Mutex
	waiting map[string]string
}

// NewStarting returns a gate that serves g on /metrics while it is closed.
func NewStarting(g prometheus.Gatherer) *Starting {
	return &Starting{metrics: promhttp.HandlerFor(g, promhttp.HandlerOpts{}), waiting: map[string]string{}}
}

// Waiting records that the process waits for dependency name, and why (its last error); /readyz shows it.
func (s *Starting) Waiting(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting[name] = "waiting: " + err.Error()
}

// Up records that dependency name answered.
func (s *Starting) Up(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting[name] = "ok"
}

// Open hands every later request to h.
func (s *Starting) Open(h http.Handler) { s.next.Store(&h) }

func (s *Starting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := s.next.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	// As the application's answers (httpserver.New): the client's one id if it is valid, else a new one.
	id, ok := clientRequestID(r.Header)
	if !ok {
		id = rand.Text()
	}
	w.Header().Set(echo.HeaderXRequestID, id)
	switch r.URL.Path {
	case "/healthz":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case "/readyz":
		s.mu.Lock()
		checks := make(map[string]string, len(s.waiting))
		for k, v := range s.waiting {
			checks[k] = v
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusServiceUnavailable, Readiness{Status: "starting", Checks: checks})
	case "/metrics":
		s.metrics.ServeHTTP(w, r)
	default:
		body, err := httpproblem.Document(problem.ErrUnavailable.WithDetail("starting: waiting for "+s.waitingFor()), httpproblem.Instance(r.URL))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", httpproblem.ContentType)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(body)
	}
}

func (s *Starting) waitingFor() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for k, v := range s.waiting {
		if v != "ok" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "start-up to finish"
	}
	return strings.Join(names, ", ")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Early is a server started before the process's dependencies are up: it serves a Starting gate on
// its listener from the first moment, and its Fail and Wait end the process either way. Both orders
// and points-consumer start this way (docs/reliability.md, "Start-up order").
type Early struct {
	*Starting
	name   string
	ctx    context.Context
	stop   context.CancelFunc
	logger *slog.Logger
	served chan error
	addr   net.Addr
}

// Addr is the address bound, which the ready line logs: with HTTP_ADDR=127.0.0.1:0 the port is the
// kernel's choice, and the configured address named port 0.
func (e *Early) Addr() net.Addr { return e.addr }

// ServeEarly listens on cfg.Addr (a taken port fails at once) and serves a Starting gate with reg's
// metrics until ctx is done. stop cancels ctx: a server that fails takes the wait and the workers down
// with it. name is the process's, for its log lines.
func ServeEarly(ctx context.Context, stop context.CancelFunc, cfg Config, reg prometheus.Gatherer, logger *slog.Logger,
	name string) (*Early, error) {
	ln, err := Listen(cfg.Addr)
	if err != nil {
		return nil, err
	}
	e := &Early{Starting: NewStarting(reg), name: name, ctx: ctx, stop: stop, logger: logger, served: make(chan error, 1),
		addr: ln.Addr()}
	go func() {
		err := Serve(ctx, ln, e.Starting, cfg)
		if errors.Is(err, ErrDrainCut) {
			logger.Warn(name+": "+ErrDrainCut.Error(), "shutdown_timeout", cfg.ShutdownTimeout)
			err = nil
		}
		stop()
		e.served <- err
	}()
	return e, nil
}

// Fail ends a start-up that did not get to open the gate: a signal during the wait is a clean exit (the
// server's own result), anything else is err.
func (e *Early) Fail(err error) error {
	cancelled := e.ctx.Err() != nil
	e.stop()
	serr := <-e.served
	if cancelled {
		e.logger.Info(e.name + " stopped before it was ready")
		return serr
	}
	return err
}

// Wait returns the server's result once it has stopped (ctx done, or it failed).
func (e *Early) Wait() error { return <-e.served }

// WaitWithin waits for a process's workers at most d after its server stopped, and reports whether they
// ended. Every step of their drain is bounded, but amqp091's calls to a broker that stopped answering
// are not all: past the bound, a process exits anyway (what it held goes back, as after a crash).
func WaitWithin(workers *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
