package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/bench"
)

// TestBenchSummaryReadsSavedRuns: bench-summary needs no services, prints each run's figure and the
// count of met targets, and fails like bench when a run broke an invariant.
func TestBenchSummaryReadsSavedRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	save := func(name string, rep bench.Report) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		require.NoError(t, err)
		require.NoError(t, bench.WriteJSON(f, rep))
		require.NoError(t, f.Close())
		return path
	}
	ok1 := save("1.json", bench.Report{Results: []bench.Result{{Name: "points_consumer", Ratio: 0.61, Target: "ratio >= 0.6", TargetMet: true}},
		Machine: bench.Machine{CPUs: 2, Autogroup: "on"}})
	ok2 := save("2.json", bench.Report{Results: []bench.Result{{Name: "points_consumer", Ratio: 0.55, Target: "ratio >= 0.6"}},
		Machine: bench.Machine{CPUs: 2, Autogroup: "off"}})
	broken := save("3.json", bench.Report{Results: []bench.Result{{Name: "points_consumer", Ratio: 0.7, Target: "ratio >= 0.6",
		TargetMet: true, Violations: 1}}})

	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"bench-summary", ok1, ok2}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "0.610, 0.550")
	require.Contains(t, out.String(), "1 of 2")
	require.Contains(t, out.String(), "machines differ between runs", "the runs' machines are named, and that they differ")

	out.Reset()
	errOut.Reset()
	require.Equal(t, 1, run([]string{"bench-summary", ok1, broken}, &out, &errOut), "a run with a violation fails the summary")
	require.Contains(t, out.String(), "1 of 2", "the broken run is not counted as met")
	require.Contains(t, errOut.String(), broken+": 1 invariant violations")

	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	link := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(ok1, link))
	for name, args := range map[string][]string{
		"no file":                   {"bench-summary"},
		"missing file":              {"bench-summary", filepath.Join(dir, "missing.json")},
		"empty file":                {"bench-summary", ok1, empty},
		"named twice":               {"bench-summary", ok1, ok1},
		"one file under two names":  {"bench-summary", ok1, link},
		"the same path spelt twice": {"bench-summary", ok1, filepath.Join(dir, ".", "1.json")},
	} {
		errOut.Reset()
		require.Equal(t, 2, run(args, &out, &errOut), name)
		if name == "empty file" {
			require.Contains(t, errOut.String(), empty+": empty file", "the message names the file")
		}
	}
}

// incident takes flags only: a stray word would run the whole incident and be ignored.
func TestIncidentRefusesArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"incident", "--orders", "2", "extra"}, &out, &errOut))
	assert.Contains(t, errOut.String(), `loadtest incident: unexpected arguments ["extra"] (flags only)`)
	assert.Empty(t, out.String())
}

// lab takes no incident flag: --orders and --unsafe were accepted and did nothing.
func TestLabRefusesIncidentFlags(t *testing.T) {
	for args, want := range map[string]string{
		"--orders 3 S10":         "loadtest lab: --orders is for incident only",
		"--unsafe S10":           "loadtest lab: --unsafe is for incident only",
		"--unsafe --orders 2 S1": "loadtest lab: --orders and --unsafe are for incident only",
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(append([]string{"lab"}, strings.Fields(args)...), &out, &errOut), args)
		assert.Contains(t, errOut.String(), want, args)
		assert.Empty(t, out.String(), args)
	}
}
