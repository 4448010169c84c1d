// Package bench measures what the guards cost: each guarded path of the shop against its baseline,
// in one run, on the running services (`loadtest bench`). Every measure has a bounded duration and
// concurrency (or rate) and a bounded request count, reports p50/p90/p99/max latency and error counts,
// and then checks the invariants on the database rows: a fast guard that lets a duplicate through is
// worth nothing, so zero violations are required.
//
// The measures:
//
//  1. create order with fresh keys: POST /v1/orders vs the same chain with the key layer off
//     (POST /lab/unsafe/v1/nokey/orders, lab mode);
//  2. replay of completed keys vs fresh keys;
//  3. a signed callback storm (each event 3 times) vs the same SQL transaction run directly by an
//     in-process pgx pool: the database ceiling;
//  4. points consumer with both dedup layers vs a bare consume+ack of the same queue;
//  5. outbox lag (insert to delivery) at a fixed event rate.
//
// HTTP load is generated with vegeta at a fixed concurrency (rate 0 = as fast as the workers go).
// Targets are reported, never asserted: the figures depend on the machine.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"idemshop/internal/lab"
	"idemshop/internal/outbox"
)

// Config bounds a run.
type Config struct {
	// Duration is the measuring time of each side of each measure.
	Duration time.Duration
	// Concurrency is the number of clients (vegeta workers, pool workers) of the throughput measures.
	Concurrency int
	// OutboxRate is the event rate of the outbox lag measure, events/s.
	OutboxRate int
	// Growth adds the growth mode: create p99 with idempotency_keys pre-filled to each of GrowthSizes.
	Growth      bool
	GrowthSizes []int64
	// Processes are the /metrics URLs whose process_resident_memory_bytes is sampled under load
	// (name → URL). loadtest's own RSS is always sampled.
	Processes map[string]string
	// Progress, if set, is told what runs now.
	Progress func(string)
	// Only, if set, runs only the measures of that step: create, callback, consumer, outbox or growth.
	Only string
}

// DefaultGrowthSizes are the idempotency_keys sizes of the growth mode.
var DefaultGrowthSizes = []int64{10_000, 1_000_000, 5_000_000}

