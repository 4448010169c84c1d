package bench

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// The CPU a request costs, by process: what issue 16's question ("what does the guard cost me?")
// comes down to on a machine whose CPUs the service, its database, the broker and the load generator
// share. Where the throughput ratio says how much slower the guarded side was, this says in which
// process the difference was spent. It is reported beside the ratio, never as a target; on the 2-core
// machine it drifts with the machine as the ratio does (docs/performance.md).

// procComms names the processes read from /proc, by the name the report gives them: PostgreSQL's
// (the postmaster, its backends and helpers) and RabbitMQ's Erlang VM.
var procComms = map[string]string{"postgres": "postgres", "beam.smp": "rabbitmq"}

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
	if fs, err := procfs.NewFS(procfs.DefaultMountPoint); err == nil {
		maps.Copy(out, procCPU(fs, procComms))
		if p, err := fs.Self(); err == nil {
			if st, err := p.Stat(); err == nil {
				out["loadtest"] = st.CPUTime()
			}
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
	both, baseBoth := cpuReading{}, cpuReading{}
	for name, ms := range measured.seconds {
		if bs, ok := baseline.seconds[name]; ok {
			both[name], baseBoth[name] = ms, bs
		}
	}
	var m, b float64
	c.Measured, m = microsPer(both, measured.requests)
	c.Baseline, b = microsPer(baseBoth, baseline.requests)
	if m <= 0 || b <= 0 {
		return nil
	}
	c.Ratio = round(b / m)
	return c
}

// microsPer divides CPU seconds by n (requests or events): µs each, by process, and their total.
func microsPer(seconds cpuReading, n int64) (map[string]float64, float64) {
	us := make(map[string]float64, len(seconds))
	var total float64
	for name, s := range seconds {
		us[name] = round(s * 1e6 / float64(n))
		total += s * 1e6 / float64(n)
	}
	return us, total
}

// note is the report's sentence: each process's µs per request, measured vs baseline.
func (c *CPUCost) note(baselineName string) string {
	names := slices.Sorted(maps.Keys(c.Measured))
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

// procCPU is the CPU seconds of the processes under fs whose command name is a key of comms, summed
// under that key's value, in one pass over the process list. A process that exits between two
// readings takes its CPU with it (a measure's database connections are pooled and stay).
func procCPU(fs procfs.FS, comms map[string]string) cpuReading {
	out := cpuReading{}
	procs, err := fs.AllProcs()
	if err != nil {
		return out
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // gone since the listing
		}
		if name, ok := comms[st.Comm]; ok {
			out[name] += st.CPUTime()
		}
	}
	return out
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
	us, total := microsPer(a.seconds, events)
	names := slices.Sorted(maps.Keys(us))
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
