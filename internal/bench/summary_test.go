package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarizeCountsEachRunsFigureAndTarget(t *testing.T) {
	t.Parallel()
	run := func(createRatio float64, createMet bool, lag float64, lagMet bool, growth [2]float64, errMsg string) Report {
		return Report{
			Results: []Result{
				{Name: "create_order_fresh", Target: "ratio >= 0.85", Ratio: createRatio, TargetMet: createMet,
					CPU: &CPUCost{Ratio: createRatio - 0.01}},
				{Name: "outbox_lag_2000", Target: "p99 < 50 ms", P99ms: lag, TargetMet: lagMet, Ratio: 0.6,
					AfterWrite: &Stats{P99ms: lag / 4}},
				{Name: "outbox_lag_external", P99ms: 40, Error: errMsg},
				{Name: "create_p99_growth", Target: "p99 ratio <= 1.2", Ratio: 0.9, P99ms: growth[1], TargetMet: growth[1]/growth[0] <= 1.2},
			},
			Growth: []GrowthPoint{{Rows: 10_000, P99ms: growth[0]}, {Rows: 5_000_000, P99ms: growth[1]}},
		}
	}
	empty := run(0.88, true, 30, true, [2]float64{20, 22}, "")
	empty.Results[0].CPU = &CPUCost{} // a reading with nothing in it: left out of the CPU row
	rows := Summarize([]Report{
		run(0.91, true, 30, true, [2]float64{20, 22}, ""),
		run(0.79, false, 240, false, [2]float64{20, 30}, "broker gone"),
	})
	if cpu := Summarize([]Report{empty})[1]; cpu.Figure == "CPU ratio" {
		t.Errorf("an empty CPU reading made a row: %+v", cpu)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6: %+v", len(rows), rows)
	}
	want := []struct {
		name, figure string
		values       []float64
		met, failed  int
	}{
		{"create_order_fresh", "ratio", []float64{0.91, 0.79}, 1, 0},
		{"create_order_fresh", "CPU ratio", []float64{0.90, 0.78}, 0, 0},
		{"outbox_lag_2000", "p99 ms", []float64{30, 240}, 1, 0},
		{"outbox_lag_2000", "p99 ms after write", []float64{7.5, 60}, 0, 0},
		{"outbox_lag_external", "p99 ms", []float64{40}, 0, 1},
		{"create_p99_growth", "p99 ratio", []float64{1.1, 1.5}, 1, 0},
	}
	for i, w := range want {
		r := rows[i]
		if r.Name != w.name || r.Figure != w.figure || r.Met != w.met || r.Failed != w.failed ||
			len(r.Values) != len(w.values) {
			t.Fatalf("row %d: %+v, want %+v", i, r, w)
		}
		for j := range w.values {
			if r.Values[j] != w.values[j] {
				t.Errorf("%s run %d: %v, want %v", r.Name, j+1, r.Values[j], w.values[j])
			}
		}
	}

	var out bytes.Buffer
	WriteSummary(&out, 2, rows)
	for _, s := range []string{"0.910, 0.790", "0.790–0.910", "0.900, 0.780", "30.0, 240.0", "7.5, 60.0", "1 of 2", "(1 failed)", noTarget} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, out.String())
		}
	}
}

func TestReadReportReadsWhatWriteJSONWroteAndNothingElse(t *testing.T) {
	t.Parallel()
	var a, b bytes.Buffer
	if err := WriteJSON(&a, Report{Results: []Result{{Name: "callback_storm", Ratio: 0.64, Target: "ratio >= 0.6", TargetMet: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&b, Report{Results: []Result{{Name: "callback_storm", Ratio: 0.7, Target: "ratio >= 0.6", TargetMet: true,
		Violations: 1}}}); err != nil {
		t.Fatal(err)
	}
	ra, err := ReadReport(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := ReadReport(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	rows := Summarize([]Report{ra, rb})
	if len(rows) != 1 || len(rows[0].Values) != 2 || rows[0].Values[1] != 0.7 || rows[0].Violations != 1 {
		t.Fatalf("rows %+v", rows)
	}
	if rows[0].Met != 1 {
		t.Fatalf("met %d: a run that broke an invariant must not count as met", rows[0].Met)
	}
	for name, in := range map[string]string{
		"empty":         "",
		"not json":      "{not json",
		"no results":    "{}",
		"an array":      "[]",
		"two reports":   a.String() + a.String(),
		"trailing junk": a.String() + "x",
	} {
		if _, err := ReadReport(strings.NewReader(in)); err == nil {
			t.Errorf("%s: read as a report", name)
		}
	}
}
