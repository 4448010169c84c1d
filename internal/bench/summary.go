package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// SummaryRow is one measure over several runs of `loadtest bench` (BENCH_RUNS=N make bench-quick, or
// loadtest bench-summary FILE...): issue 16 judges a target by how often it holds on the 2-core
// machine, and one run of a few seconds moves by ±0.1 on a ratio.
type SummaryRow struct {
	Name   string
	Target string // as the runs state it; empty for a reference measure
	// Figure names what Values hold: "ratio", "p99 ms" or "p99 ratio" (the figure Target judges).
	Figure string
	Values []float64 // one per run that had this measure and ran it without error, in run order
	// Met counts the runs whose target held; Failed the runs in which the measure did not run
	// (Result.Error); Violations the broken invariants over all runs. A run with violations is not met.
	Met, Failed, Violations int
}

// Summarize gathers the results of reps by measure name, in the order of their first appearance.
func Summarize(reps []Report) []SummaryRow {
	var rows []*SummaryRow
	byName := map[string]*SummaryRow{}
	for _, rep := range reps {
		for _, r := range rep.Results {
			row := byName[r.Name]
			if row == nil {
				row = &SummaryRow{Name: r.Name, Target: r.Target}
				byName[r.Name] = row
				rows = append(rows, row)
			}
			row.Violations += r.Violations
			if r.Error != "" {
				row.Failed++
				continue
			}
			var v float64
			row.Figure, v = figure(rep, r)
			row.Values = append(row.Values, v)
			// A run that broke the measure's invariants met nothing, whatever its figure.
			if r.Target != "" && r.TargetMet && r.Violations == 0 {
				row.Met++
			}
			// The CPU per request beside a ratio (CPUCost): a row of its own, for reference. A run
			// without that reading (or with an empty one) is left out of the row, not counted as 0.
			if r.CPU != nil && r.CPU.Ratio > 0 {
				key := r.Name + "\x00cpu"
				cpu := byName[key]
				if cpu == nil {
					cpu = &SummaryRow{Name: r.Name, Figure: "CPU ratio"}
					byName[key] = cpu
					rows = append(rows, cpu)
				}
				cpu.Values = append(cpu.Values, r.CPU.Ratio)
			}
			// An outbox lag's part after the write (Result.AfterWrite): a row of its own, for reference,
			// so that a lag target missed in the writes reads apart from one missed in the relay.
			if r.AfterWrite != nil {
				key := r.Name + "\x00after"
				after := byName[key]
				if after == nil {
					after = &SummaryRow{Name: r.Name, Figure: afterWriteFigure}
					byName[key] = after
					rows = append(rows, after)
				}
				after.Values = append(after.Values, r.AfterWrite.P99ms)
			}
		}
	}
	out := make([]SummaryRow, len(rows))
	for i, r := range rows {
		out[i] = *r
	}
	return out
}

// afterWriteFigure names the reference row of an outbox lag measure's p99 counted from the end of
// each write (Result.AfterWrite).
const afterWriteFigure = "p99 ms after write"

// figure is the number r's target judges: the p99 for a lag target, the p99 ratio of the growth
// measure (its first and last sizes), the ratio otherwise.
func figure(rep Report, r Result) (string, float64) {
	switch {
	case strings.HasPrefix(r.Target, "p99 ratio"):
		if n := len(rep.Growth); n >= 2 && rep.Growth[0].P99ms > 0 {
			return "p99 ratio", round(rep.Growth[n-1].P99ms / rep.Growth[0].P99ms)
		}
		return "p99 ratio", 0
	case strings.HasPrefix(r.Target, "p99"), strings.HasPrefix(r.Name, "outbox_lag"):
		return "p99 ms", r.P99ms
	default:
		return "ratio", r.Ratio
	}
}

