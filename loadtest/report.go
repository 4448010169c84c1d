package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"idemshop/internal/lab"
)

// reportWidth is what the default text reports fit in: a projector's terminal (issue 18). The full
// sentences are behind --wide and --json.
const reportWidth = 100

// Column caps of the short lab table: id (S12), short title, the two sides' figures, the verdict, and
// two spaces between columns: 3+18+33+33+5 + 4×2 = 100.
const (
	capShort   = 18
	capFigures = 33
)

// printLab writes the lab's report: JSON, the full table (wide), or one short line per scenario. The
// report is built first and written with one Write, after every scenario has ended, so that nothing
// another goroutine logs to the same terminal can land between its lines.
func printLab(w io.Writer, results []lab.Result, seed uint64, asJSON, wide bool) {
	var b bytes.Buffer
	switch {
	case asJSON:
		// The seed too: a CI job that keeps the JSON alone lost the one figure that reproduces the run.
		_ = json.NewEncoder(&b).Encode(map[string]any{"scenarios": results, "seed": seed})
	case wide:
		writeLabWide(&b, results)
	default:
		writeLabShort(&b, results, seed)
	}
	_, _ = w.Write(b.Bytes())
}

// writeLabShort is the default report: a header, a line per scenario with its verdict and the figures
// a trainer points at, then, for a scenario that did not pass, what went wrong in full (wrapped), and
// the count.
func writeLabShort(w io.Writer, results []lab.Result, seed uint64) {
	var secs float64
	for _, r := range results {
		secs += r.Seconds
	}
	scenarios := "scenarios"
	if len(results) == 1 {
		scenarios = "scenario"
	}
	fmt.Fprintf(w, "lab: %d %s, unsafe then guarded, seed %d, %.1fs (--wide: every figure)\n",
		len(results), scenarios, seed, secs)
	rows := [][]string{{"id", "scenario", "unsafe", "guarded", "verdict"}}
	var notes []string
	var noTwin []string
	for _, r := range results {
		s := lab.Summarize(r)
		rows = append(rows, []string{s.ID, fit(s.Short, capShort), fit(s.Unsafe, capFigures), fit(s.Guarded, capFigures), s.Verdict})
		if r.Unsafe.NoTwin {
			noTwin = append(noTwin, r.ID)
		}
		switch {
		case r.Error != "":
			notes = append(notes, fmt.Sprintf("%s error: %s", r.ID, r.Error))
		case s.Verdict == lab.VerdictFail:
			if !r.Unsafe.Reproduced && !r.Unsafe.NoTwin {
				notes = append(notes, fmt.Sprintf("%s unsafe side did not show the failure: %s", r.ID, r.Unsafe.Detail))
			}
			if !r.Guarded.OK {
				notes = append(notes, fmt.Sprintf("%s guarded side broke an invariant: %s", r.ID, r.Guarded.Detail))
			}
		}
	}
	writeColumns(w, rows)
	for _, n := range notes {
		for _, line := range wrap(n, reportWidth, "    ") {
			fmt.Fprintln(w, line)
		}
	}
	passed := 0
	for _, r := range results {
		if r.Passed() {
			passed++
		}
	}
	tail := ""
	if len(noTwin) > 0 {
		tail = fmt.Sprintf("; %s: no unsafe twin", strings.Join(noTwin, ", "))
	}
	// What passing means, not what happened: "0 of 1 passed: unsafe reproduced, guarded held" read as
	// a claim about a run in which nothing passed (a helper's reading, 2026-12-06).
	fmt.Fprintf(w, "%d of %d passed (passed: unsafe reproduced, guarded held%s)\n", passed, len(results), tail)
}

// writeColumns left-aligns rows in columns two spaces apart, by rune count (the figures hold "×", "—").
func writeColumns(w io.Writer, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			line.WriteString(cell)
			if i < len(row)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
	}
}

// writeLabWide is the full table: every scenario's title and both sides' detail sentences, hundreds of
// columns wide, for a wide terminal or a file.
func writeLabWide(w io.Writer, results []lab.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tscenario\tunsafe: measured\treproduced\tguarded: measured\tok")
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "NO"
	}
	for _, r := range results {
		u, g := r.Unsafe.Detail, r.Guarded.Detail
		reproduced := yes(r.Unsafe.Reproduced && r.Error == "")
		if r.Unsafe.NoTwin {
			reproduced = "— (no twin)"
		}
		if r.Error != "" {
			u, g = "error: "+r.Error, "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Title, u, reproduced, g, yes(r.Guarded.OK && r.Error == ""))
	}
	_ = tw.Flush()
	passed := 0
	for _, r := range results {
		if r.Passed() {
			passed++
		}
	}
	fmt.Fprintf(w, "%d of %d scenarios passed (passed: unsafe reproduced, or no unsafe twin, and guarded held)\n", passed, len(results))
}

// fit cuts s to at most n runes, marking the cut with "…".
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// wrap breaks text into lines of at most width runes at spaces, the lines after the first indented; a
// word longer than a line (a URL, a SQL fragment) is cut where the line ends.
func wrap(text string, width int, indent string) []string {
	var lines []string
	line := ""
	room := func() int {
		if len(lines) == 0 {
			return width
		}
		return width - utf8.RuneCountInString(indent)
	}
	flush := func() {
		if len(lines) > 0 {
			line = indent + line
		}
		lines = append(lines, line)
		line = ""
	}
	for _, word := range strings.Fields(text) {
		for {
			switch {
			case line == "" && utf8.RuneCountInString(word) <= room():
				line = word
			case line != "" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= room():
				line += " " + word
			case line != "":
				flush()
				continue
			default: // a word longer than a whole line
				r := []rune(word)
				line = string(r[:room()])
				word = string(r[room():])
				flush()
				continue
			}
			break
		}
	}
	if line != "" || len(lines) == 0 {
		flush()
	}
	return lines
}
