package bench

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
