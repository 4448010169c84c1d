package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"idemshop/internal/platform/retry"
)

// Bounds of the recovery measurement after each fault. The next fault waits for it, so that one
// fault's window holds one fault.
const (
	readyBound  = 30 * time.Second // until orders' and points-consumer's /readyz both say ok
	probeBound  = 20 * time.Second // until a probe order is created and paid
	pointsBound = 20 * time.Second // until the probe order's points are in the ledger
	watchEvery  = 500 * time.Millisecond
)

// Recovery is how the shop came through one fault. Every time runs from the break (the moment the
// injector started); -1 means "not within its bound".
type Recovery struct {
	HealedS float64 `json:"healed_s"` // the injector had healed what it broke
	ReadyS  float64 `json:"ready_s"`  // orders' and points-consumer's /readyz both answered 200 "ok"
	ProbeS  float64 `json:"probe_s"`  // a probe order was created and paid (201) again
	PointsS float64 `json:"points_s"` // the probe order's points were in the ledger
	// ProbeOrder is the probe order's id; ProbeNote what kept it from recovering, if anything.
	ProbeOrder int64  `json:"probe_order,omitempty"`
	ProbeNote  string `json:"probe_note,omitempty"`
	// WindowS is the fault window: from the break to the probe's payment (or to the end of the
	// measurement when it never came). Errors are the clients' non-2xx answers within it.
	WindowS float64        `json:"window_s"`
	Errors  map[string]int `json:"client_errors"`
	// Served is the clients' 2xx answers while the service was broken (break..healed), by route;
	// Paid and Credited are the orders that became PAID/REFUNDED and the points ledger rows written in
	// the same span (-1: the database could not be read).
	Served   map[string]int `json:"served_while_broken"`
	Paid     int            `json:"paid_while_broken"`
	Credited int            `json:"credited_while_broken"`
	// OrdersReady and PointsReady are what the services' /readyz said during the window, by state
	// ("200 ok", "200 degraded[redis]", "503 unavailable[postgres]", "no answer"), polled every 0.5 s.
	OrdersReady map[string]int `json:"orders_readyz"`
	PointsReady map[string]int `json:"points_readyz"`
	// Restarted lists shop processes that exited by themselves after the fault; the soak restarted them
	// (each such exit is also a "process stays up" violation).
	Restarted []string `json:"restarted,omitempty"`

	windowStart, windowEnd, healed time.Duration
}

// recoverer fires one fault and measures the shop's recovery from it.
type recoverer struct {
	st      *stack
	t0      time.Time
	probe   *workload // the probe's own answers: not counted as the clients'
	user    user
	product product
	n       int
	mu      sync.Mutex
}

// probeProduct is an ample product the platform does not decline at quantity 1.
func probeProduct(ps []product) product {
	for _, p := range ps {
		if !p.Flash && p.Price%100 != declinePrice%100 {
			return p
		}
	}
	return ps[len(ps)-1]
}

// fire injects f and measures: the readiness states during the window, what the clients were served
// while it was broken, then the time to ready, to a probe order created and paid, and to its points.
func (rc *recoverer) fire(ctx context.Context, inj Injector, f *Fault) error {
	start := time.Now()
	rec := &Recovery{ReadyS: -1, ProbeS: -1, PointsS: -1, Paid: -1, Credited: -1, windowStart: start.Sub(rc.t0)}
	paid0, credited0, dbErr0 := rc.progress(ctx)
	watch := rc.watch(ctx)
	err := inj.Inject(ctx, f)
	healed := time.Now()
	rec.healed = healed.Sub(rc.t0)
	rec.HealedS = round2(healed.Sub(start).Seconds())
	if errors.Is(err, ErrNotInjected) {
		watch()
		f.NotInjected = strings.TrimPrefix(err.Error(), ErrNotInjected.Error()+": ")
		return nil
	}
	if paid1, credited1, dbErr1 := rc.progress(ctx); dbErr0 == nil && dbErr1 == nil {
		rec.Paid, rec.Credited = paid1-paid0, credited1-credited0
	}
	rc.measure(ctx, start, rec)
	rec.OrdersReady, rec.PointsReady = watch()
	end := rec.windowStart + time.Duration(rec.ProbeS*float64(time.Second))
	if rec.ProbeS < 0 {
		end = time.Since(rc.t0)
	}
	rec.windowEnd = end
	rec.WindowS = round2((end - rec.windowStart).Seconds())
	f.Recovery = rec
	return err
}