func (c *Config) fill() error {
	if c.Duration <= 0 {
		return errors.New("bench: duration must be > 0")
	}
	if c.Duration > 10*time.Minute {
		return errors.New("bench: duration must be at most 10m")
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Concurrency > 256 {
		return errors.New("bench: concurrency must be at most 256")
	}
	if c.OutboxRate <= 0 {
		c.OutboxRate = 500
	}
	if c.OutboxRate > 5000 {
		return errors.New("bench: outbox rate must be at most 5000 events/s")
	}
	switch c.Only {
	case "", "create", "callback", "consumer", "outbox", "growth":
	default:
		return fmt.Errorf("bench: unknown measure %q (create, callback, consumer, outbox, growth)", c.Only)
	}
	if len(c.GrowthSizes) == 0 {
		c.GrowthSizes = DefaultGrowthSizes
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return nil
}

// Stats summarise one side of a measure. Latencies are in milliseconds.
type Stats struct {
	Requests int64          `json:"requests"`
	OK       int64          `json:"ok"`
	Errors   int64          `json:"errors"`
	Seconds  float64        `json:"seconds"`
	RPS      float64        `json:"rps"` // successful operations per second
	P50ms    float64        `json:"p50_ms"`
	P90ms    float64        `json:"p90_ms"`
	P99ms    float64        `json:"p99_ms"`
	MaxMs    float64        `json:"max_ms"`
	Codes    map[string]int `json:"codes,omitempty"`
	ErrorMsg []string       `json:"error_samples,omitempty"`
}

// Result is one line of the report. The first eight fields are the contract's shape (docs/design.md); the rest are extra.
type Result struct {
	Name        string  `json:"name"`
	RPS         float64 `json:"rps"`
	BaselineRPS float64 `json:"baseline_rps"`
	Ratio       float64 `json:"ratio"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	Errors      int64   `json:"errors"`
	Violations  int     `json:"violations"`

	Title            string   `json:"title"`
	P90ms            float64  `json:"p90_ms"`
	MaxMs            float64  `json:"max_ms"`
	Latency          string   `json:"latency"` // what the latency figures time
	Target           string   `json:"target"`
	TargetMet        bool     `json:"target_met"`
	Measured         Stats    `json:"measured"`
	Baseline         *Stats   `json:"baseline,omitempty"`
	ViolationDetails []string `json:"violation_details,omitempty"`
	Note             string   `json:"note,omitempty"`
	Error            string   `json:"error,omitempty"`
	// CPU is what one request cost each side in CPU, by process (create_order_fresh); nil where no
	// process could be read.
	CPU *CPUCost `json:"cpu,omitempty"`
	// CPUPerEvent is the CPU one event cost, in µs by process, over a whole outbox lag run (warm-up
	// included): the load the lag was measured under. Nil where no process could be read.
	CPUPerEvent map[string]float64 `json:"cpu_us_per_event,omitempty"`
	// AfterWrite is an outbox lag measure's lag counted from the end of each write (its answer) instead
	// of its start, in ms, 0 when the delivery came first: the relay's and the broker's part, without
	// the write and the commit's flush. For reference; the target judges the lag from the start.
	AfterWrite *Stats `json:"after_write,omitempty"`

	series []timeSeries // raw latencies, for the HTML plots
}

// timeSeries is one side's latencies, named for a plot legend.
type timeSeries struct {
	name string
	lat  []time.Duration
}

// GrowthPoint is create-order latency at one idempotency_keys size.
type GrowthPoint struct {
	Rows    int64   `json:"rows"`
	RPS     float64 `json:"rps"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	Errors  int64   `json:"errors"`
	FillSec float64 `json:"fill_seconds"`
	// Explain is EXPLAIN (ANALYZE, BUFFERS) of the key insert at this size (rolled back).
	Explain string `json:"explain"`
}

// RSS is the resident memory of one process during the run.
type RSS struct {
	Process  string  `json:"process"`
	MaxMiB   float64 `json:"max_mib"`
	LastMiB  float64 `json:"last_mib"`
	Samples  int     `json:"samples"`
	Error    string  `json:"error,omitempty"`
	TargetOK bool    `json:"target_met"` // < 64 MiB
}

// Report is the whole run.
type Report struct {
	Results []Result      `json:"results"`
	Growth  []GrowthPoint `json:"growth,omitempty"`
	RSS     []RSS         `json:"rss,omitempty"`
	Machine Machine       `json:"machine"`
	Config  struct {
		Duration    string `json:"duration"`
		Concurrency int    `json:"concurrency"`
		OutboxRate  int    `json:"outbox_rate"`
		// OrdersBatchWaitMs is orders' OUTBOX_BATCH_WAIT in ms, read from its /metrics when the run
		// started (outbox.BatchWaitMetric); nil where orders did not say. It moves the outbox lag and
		// the CPU an event costs, so runs with different settings do not compare.
		OrdersBatchWaitMs *float64 `json:"orders_outbox_batch_wait_ms,omitempty"`
	} `json:"config"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	// StealPct is the share of the machine's CPU time, in percent, that its hypervisor gave to other
	// guests during the run (steal in /proc/stat, over every CPU); nil where the kernel does not say.
	// On the 2-core VM the same code measured its worst figures when several percent were stolen
	// (docs/performance.md, 2026-12-03): a run with much steal ran on less than its two cores.
	StealPct *float64 `json:"cpu_steal_pct,omitempty"`
}

// Machine describes where the figures come from.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go"`
	// Kernel is the Linux kernel's release (/proc/sys/kernel/osrelease); empty elsewhere.
	Kernel string `json:"kernel,omitempty"`
	// Autogroup is the kernel's session autogroup scheduling (/proc/sys/kernel/sched_autogroup_enabled):
	// "on", "off", or empty where the kernel has none. When on, the CPU is shared out between sessions
	// first and between their threads second: the stack and loadtest, started from one shell, share one
	// session's share against PostgreSQL and RabbitMQ, each a daemon in a session of its own. On the
	// 2-core machine the outbox lag's p99 at 2,000 events/s was lower with it off in most back-to-back
	// pairs of runs (docs/performance.md), so runs with different settings do not compare.
	Autogroup string `json:"sched_autogroup,omitempty"`
}

// String is the machine as the text and HTML reports name it: "2 CPUs, kernel 6.1.0, sched_autogroup on"
// (the parts that are known).
func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs", m.CPUs)
	if m.Kernel != "" {
		s += ", kernel " + m.Kernel
	}
	if m.Autogroup != "" {
		s += ", sched_autogroup " + m.Autogroup
	}
	return s
}

// thisMachine describes the machine the run is on.
func thisMachine() Machine {
	return Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(),
		Kernel: procSys("kernel/osrelease"), Autogroup: autogroupSetting(procSys("kernel/sched_autogroup_enabled"))}
}

