// Package paymock is payments-mock: an in-memory payment platform that misbehaves on purpose. It takes
// payments and refunds, answers the query API the sweeper relies on, and sends signed callbacks that it
// duplicates, delays, reorders and resends on demand (the chaos settings), so that the shop's guards have
// a real adversary. docs/payments-mock.md is the user guide.
//
// State lives in memory and dies with the process, as befits a stand-in for a third party.
package paymock

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/platform/config"
)

// DefaultRetrySchedule is the compressed backoff between callback attempts: a real platform retries
// over hours; the demo needs the whole ladder (8 attempts) to finish within about a minute.
func DefaultRetrySchedule() []time.Duration {
	return []time.Duration{
		500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 15 * time.Second, 30 * time.Second,
	}
}

// maxScheduleLen bounds the attempts of one delivery (len(RetrySchedule)+1).
const maxScheduleLen = 32

// Config is the platform's behaviour. Durations are wall-clock.
type Config struct {
	// Secret signs every callback (paysig); it must not be empty.
	Secret []byte
	// AutoApproveDelay approves each new payment this long after it is created; 0 leaves payments
	// PENDING until POST /v1/payments/{id}/approve or /decline.
	AutoApproveDelay time.Duration
	// RetrySchedule is the wait before attempt 2, 3, ...; a delivery makes len+1 attempts at most.
	RetrySchedule []time.Duration
	// CallbackTimeout bounds one callback POST, connect to last body byte.
	CallbackTimeout time.Duration
	// CreateTimeoutDelay is how long a create chosen by create_timeout_rate holds the answer after it
	// committed the payment, before answering 504 (a client with a shorter timeout sees its own timeout).
	CreateTimeoutDelay time.Duration
	// AdminToken, when set, is required as a bearer token on /admin routes from anywhere; when empty,
	// /admin answers only to loopback peers.
	AdminToken string
	// DeliveryLogLimit is how many attempts GET /admin/deliveries keeps (oldest dropped first).
	DeliveryLogLimit int
	// Chaos is the initial chaos; Chaos.Seed seeds the RNG.
	Chaos Chaos
	// Now is the clock for stored timestamps and signatures; nil means time.Now.
	Now func() time.Time
	// IDTag, when set, goes into every id the platform hands out: pay_<tag>_1, evt_<tag>_1, ... The
	// ids are counters, so a platform started again counts from 1 again; a shop whose database
	// outlived the first one would take the new evt_7 for the old one (a refund answered duplicate or
	// refused) and refund the new pay_3 when it asked to refund the old. payments-mock therefore starts
	// with a tag of its own (ID_TAG, or NewIDTag); in-process tests leave it empty (pay_1, evt_1).
	IDTag string
}

