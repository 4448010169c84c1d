package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The CPU a request costs, by process: what issue 16's question ("what does the guard cost me?")
// comes down to on a machine whose CPUs the service, its database, the broker and the load generator
// share. Where the throughput ratio says how much slower the guarded side was, this says in which
// process the difference was spent. It is reported beside the ratio, never as a target; on the 2-core
// machine it drifts with the machine as the ratio does (docs/performance.md).

// clockTicksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's utime and stime: 100 on every Linux
// architecture Go supports (the kernel converts to it for user space whatever its own HZ).
const clockTicksPerSecond = 100

// cpuMeter reads how much CPU time the processes under load have used so far: each service by its
// Prometheus endpoint (process_cpu_seconds_total), PostgreSQL and RabbitMQ by /proc (every process
// named postgres, its backends and helpers, and the broker's Erlang VM, beam.smp, when they run on
// this machine and are visible to it), and this process by /proc/self. A process it cannot read is
// left out of a reading, and then out of the report.
type cpuMeter struct {
	client   *http.Client
	services map[string]string // name → loopback /metrics URL
}

func newCPUMeter(services map[string]string) *cpuMeter {
	m := &cpuMeter{client: &http.Client{Timeout: time.Second}, services: map[string]string{}}
	for name, u := range services {
		if checkLoopback(u) == nil {
			m.services[name] = u
		}
	}
	return m
}

// cpuReading is CPU seconds used so far, by process name.
type cpuReading map[string]float64

// read takes one reading. It costs one GET per service and a scan of /proc, a few milliseconds, so a
// measure reads at its phase boundaries only, never while requests are timed.
func (m *cpuMeter) read(ctx context.Context) cpuReading {
	out := cpuReading{}
	for name, u := range m.services {
		if s, err := metricsValue(ctx, m.client, u, "process_cpu_seconds_total"); err == nil {
			out[name] = s
		}
	}
	for name, comm := range map[string]string{"postgres": "postgres", "rabbitmq": "beam.smp"} {
		if s, ok := commCPU("/proc", comm); ok {
			out[name] = s
		}
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		if s, ok := parseProcStat(string(b)); ok {
			out["loadtest"] = s.cpuSeconds
		}
	}
	return out
}

// cpuAccount adds up the CPU that each side of a measure's phases used, and the requests they
// answered.
type cpuAccount struct {
	seconds  cpuReading
	requests int64
}

// add charges the CPU used between before and after (processes read both times) and n requests.
func (a *cpuAccount) add(before, after cpuReading, n int64) {
	if a.seconds == nil {
		a.seconds = cpuReading{}
	}
	for name, s := range after {
		if b, ok := before[name]; ok && s >= b {
			a.seconds[name] += s - b
		}
	}
	a.requests += n
}

// CPUCost is the CPU one request cost on each side of a ratio measure, in microseconds by process,
// over the measured phases (warm-up left out). Everything each process did in those phases is
// charged to the requests, background work included (the relay's polls, the sweeper): the same per
// second on both sides, so a little more per request on the slower one.
type CPUCost struct {
	Measured map[string]float64 `json:"measured_us_per_request"`
	Baseline map[string]float64 `json:"baseline_us_per_request"`
	// Ratio is the baseline's total CPU per request ÷ the measured side's, over the processes read on
	// both sides: the measured side's throughput as a fraction of the baseline's, had the machine's
	// CPU been the only limit.
	Ratio float64 `json:"ratio"`
}

// cpuCost turns two accounts into a CPUCost; nil if either side answered no request or no process was
// read on both.
func cpuCost(measured, baseline cpuAccount) *CPUCost {
	if measured.requests == 0 || baseline.requests == 0 {
		return nil
	}
	c := &CPUCost{Measured: map[string]float64{}, Baseline: map[string]float64{}}
	var m, b float64
	for name, ms := range measured.seconds {
		bs, ok := baseline.seconds[name]
		if !ok {
			continue
		}
		c.Measured[name] = round(ms * 1e6 / float64(measured.requests))
		c.Baseline[name] = round(bs * 1e6 / float64(baseline.requests))
		m += ms / float64(measured.requests)
		b += bs / float64(baseline.requests)
	}
	if m <= 0 || b <= 0 {
		return nil
	}
	c.Ratio = round(b / m)
	return c
}

// note is the report's sentence: each process's µs per request, measured vs baseline.
func (c *CPUCost) note(baselineName string) string {
	names := make([]string, 0, len(c.Measured))
	for n := range c.Measured {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names)+1)
	var m, b float64
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f vs %.0f", n, c.Measured[n], c.Baseline[n]))
		m += c.Measured[n]
		b += c.Baseline[n]
	}
	parts = append(parts, fmt.Sprintf("total %.0f vs %.0f", m, b))
	return fmt.Sprintf("CPU µs per request, this side vs %s: %s (CPU ratio %.3f)", baselineName,
		strings.Join(parts, ", "), c.Ratio)
}

// metricsValue reads the value of an unlabelled metric from a Prometheus text endpoint.
func metricsValue(ctx context.Context, c *http.Client, url, metric string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), metric+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", url, metric)
}

// procStat is what the report needs of one /proc/<pid>/stat line.
type procStat struct {
	comm       string
	cpuSeconds float64 // utime + stime
}

// parseProcStat parses "pid (comm) state ppid ... utime stime ...": comm may hold spaces and
// parentheses, so the fields are counted from its last ')'. utime and stime are fields 14 and 15.
func parseProcStat(line string) (procStat, bool) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	f := strings.Fields(line[end+1:])
	if len(f) < 13 { // state is field 3; stime field 15
		return procStat{}, false
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{comm: line[open+1 : end], cpuSeconds: float64(utime+stime) / clockTicksPerSecond}, true
}

// commCPU is the CPU seconds of every process named comm under proc. A process that exits between
// two readings takes its CPU with it (a measure's database connections are pooled and stay).
func commCPU(proc, comm string) (float64, bool) {
	stats, err := filepath.Glob(filepath.Join(proc, "[0-9]*", "stat"))
	if err != nil {
		return 0, false
	}
	var total float64
	found := false
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone since the glob
		}
		if s, ok := parseProcStat(string(b)); ok && s.comm == comm {
			total += s.cpuSeconds
			found = true
		}
	}
	return total, found
}

// perEvent is the CPU used between before and after, in µs per event by process (processes read both
// times), and the sentence the report gives it: the total against what the machine's CPUs offer at
// rate events/s.
func perEvent(before, after cpuReading, events int64, rate, cpus int) (map[string]float64, string) {
	if events <= 0 {
		return nil, ""
	}
	var a cpuAccount
	a.add(before, after, events)
	if len(a.seconds) == 0 {
		return nil, ""
	}
	us := map[string]float64{}
	names := make([]string, 0, len(a.seconds))
	var total float64
	for n, s := range a.seconds {
		us[n] = round(s * 1e6 / float64(events))
		names = append(names, n)
		total += s * 1e6 / float64(events)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f", n, us[n]))
	}
	note := fmt.Sprintf("CPU µs per event: %s, total %.0f", strings.Join(parts, ", "), total)
	if cpus > 0 && rate > 0 {
		note += fmt.Sprintf(" (at %d/s, %.0f%% of %d CPUs)", rate, total*float64(rate)/1e6/float64(cpus)*100, cpus)
	}
	return us, note
}