// progress counts the run's paid (or refunded) orders and its points ledger rows.
func (rc *recoverer) progress(ctx context.Context) (paid, credited int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rc.st.dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders WHERE status IN ('PAID', 'REFUNDED')),
		(SELECT count(*) FROM points_ledger)`).Scan(&paid, &credited)
	return paid, credited, err
}

// watch polls both services' /readyz until the returned function is called, which returns the
// states seen, by count.
func (rc *recoverer) watch(ctx context.Context) func() (orders, points map[string]int) {
	orders, points := map[string]int{}, map[string]int{}
	stop := make(chan struct{})
	done := make(chan struct{})
	client := &http.Client{Timeout: 2 * time.Second}
	go func() {
		defer close(done)
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		for range 10_000 {
			o, _ := readiness(ctx, client, rc.st.orders.addr)
			p, _ := readiness(ctx, client, rc.st.points.addr)
			orders[o]++
			points[p]++
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() (map[string]int, map[string]int) {
		close(stop)
		<-done
		return orders, points
	}
}

// readiness is one GET /readyz as a state: "200 ok", "200 degraded[rabbitmq]", "503
// unavailable[postgres]" or "no answer"; ok is status "ok".
func readiness(ctx context.Context, client *http.Client, addr string) (state string, ok bool) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	resp, err := client.Do(req)
	if err != nil {
		return "no answer", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var r struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	_ = json.Unmarshal(b, &r)
	var down []string
	for name, v := range r.Checks {
		if v != "ok" {
			down = append(down, name)
		}
	}
	slices.Sort(down)
	state = fmt.Sprintf("%d %s", resp.StatusCode, r.Status)
	if len(down) > 0 {
		state += "[" + strings.Join(down, ",") + "]"
	}
	return state, resp.StatusCode == http.StatusOK && r.Status == "ok"
}

// measure waits, after the heal, for both services to be ready, then creates and pays a probe order
// and waits for its points. A shop process that exited by itself is restarted (and noted).
func (rc *recoverer) measure(ctx context.Context, start time.Time, rec *Recovery) {
	since := func() float64 { return round2(time.Since(start).Seconds()) }
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyBound)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		for _, p := range []*proc{rc.st.orders, rc.st.points} {
			if !p.running() {
				rec.Restarted = append(rec.Restarted, p.name)
				_ = p.start(context.WithoutCancel(ctx))
			}
		}
		_, okO := readiness(ctx, hc, rc.st.orders.addr)
		_, okP := readiness(ctx, hc, rc.st.points.addr)
		if okO && okP {
			rec.ReadyS = since()
			break
		}
		retry.Sleep(ctx, 100*time.Millisecond)
	}

	rc.mu.Lock()
	rc.n++
	n := rc.n
	rc.mu.Unlock()
	pc := &client{id: 0, w: rc.probe, end: time.Now().Add(probeBound), hardEnd: time.Now().Add(probeBound)}
	bo := newRNG(uint64(n))
	auth := "Bearer " + rc.user.Token
	body := fmt.Appendf(nil, `{"product_id":%d,"quantity":1}`, rc.product.ID)
	id, res := pc.create(ctx, auth, fmt.Sprintf("soak-probe-%d-create", n), body, bo)
	if id == 0 {
		rec.ProbeNote = "probe create: " + res
		return
	}
	rec.ProbeOrder = id
	rc.probe.mu.Lock()
	rc.probe.created[id] = ""
	rc.probe.mu.Unlock()
	pid, res := pc.pay(ctx, auth, id, fmt.Sprintf("soak-probe-%d-pay", n), bo)
	if pid == "" {
		rec.ProbeNote = "probe pay: " + res
		return
	}
	rec.ProbeS = since()
	rc.probe.mu.Lock()
	rc.probe.created[id] = pid
	rc.probe.mu.Unlock()

	deadline = time.Now().Add(pointsBound)
	bizID := fmt.Sprintf("order-paid:%d", id)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		status, credited, err := rc.probeState(ctx, id, bizID)
		if err == nil && credited {
			rec.PointsS = since()
			return
		}
		if err == nil && (status == "FAILED" || status == "REFUND_REQUIRED" || status == "CANCELLED") {
			rec.ProbeNote = "probe order ended " + status + ": no points to wait for"
			return
		}
		retry.Sleep(ctx, 200*time.Millisecond)
	}
	rec.ProbeNote = fmt.Sprintf("probe order %d: no points within %s", id, pointsBound)
}

func (rc *recoverer) probeState(ctx context.Context, id int64, bizID string) (status string, credited bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rc.st.dbURL)
	if err != nil {
		return "", false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `SELECT status, EXISTS (SELECT 1 FROM points_ledger WHERE biz_id = $2)
		FROM orders WHERE id = $1`, id, bizID).Scan(&status, &credited)
	return status, credited, err
}

// attribute fills each fault's Errors (the clients' non-2xx answers within its window) and Served
// (their 2xx answers while it was broken) from the timeline, and returns the errors outside every
// window during the run, with the seconds that covers, and those after the run's end (the answers to
// requests in flight then), which the report's total counts too.
func attribute(faults []Fault, timeline []answerAt, runLen time.Duration) (outside, after map[string]int, outsideS float64) {
	outside, after = map[string]int{}, map[string]int{}
	covered := time.Duration(0)
	for i := range faults {
		if r := faults[i].Recovery; r != nil {
			r.Errors, r.Served = map[string]int{}, map[string]int{}
			covered += min(r.windowEnd, runLen) - min(r.windowStart, runLen)
		}
	}
	for _, a := range timeline {
		in := false
		for i := range faults {
			r := faults[i].Recovery
			if r == nil || a.at < r.windowStart || a.at > r.windowEnd {
				continue
			}
			in = true
			if !a.ok {
				r.Errors[a.key]++
			} else if a.at <= r.healed {
				r.Served[a.route]++
			}
		}
		switch {
		case in || a.ok:
		case a.at <= runLen:
			outside[a.key]++
		default:
			after[a.key]++
		}
	}
	return outside, after, round2((runLen - covered).Seconds())
}
