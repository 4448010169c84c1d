package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

func TestProcCPUAddsUpEachNamedCommandInOnePass(t *testing.T) {
	t.Parallel()
	proc := t.TempDir()
	// stat writes /proc/<pid>/stat as the kernel does: utime and stime are the 14th and 15th fields,
	// in ticks of 10 ms; the comm may hold spaces and parentheses.
	stat := func(pid int, comm string, utime, stime int) {
		dir := filepath.Join(proc, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		rest := strings.Repeat(" 0", 38)
		line := fmt.Sprintf("%d (%s) S 1 1 1 0 -1 0 0 0 0 0 %d %d%s\n", pid, comm, utime, stime, rest)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat(10, "postgres", 100, 50)  // the postmaster
	stat(11, "postgres", 30, 20)   // a backend
	stat(12, "beam.smp", 7, 3)     // the broker
	stat(13, "orders", 999, 999)   // not asked for
	stat(14, "post gres) x", 5, 5) // a comm that only looks like one
	if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS(proc)
	if err != nil {
		t.Fatal(err)
	}
	got := procCPU(fs, procComms)
	if got["postgres"] != 2.0 || got["rabbitmq"] != 0.1 || len(got) != 2 {
		t.Fatalf("procCPU = %v; want postgres 2.0 s, rabbitmq 0.1 s", got)
	}
}

func TestCPUCostIsMicrosecondsPerRequestAndTheirRatio(t *testing.T) {
	t.Parallel()
	var measured, baseline cpuAccount
	// Two phases a side. "gone" was read only before the second measured phase: never charged.
	measured.add(cpuReading{"orders": 1, "postgres": 2}, cpuReading{"orders": 1.4, "postgres": 2.5}, 1000)
	measured.add(cpuReading{"orders": 3, "postgres": 4, "gone": 1}, cpuReading{"orders": 3.4, "postgres": 4.5}, 1000)
	baseline.add(cpuReading{"orders": 0, "postgres": 0}, cpuReading{"orders": 0.7, "postgres": 0.7}, 2000)
	c := cpuCost(measured, baseline)
	if c == nil {
		t.Fatal("cpuCost = nil")
	}
	if c.Measured["orders"] != 400 || c.Measured["postgres"] != 500 || c.Baseline["orders"] != 350 ||
		c.Baseline["postgres"] != 350 || len(c.Measured) != 2 {
		t.Fatalf("cpuCost = %+v; want orders 400 vs 350, postgres 500 vs 350 µs", c)
	}
	if c.Ratio != round(700.0/900.0) {
		t.Errorf("ratio %v, want %v", c.Ratio, round(700.0/900.0))
	}
	note := c.note("the baseline")
	for _, s := range []string{"orders 400 vs 350", "postgres 500 vs 350", "total 900 vs 700", "CPU ratio 0.778"} {
		if !strings.Contains(note, s) {
			t.Errorf("note %q lacks %q", note, s)
		}
	}
	if cpuCost(measured, cpuAccount{}) != nil {
		t.Error("cpuCost with a side that answered nothing: not nil")
	}
}

func TestCPUMeterReadsServicesPostgresAndItself(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n")
	}))
	defer srv.Close()
	m := newCPUMeter(map[string]string{"orders": srv.URL + "/metrics", "remote": "http://10.1.2.3/metrics"})
	got := m.read(context.Background())
	if got["orders"] != 12.5 {
		t.Errorf("orders %v, want 12.5", got["orders"])
	}
	if _, ok := got["remote"]; ok {
		t.Error("a non-loopback URL was read")
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if got["loadtest"] <= 0 {
			t.Errorf("loadtest %v, want this process's CPU", got["loadtest"])
		}
	}
}

func TestPerEventIsMicrosecondsPerEventAndTheMachinesShare(t *testing.T) {
	t.Parallel()
	us, note := perEvent(cpuReading{"orders": 1, "postgres": 2, "gone": 5}, cpuReading{"orders": 1.3, "postgres": 2.5},
		1000, 2000, 2)
	if us["orders"] != 300 || us["postgres"] != 500 || len(us) != 2 {
		t.Fatalf("perEvent = %v; want orders 300, postgres 500", us)
	}
	// 800 µs an event at 2,000/s is 1.6 CPU-seconds a second: 80% of 2 CPUs.
	if want := "CPU µs per event: orders 300, postgres 500, total 800 (at 2000/s, 80% of 2 CPUs)"; note != want {
		t.Errorf("note %q, want %q", note, want)
	}
	if us, note := perEvent(cpuReading{}, cpuReading{}, 0, 2000, 2); us != nil || note != "" {
		t.Errorf("no events: %v, %q", us, note)
	}
}