// procSys reads one value under /proc/sys, or "" if there is none (another OS, a kernel without it).
func procSys(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// autogroupSetting names the value of sched_autogroup_enabled: "1" on, "0" off, anything else unknown ("").
func autogroupSetting(v string) string {
	switch v {
	case "1":
		return "on"
	case "0":
		return "off"
	}
	return ""
}

// ordersBatchWait reads orders' OUTBOX_BATCH_WAIT, in ms, from its /metrics URL; nil if there is none
// or it cannot be read (an orders that predates the gauge).
func ordersBatchWait(ctx context.Context, metricsURL string) *float64 {
	if metricsURL == "" || checkLoopback(metricsURL) != nil {
		return nil
	}
	v, err := metricsValue(ctx, &http.Client{Timeout: time.Second}, metricsURL, outbox.BatchWaitMetric)
	if err != nil {
		return nil
	}
	ms := round(v * 1000)
	return &ms
}

// Passed: every measure ran and no invariant broke. Targets do not count.
func (r Report) Passed() bool {
	for _, res := range r.Results {
		if res.Error != "" || res.Violations > 0 {
			return false
		}
	}
	return true
}

// Run runs every measure in turn against env (orders in lab mode, with its relay, and a points
// consumer) and returns the report. A measure that fails to run is reported with its error; the
// others still run.
func Run(ctx context.Context, env *lab.Env, cfg Config) (Report, error) {
	if err := cfg.fill(); err != nil {
		return Report{}, err
	}
	if err := checkLoopback(env.OrdersURL); err != nil {
		return Report{}, err
	}
	rep := Report{Started: time.Now().UTC(), Machine: thisMachine()}
	cpu0, cpuKnown := readCPUTimes()
	rep.Config.Duration, rep.Config.Concurrency, rep.Config.OutboxRate = cfg.Duration.String(), cfg.Concurrency, cfg.OutboxRate
	rep.Config.OrdersBatchWaitMs = ordersBatchWait(ctx, cfg.Processes["orders"])

	sampler := startRSS(ctx, env, cfg.Processes)
	r := &runner{env: env, cfg: cfg}
	type step struct {
		key, title string
		run        func(context.Context) []Result
	}
	steps := []step{
		{"create", "create order", r.createOrder},
		{"callback", "callback storm", r.callbackStorm},
		{"consumer", "points consumer", r.consumer},
		{"outbox", "outbox lag", r.outboxLag},
	}
	if cfg.Growth || cfg.Only == "growth" {
		steps = append(steps, step{"growth", "growth", func(ctx context.Context) []Result {
			res, pts := r.growth(ctx)
			rep.Growth = pts
			return res
		}})
	}
	for _, s := range steps {
		if ctx.Err() != nil {
			break
		}
		if cfg.Only != "" && s.key != cfg.Only {
			continue
		}
		cfg.Progress("bench: " + s.title)
		rep.Results = append(rep.Results, s.run(ctx)...)
	}
	rep.RSS = sampler.stop()
	rep.Seconds = time.Since(rep.Started).Seconds()
	if cpu1, ok := readCPUTimes(); ok && cpuKnown {
		rep.StealPct = cpu1.stealPctSince(cpu0)
	}
	return rep, ctx.Err()
}

// cpuTimes is the machine's aggregate CPU line of /proc/stat, in clock ticks: all the time its CPUs
// spent (user, nice, system, idle, iowait, irq, softirq, steal) and steal alone.
type cpuTimes struct{ total, steal uint64 }

// readCPUTimes reads /proc/stat; ok is false where there is none or its first line is not the "cpu" one.
func readCPUTimes() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseCPULine(line)
}

// parseCPULine parses "cpu  user nice system idle iowait irq softirq steal [guest guest_nice]" (guest
// time is already counted in user and nice, so it is left out of the total). A kernel older than 2.6.11
// has no steal field: not known.
func parseCPULine(line string) (cpuTimes, bool) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, false
	}
	var t cpuTimes
	for i, v := range f[1:9] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}, false
		}
		t.total += n
		if i == 7 {
			t.steal = n
		}
	}
	return t, true
}

