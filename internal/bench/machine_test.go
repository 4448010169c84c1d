package bench

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/outbox"
	"idemshop/internal/platform/rabbitmq"
)

func TestAutogroupSettingNamesOnlyTheKernelsTwoValues(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"1": "on", "0": "off", "": "", "2": "", "on": ""} {
		require.Equal(t, want, autogroupSetting(in), "sched_autogroup_enabled %q", in)
	}
}

func TestMachineStringNamesTheKnownParts(t *testing.T) {
	t.Parallel()
	require.Equal(t, "2 CPUs", Machine{CPUs: 2, GoVersion: "go1.26"}.String())
	require.Equal(t, "2 CPUs, kernel 6.18.44, sched_autogroup off",
		Machine{CPUs: 2, Kernel: "6.18.44", Autogroup: "off"}.String())
}

// TestThisMachineReadsTheKernelsSettings: on Linux the report carries what /proc/sys says.
func TestThisMachineReadsTheKernelsSettings(t *testing.T) {
	t.Parallel()
	m := thisMachine()
	require.Positive(t, m.CPUs)
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		require.Empty(t, m.Kernel, "no /proc/sys: no kernel named")
		return
	}
	require.Equal(t, strings.TrimSpace(string(release)), m.Kernel)
	if v, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled"); err == nil {
		require.Equal(t, autogroupSetting(strings.TrimSpace(string(v))), m.Autogroup)
		require.NotEmpty(t, m.Autogroup, "the kernel's file holds 0 or 1")
	}
}

func TestMachinesSaysWhenRunsDiffer(t *testing.T) {
	t.Parallel()
	on := Report{Machine: Machine{CPUs: 2, Kernel: "6.18", Autogroup: "on"}}
	off := Report{Machine: Machine{CPUs: 2, Kernel: "6.18", Autogroup: "off"}}
	require.Empty(t, Machines(nil))
	require.Equal(t, "machine: 2 CPUs, kernel 6.18, sched_autogroup on", Machines([]Report{on, on}))
	require.Equal(t, "machines differ between runs, so their figures do not compare: "+
		"2 CPUs, kernel 6.18, sched_autogroup on (runs 1, 3); 2 CPUs, kernel 6.18, sched_autogroup off (run 2)",
		Machines([]Report{on, off, on}))
}

// The steal share is the steal ticks over all the ticks between two reads of /proc/stat's cpu line;
// guest time is inside user already and stays out of the total.
func TestStealShareFromTwoReadsOfProcStat(t *testing.T) {
	t.Parallel()
	before, ok := parseCPULine("cpu  201451 37 73695 217292 4024 0 11858 5218 0 0")
	require.True(t, ok)
	after, ok := parseCPULine("cpu  215273 37 81101 227566 4848 0 14179 8292 900 0")
	require.True(t, ok)
	pct := after.stealPctSince(before)
	require.NotNil(t, pct)
	require.InDelta(t, 100*3074.0/37721.0, *pct, 1e-9)
	require.Nil(t, before.stealPctSince(after), "counters that went backwards say nothing")
	require.Nil(t, before.stealPctSince(before), "no time passed")

	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3 4 5 6 7", "cpu 1 2 3 x 5 6 7 8"} {
		_, ok := parseCPULine(bad)
		require.False(t, ok, "%q", bad)
	}
}

// On Linux every report says how much CPU the hypervisor took (0 on bare metal).
func TestReadCPUTimesOnThisMachine(t *testing.T) {
	t.Parallel()
	c, ok := readCPUTimes()
	if _, err := os.Stat("/proc/stat"); err != nil {
		require.False(t, ok)
		return
	}
	require.True(t, ok)
	require.Positive(t, c.total)
	require.LessOrEqual(t, c.steal, c.total)
}

func TestStealsNamesEachRun(t *testing.T) {
	t.Parallel()
	a, b := 0.4, 8.12
	require.Empty(t, Steals([]Report{{}, {}}), "no run knows")
	require.Equal(t, "CPU steal by run: 0.4%, -, 8.1%", Steals([]Report{{StealPct: &a}, {}, {StealPct: &b}}))
}

// TestOrdersBatchWaitIsReadFromTheRelaysGauge: a relay configured with a batch wait exports it, and
// the report reads it from the /metrics it is served on; an orders without the gauge reads as unknown.
func TestOrdersBatchWaitIsReadFromTheRelaysGauge(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	// The relay is built, never run: NewRelay touches neither the database nor the broker.
	_, err := outbox.NewRelay(&gorm.DB{}, outbox.RelayConfig{AMQPURL: "amqp://127.0.0.1:5672/",
		Topology: rabbitmq.OrderPaidTopology(), BatchSize: 10, PollInterval: time.Second, ConfirmTimeout: time.Second,
		BatchWait: 2500 * time.Microsecond, ReconnectMin: time.Second, ReconnectMax: time.Second},
		slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	withGauge := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(withGauge.Close)
	without := httptest.NewServer(promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}))
	t.Cleanup(without.Close)

	got := ordersBatchWait(context.Background(), withGauge.URL)
	require.NotNil(t, got)
	require.InDelta(t, 2.5, *got, 1e-9)
	require.Nil(t, ordersBatchWait(context.Background(), without.URL))
	require.Nil(t, ordersBatchWait(context.Background(), ""))

	var rep Report
	rep.Config.OrdersBatchWaitMs = got
	var text strings.Builder
	WriteText(&text, rep)
	require.Contains(t, text.String(), "orders' OUTBOX_BATCH_WAIT 2.5 ms")
}

func TestBatchWaitsNamesEachRun(t *testing.T) {
	t.Parallel()
	a, b := 0.0, 2.0
	require.Empty(t, BatchWaits([]Report{{}, {}}), "no run knows")
	r1, r3 := Report{}, Report{}
	r1.Config.OrdersBatchWaitMs, r3.Config.OrdersBatchWaitMs = &a, &b
	require.Equal(t, "orders' OUTBOX_BATCH_WAIT by run: 0 ms, -, 2 ms", BatchWaits([]Report{r1, {}, r3}))
}
