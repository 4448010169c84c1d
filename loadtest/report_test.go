package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
)

// labAll is a real `lab all --json` report (testdata/lab-all.json, S9 in today's no-twin shape): every
// scenario, with the long detail sentences the services write.
func labAll(t *testing.T) []lab.Result {
	t.Helper()
	raw, err := os.ReadFile("testdata/lab-all.json")
	require.NoError(t, err)
	var rep struct {
		Scenarios []lab.Result `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Len(t, rep.Scenarios, 12)
	return rep.Scenarios
}

// assertFits checks every line of a text report against the 100 columns of issue 18, and that no log
// line (slog's text or JSON form) got into it.
func assertFits(t *testing.T, out string) {
	t.Helper()
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		assert.LessOrEqual(t, utf8.RuneCountInString(line), reportWidth, "fits %d columns: %q", reportWidth, line)
		for _, mark := range []string{"level=", `"level":`, "msg="} {
			assert.NotContains(t, line, mark, "a log line in the report")
		}
	}
}

// scenarioLine returns the report line that starts with id.
func scenarioLine(t *testing.T, out, id string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, id+" ") {
			return line
		}
	}
	t.Fatalf("no line for %s in\n%s", id, out)
	return ""
}

func TestLabReportFits100Columns(t *testing.T) {
	results := labAll(t)
	var out bytes.Buffer
	printLab(&out, results, 20261129, false, false)
	t.Logf("\n%s", out.String())
	assertFits(t, out.String())

	assert.Equal(t, 1+1+12+1, strings.Count(out.String(), "\n"), "header, column names, a line per scenario, count")
	for _, r := range results {
		assert.Contains(t, scenarioLine(t, out.String(), r.ID), " pass", r.ID)
	}
	// The figures a trainer points at, each side's.
	s1 := scenarioLine(t, out.String(), "S1")
	assert.Contains(t, s1, "9 applied, stock -18, points +225")
	assert.Contains(t, s1, "3 applied, stock -6, points +75")
	s5 := scenarioLine(t, out.String(), "S5")
	assert.Contains(t, s5, "stock -1: 11 PAID for 10 units")
	assert.Contains(t, s5, "stock 0: 10 PAID for 10 units")
	assert.Contains(t, scenarioLine(t, out.String(), "S9"), lab.NoTwinFigure, "S9 claims no reproduction")
	assert.Contains(t, out.String(), "seed 20261129")
	assert.Contains(t, out.String(), "12 of 12 passed (passed: unsafe reproduced, guarded held; S9: no unsafe twin)")
}

// A failure and an error are explained under the table in full, wrapped, and still within 100 columns,
// even with a word longer than a line.
func TestLabReportExplainsFailuresWithin100Columns(t *testing.T) {
	results := labAll(t)
	results[2].Unsafe.Reproduced = false // S3
	results[5].Guarded.OK = false        // S6
	results[4].Error = "S5: only 3 of 11 callbacks queued on the held row within 1m0s (each needs a connection " +
		"of orders' pool: DB_MAX_CONNS > 11?) " + strings.Repeat("x", 150)
	var out bytes.Buffer
	printLab(&out, results, 1, false, false)
	t.Logf("\n%s", out.String())
	assertFits(t, out.String())

	assert.Contains(t, scenarioLine(t, out.String(), "S3"), lab.VerdictFail)
	assert.Contains(t, scenarioLine(t, out.String(), "S6"), lab.VerdictFail)
	assert.Contains(t, scenarioLine(t, out.String(), "S5"), lab.VerdictError)
	assert.Contains(t, out.String(), "S3 unsafe side did not show the failure: 409 insufficient_stock")
	assert.Contains(t, out.String(), "S6 guarded side broke an invariant: crash after commit")
	assert.Contains(t, out.String(), "S5 error: S5: only 3 of 11 callbacks")
	assert.Contains(t, strings.ReplaceAll(out.String(), "\n    ", ""), strings.Repeat("x", 150),
		"the long word is cut across lines, not lost")
	assert.Contains(t, out.String(), "9 of 12 passed")
}

func TestLabReportWidePrintsEveryFigure(t *testing.T) {
	results := labAll(t)
	var out bytes.Buffer
	printLab(&out, results, 1, false, true)
	for _, r := range results {
		line := scenarioLine(t, out.String(), r.ID)
		assert.Contains(t, line, r.Title, r.ID)
		assert.Contains(t, line, r.Unsafe.Detail, r.ID)
		assert.Contains(t, line, r.Guarded.Detail, r.ID)
	}
	assert.Contains(t, scenarioLine(t, out.String(), "S9"), "— (no twin)")
	assert.NotContains(t, scenarioLine(t, out.String(), "S9"), "yes  20 orders", "no \"reproduced: yes\" for S9")
	assert.Greater(t, utf8.RuneCountInString(scenarioLine(t, out.String(), "S3")), 300, "the wide table is wide")
	assert.Contains(t, out.String(), "12 of 12 scenarios passed (passed: unsafe reproduced, or no unsafe twin, and guarded held)")
}

// --json keeps its shape: {"scenarios":[{"id","title","unsafe":{"reproduced","measured","detail"},
// "guarded":{"ok","measured","detail"},"error","seconds"}]}, with no_twin added on S9 alone.
func TestLabReportJSONShape(t *testing.T) {
	var out bytes.Buffer
	printLab(&out, labAll(t), 20261129, true, false)
	var rep struct {
		Scenarios []map[string]json.RawMessage `json:"scenarios"`
		Seed      uint64                       `json:"seed"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Len(t, rep.Scenarios, 12)
	assert.EqualValues(t, 20261129, rep.Seed, "the seed that reproduces the run")
	for _, sc := range rep.Scenarios {
		var u map[string]any
		require.NoError(t, json.Unmarshal(sc["unsafe"], &u))
		assert.Contains(t, u, "reproduced")
		assert.Contains(t, u, "measured")
		assert.Contains(t, u, "detail")
		_, twin := u["no_twin"]
		assert.Equal(t, string(sc["id"]) == `"S9"`, twin, "no_twin only where there is no twin: %s", sc["id"])
	}
}

// writeCounter counts Write calls.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) { w.writes++; return w.Buffer.Write(p) }

// Logs go to stderr; stdout is shared with nothing but a terminal can interleave the two streams line
// by line. The report is one Write, so a line logged meanwhile can come before or after it, never
// between its lines.
func TestReportsAreWrittenAtOnce(t *testing.T) {
	for _, mode := range []struct {
		name         string
		asJSON, wide bool
	}{{"short", false, false}, {"wide", false, true}, {"json", true, false}} {
		var w writeCounter
		printLab(&w, labAll(t), 1, mode.asJSON, mode.wide)
		assert.Equal(t, 1, w.writes, "lab %s", mode.name)
	}
	var w writeCounter
	printIncident(&w, lab.IncidentReport{Orders: 3, Violations: []string{"a", "b"}}, 1, false, false)
	assert.Equal(t, 1, w.writes, "incident")
}

// The incident's JSON has its seed beside the contract's fields.
func TestIncidentReportJSONHasItsSeed(t *testing.T) {
	var out bytes.Buffer
	printIncident(&out, lab.IncidentReport{Orders: 3, Violations: []string{}}, 20261129, true, false)
	var rep map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.JSONEq(t, "20261129", string(rep["seed"]))
	for _, f := range []string{"orders", "unsafe", "violations", "callbacks", "stock_delta", "expected_stock_delta", "points_delta", "expected_points_delta", "seconds"} {
		assert.Contains(t, rep, f)
	}
}

func TestIncidentReportFits100Columns(t *testing.T) {
	rep := lab.IncidentReport{Orders: 10, Unsafe: true, StockDelta: -57, WantStock: -19, PointsDelta: 702,
		WantPoints: 234, Seconds: 4.2}
	rep.Callbacks.Received, rep.Callbacks.Applied = 30, 30
	long := "paid once: order 1234567: 3 callbacks applied, want 1 (received 3; the unsafe route applies every copy, " +
		"each deducting stock and crediting points again)"
	for range 12 {
		rep.Violations = append(rep.Violations, long)
	}
	var out bytes.Buffer
	printIncident(&out, rep, 20261129, false, false)
	t.Logf("\n%s", out.String())
	assertFits(t, out.String())
	assert.Contains(t, out.String(), "incident (UNSAFE): 10 orders")
	assert.Contains(t, out.String(), "seed 20261129")
	assert.Contains(t, out.String(), "12 violations:")
	assert.Contains(t, out.String(), "... and 2 more")
	assert.Contains(t, strings.Join(strings.Fields(out.String()), " "), long, "wrapped, not cut")

	out.Reset()
	printIncident(&out, rep, 1, false, true)
	assert.Contains(t, out.String(), "    - "+long+"\n", "--wide: one line per violation")
}

func TestLabLogLevel(t *testing.T) {
	for _, c := range []struct {
		verbose bool
		level   string
		set     bool
		want    string
	}{
		{false, "info", false, "error"}, // LOG_LEVEL unset: its default is not a request
		{false, "warn", true, "error"},  // make demo's and the e2e tests' LOG_LEVEL is the services'
		{false, "info", true, "error"},
		{false, "debug", true, "debug"},
		{false, "DEBUG", true, "debug"},
		{true, "info", false, "debug"},
		{true, "error", true, "debug"},
	} {
		assert.Equal(t, c.want, labLogLevel(c.verbose, c.level, c.set), "%+v", c)
	}
}

func TestWrap(t *testing.T) {
	assert.Equal(t, []string{"a b", "  c"}, wrap("a b c", 3, "  "))
	assert.Equal(t, []string{"abcd", "  ef", "  g"}, wrap("abcdef g", 4, "  "))
	assert.Equal(t, []string{""}, wrap("", 10, ""))
	assert.Equal(t, "abc…", fit("abcdef", 4))
	assert.Equal(t, "ab×", fit("ab×", 3))
}