// NewIDTag returns a fresh id tag: 8 random lowercase hex digits.
func NewIDTag() string {
	var b [4]byte
	_, _ = cryptorand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Platform is the mock payment platform: its store, chaos engine and callback dispatcher.
type Platform struct {
	cfg     Config
	store   *store
	chaos   *chaosEngine
	metrics *metrics
	logger  *slog.Logger
	client  *http.Client

	// Background work (auto-approve timers, deliveries) is tracked so that Close can end it. waitCtx
	// ends the waits (timers, backoff) as soon as Close starts; sendCtx ends in-flight POSTs only when
	// Close's own deadline passes, so an attempt already on the wire gets to finish.
	mu        sync.Mutex
	closed    bool
	wg        sync.WaitGroup
	waitCtx   context.Context
	stopWaits context.CancelFunc
	sendCtx   context.Context
	stopSends context.CancelFunc
	// holdCtx ends the answers that create_timeout holds (EndHeldAnswers).
	holdCtx   context.Context
	stopHolds context.CancelFunc
}

// New builds a platform. logger and reg must not be nil; cfg is validated.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Platform, error) {
	if logger == nil || reg == nil {
		return nil, errors.New("paymock: New needs a logger and a registerer")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ce, err := newChaosEngine(cfg.Chaos)
	if err != nil {
		return nil, fmt.Errorf("paymock: %w", err)
	}
	p := &Platform{
		cfg: cfg, store: newStore(cfg.Now, cfg.DeliveryLogLimit, cfg.IDTag), chaos: ce, metrics: newMetrics(reg),
		logger: logger, client: newCallbackClient(cfg.CallbackTimeout),
	}
	p.waitCtx, p.stopWaits = context.WithCancel(context.Background())
	p.sendCtx, p.stopSends = context.WithCancel(context.Background())
	p.holdCtx, p.stopHolds = context.WithCancel(context.Background())
	return p, nil
}

// EndHeldAnswers gives every create that create_timeout holds its 504 now, and every later one at once.
// A shutdown calls it when it begins: the HTTP server's drain waits for the handlers, and a held answer
// (CreateTimeoutDelay, 10 s by default) would outlast a shorter SHUTDOWN_TIMEOUT. The payment is
// committed either way; only the wait is cut.
func (p *Platform) EndHeldAnswers() { p.stopHolds() }

func (c Config) validate() error {
	var errs []error
	if len(c.Secret) == 0 {
		errs = append(errs, errors.New("the Secret must not be empty"))
	}
	if c.AutoApproveDelay < 0 {
		errs = append(errs, errors.New("AutoApproveDelay must be >= 0"))
	}
	if len(c.RetrySchedule) > maxScheduleLen-1 {
		errs = append(errs, fmt.Errorf("RetrySchedule has more than %d steps", maxScheduleLen-1))
	}
	for _, d := range c.RetrySchedule {
		if d < 0 {
			errs = append(errs, errors.New("RetrySchedule steps must be >= 0"))
			break
		}
	}
	if c.CallbackTimeout <= 0 {
		errs = append(errs, errors.New("CallbackTimeout must be > 0"))
	}
	if c.CreateTimeoutDelay <= 0 {
		errs = append(errs, errors.New("CreateTimeoutDelay must be > 0"))
	}
	if c.DeliveryLogLimit <= 0 {
		errs = append(errs, errors.New("DeliveryLogLimit must be > 0"))
	}
	if c.IDTag != "" && !config.ValidIDTag(c.IDTag) {
		errs = append(errs, fmt.Errorf("IDTag %q must be 1 to 16 lowercase letters and digits", c.IDTag))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("paymock: config: %w", err)
	}
	return nil
}

// newCallbackClient sets every timeout: a receiver that accepts the connection and never answers must
// cost one attempt, not a stuck goroutine. Redirects are not followed; a 3xx is an answer to retry.
func newCallbackClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = timeout
	tr.ResponseHeaderTimeout = timeout
	tr.ExpectContinueTimeout = time.Second
	tr.IdleConnTimeout = 90 * time.Second
	tr.MaxIdleConnsPerHost = MaxDuplicates
	return &http.Client{
		Timeout:       timeout,
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Chaos returns the current chaos settings.
func (p *Platform) Chaos() Chaos { return p.chaos.settings() }

// Deliveries returns a copy of the delivery log, oldest first.
func (p *Platform) Deliveries() []Attempt { return p.store.attempts("", "") }

// goTracked runs fn in a goroutine that Close waits for. It refuses (false) once Close has begun, so
// nothing new starts during shutdown.
func (p *Platform) goTracked(fn func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Go(fn)
	return true
}

// Close stops the background work: no new deliveries or timers start, pending auto-approvals and backoff
// waits end at once (their deliveries are abandoned; state is in memory anyway), and attempts already
// on the wire may finish until ctx ends, when they are cancelled too. Close returns ctx's error if it
// had to cancel attempts.
func (p *Platform) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stopHolds()
	p.stopWaits()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		p.stopSends()
		return nil
	case <-ctx.Done():
		p.stopSends()
		<-done // every attempt honours sendCtx, so this is quick
		return fmt.Errorf("paymock: close: in-flight callbacks cancelled: %w", ctx.Err())
	}
}

// scheduleAutoApprove approves id after AutoApproveDelay, unless Close comes first.
func (p *Platform) scheduleAutoApprove(id string) {
	if p.cfg.AutoApproveDelay <= 0 {
		return
	}
	p.goTracked(func() {
		t := time.NewTimer(p.cfg.AutoApproveDelay)
		defer t.Stop()
		select {
		case <-p.waitCtx.Done():
			return
		case <-t.C:
		}
		if _, err := p.approve(id); err != nil {
			// Only possible when the payment was settled by the API meanwhile; that one wins.
			p.logger.Debug("auto-approve skipped", "payment_id", id, "err", err)
		}
	})
}

// approve is the payer saying yes; the platform then declines amounts ending in DeclineSuffixCents.
func (p *Platform) approve(id string) (Payment, error) {
	pay, err := p.store.payment(id)
	if err != nil {
		return Payment{}, err
	}
	to := StatusSuccess
	if declines(pay.AmountCents) {
		to = StatusFailed
	}
	return p.settle(id, to)
}

func (p *Platform) settle(id string, to Status) (Payment, error) {
	pay, ev, err := p.store.settle(id, to)
	if err != nil {
		return pay, err
	}
	if ev != nil {
		p.dispatch(pay, *ev, "settle", 0, nil)
	}
	return pay, nil
}