// stealPctSince is the steal share of the CPU time between before and t, in percent; nil if no time
// passed or the counters went backwards.
func (t cpuTimes) stealPctSince(before cpuTimes) *float64 {
	if t.total <= before.total || t.steal < before.steal {
		return nil
	}
	pct := 100 * float64(t.steal-before.steal) / float64(t.total-before.total)
	return &pct
}

// runner carries the run's environment to the measures.
type runner struct {
	env *lab.Env
	cfg Config
}

// failed is a measure that could not run.
func failed(name, title string, err error) Result {
	return Result{Name: name, Title: title, Error: err.Error()}
}

// checkLoopback refuses to aim load anywhere but this machine.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("bench: %q: %w", raw, err)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("bench: refusing to load %s: only loopback targets (127.0.0.1) are allowed", raw)
}

// sample collects one side's raw observations.
type sample struct {
	lat     []time.Duration
	ok      int64
	errs    int64
	codes   map[string]int
	errMsgs []string
	elapsed time.Duration
}

func newSample() *sample { return &sample{codes: map[string]int{}} }

func (s *sample) add(lat time.Duration, code int, err error) {
	s.lat = append(s.lat, lat)
	if code != 0 {
		s.codes[fmt.Sprint(code)]++
	}
	if err == nil && code >= 200 && code < 300 || err == nil && code == 0 {
		s.ok++
		return
	}
	s.errs++
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		msg = fmt.Sprintf("HTTP %d", code)
	}
	if len(s.errMsgs) < 5 && !slices.Contains(s.errMsgs, msg) {
		s.errMsgs = append(s.errMsgs, msg)
	}
}

// merge adds o's observations (another round of the same side) to s.
func (s *sample) merge(o *sample) {
	s.lat = append(s.lat, o.lat...)
	s.ok += o.ok
	s.errs += o.errs
	s.elapsed += o.elapsed
	for k, v := range o.codes {
		s.codes[k] += v
	}
	for _, m := range o.errMsgs {
		if len(s.errMsgs) < 5 && !slices.Contains(s.errMsgs, m) {
			s.errMsgs = append(s.errMsgs, m)
		}
	}
}

func (s *sample) stats() Stats {
	st := Stats{Requests: int64(len(s.lat)), OK: s.ok, Errors: s.errs, Seconds: s.elapsed.Seconds(), ErrorMsg: s.errMsgs}
	if len(s.codes) > 0 {
		st.Codes = s.codes
	}
	if s.elapsed > 0 {
		st.RPS = round(float64(s.ok) / s.elapsed.Seconds())
	}
	sorted := sortedCopy(s.lat)
	st.P50ms, st.P90ms, st.P99ms = ms(quantile(sorted, 0.50)), ms(quantile(sorted, 0.90)), ms(quantile(sorted, 0.99))
	if n := len(sorted); n > 0 {
		st.MaxMs = ms(sorted[n-1])
	}
	return st
}

func sortedCopy(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}

// quantile is the nearest-rank quantile of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

func round(f float64) float64 { return math.Round(f*1000) / 1000 }

// ratioResult fills a Result from a measured side and its baseline: ratio = measured ÷ baseline rps.
func ratioResult(name, title string, measured, baseline *sample, baselineName string) Result {
	m, b := measured.stats(), baseline.stats()
	r := Result{Name: name, Title: title, RPS: m.RPS, BaselineRPS: b.RPS, P50ms: m.P50ms, P90ms: m.P90ms,
		P99ms: m.P99ms, MaxMs: m.MaxMs, Errors: m.Errors + b.Errors, Measured: m, Baseline: &b,
		series: []timeSeries{{"measured", measured.lat}, {baselineName, baseline.lat}}}
	if b.RPS > 0 {
		r.Ratio = round(m.RPS / b.RPS)
	}
	return r
}

// atLeast sets the target "ratio >= min".
func (r *Result) atLeast(min float64) {
	r.Target = fmt.Sprintf("ratio >= %g", min)
	r.TargetMet = r.Ratio >= min
}

// violate records broken invariants.
func (r *Result) violate(vs ...string) {
	r.Violations += len(vs)
	for _, v := range vs {
		if len(r.ViolationDetails) < 20 {
			r.ViolationDetails = append(r.ViolationDetails, v)
		}
	}
}