// ReadReport decodes one JSON report (WriteJSON's output) from r. An empty input, one that holds more
// than one JSON document, or a document without results is an error: each would be summed as a run.
func ReadReport(r io.Reader) (Report, error) {
	dec := json.NewDecoder(r)
	var rep Report
	if err := dec.Decode(&rep); err != nil {
		if errors.Is(err, io.EOF) {
			return Report{}, errors.New("empty file")
		}
		return Report{}, fmt.Errorf("not a bench report: %w", err)
	}
	if dec.More() {
		return Report{}, errors.New("not a bench report: data after the first JSON document")
	}
	if len(rep.Results) == 0 {
		return Report{}, errors.New(`not a bench report: no "results"`)
	}
	return rep, nil
}

// WriteSummary prints rows as a table: each measure's figure in every run, its range, and how many
// runs met its target.
func WriteSummary(w io.Writer, runs int, rows []SummaryRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	runsCol := fmt.Sprintf("%d runs", runs)
	if runs == 1 {
		runsCol = "1 run"
	}
	fmt.Fprintf(tw, "measure\tfigure\ttarget\t%s\trange\tmet\tviolations\t\n", runsCol)
	for _, r := range rows {
		// Ratios keep their three decimals: 0.847 printed as 0.85 would read as a met ">= 0.85".
		format := "%.3f"
		if r.Figure == "p99 ms" || r.Figure == afterWriteFigure {
			format = "%.1f"
		}
		vals := make([]string, len(r.Values))
		for i, v := range r.Values {
			vals[i] = fmt.Sprintf(format, v)
		}
		if r.Failed > 0 {
			vals = append(vals, fmt.Sprintf("(%d failed)", r.Failed))
		}
		target, met := r.Target, fmt.Sprintf("%d of %d", r.Met, len(r.Values)+r.Failed)
		if target == "" {
			target, met = noTarget, "-"
		}
		span := "-"
		if len(r.Values) > 0 {
			span = fmt.Sprintf(format+"–"+format, slices.Min(r.Values), slices.Max(r.Values))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.Name, r.Figure, target, strings.Join(vals, ", "), span, met,
			r.Violations)
	}
	_ = tw.Flush()
}

// Machines names the machines reps ran on (Machine.String), for the line under a summary: one line
// when every run had the same, and otherwise each machine with the runs (numbered from 1, in order)
// that ran on it, since a figure from one does not compare with a figure from another (the kernel's
// autogroup setting moves the outbox lag at 2,000/s on the 2-core machine: Machine.Autogroup).
func Machines(reps []Report) string {
	var names []string
	runs := map[string][]string{}
	for i, rep := range reps {
		m := rep.Machine.String()
		if runs[m] == nil {
			names = append(names, m)
		}
		runs[m] = append(runs[m], fmt.Sprint(i+1))
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return "machine: " + names[0]
	}
	parts := make([]string, len(names))
	for i, m := range names {
		word := "runs"
		if len(runs[m]) == 1 {
			word = "run"
		}
		parts[i] = fmt.Sprintf("%s (%s %s)", m, word, strings.Join(runs[m], ", "))
	}
	return "machines differ between runs, so their figures do not compare: " + strings.Join(parts, "; ")
}

// Steals is the line that says how much CPU time the hypervisor took during each run
// (Report.StealPct), "" when no run knows: a run with much steal had less than its CPUs, which moves
// every figure that competes for them.
func Steals(reps []Report) string {
	vals := make([]string, len(reps))
	known := false
	for i, rep := range reps {
		vals[i] = "-"
		if rep.StealPct != nil {
			vals[i] = fmt.Sprintf("%.1f%%", *rep.StealPct)
			known = true
		}
	}
	if !known {
		return ""
	}
	return "CPU steal by run: " + strings.Join(vals, ", ")
}

// BatchWaits is the line that names orders' OUTBOX_BATCH_WAIT in each run (Report.Config), "" when no
// run knows: the setting moves the outbox lag and the CPU an event costs, so a summary over runs with
// different settings mixes two relays.
func BatchWaits(reps []Report) string {
	vals := make([]string, len(reps))
	known := false
	for i, rep := range reps {
		vals[i] = "-"
		if w := rep.Config.OrdersBatchWaitMs; w != nil {
			vals[i] = fmt.Sprintf("%g ms", *w)
			known = true
		}
	}
	if !known {
		return ""
	}
	return "orders' OUTBOX_BATCH_WAIT by run: " + strings.Join(vals, ", ")
}
