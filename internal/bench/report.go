package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// noTarget is the target cell of a measure shown for reference only (Result.Target empty).
const noTarget = "none (reference)"

// WriteText prints the report as a table, then the growth and memory figures.
func WriteText(w io.Writer, rep Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\trps\tbaseline rps\tratio\ttarget\tp50 ms\tp90 ms\tp99 ms\tmax ms\terrors\tviolations\t")
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\t\t\t\t\t\t\n", r.Name, r.Error)
			continue
		}
		target := r.Target + " met"
		switch {
		case r.Target == "":
			target = noTarget
		case !r.TargetMet:
			target = r.Target + " MISSED"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t\n", r.Name, r.RPS, r.BaselineRPS,
			r.Ratio, target, r.P50ms, r.P90ms, r.P99ms, r.MaxMs, r.Errors, r.Violations)
	}
	_ = tw.Flush()
	for _, r := range rep.Results {
		if r.Baseline != nil {
			b := r.Baseline
			fmt.Fprintf(w, "  %s baseline: p50 %.2f, p90 %.2f, p99 %.2f, max %.2f ms, %d errors\n", r.Name, b.P50ms, b.P90ms, b.P99ms, b.MaxMs, b.Errors)
		}
		if r.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Name, r.Note)
		}
		for _, v := range r.ViolationDetails {
			fmt.Fprintf(w, "  %s VIOLATION: %s\n", r.Name, v)
		}
		for _, m := range r.Measured.ErrorMsg {
			fmt.Fprintf(w, "  %s error sample: %s\n", r.Name, m)
		}
	}
	if len(rep.Growth) > 0 {
		fmt.Fprintln(w, "growth (guarded create, fresh keys, by idempotency_keys rows):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "rows\trps\tp50 ms\tp99 ms\terrors\tfill s\t")
		for _, g := range rep.Growth {
			fmt.Fprintf(tw, "%d\t%.1f\t%.2f\t%.2f\t%d\t%.1f\t\n", g.Rows, g.RPS, g.P50ms, g.P99ms, g.Errors, g.FillSec)
		}
		_ = tw.Flush()
	}
	if len(rep.RSS) > 0 {
		fmt.Fprintf(w, "resident memory under load (target < %d MiB):\n", rssTargetMiB)
		for _, m := range rep.RSS {
			if m.Samples == 0 {
				fmt.Fprintf(w, "  %-16s not sampled: %s\n", m.Process, m.Error)
				continue
			}
			fmt.Fprintf(w, "  %-16s max %.1f MiB (%d samples)\n", m.Process, m.MaxMiB, m.Samples)
		}
	}
	verdict := "every invariant held"
	if !rep.Passed() {
		verdict = "INVARIANTS BROKEN or a measure failed"
	}
	steal := ""
	if rep.StealPct != nil {
		steal = fmt.Sprintf(", CPU steal %.1f%%", *rep.StealPct)
	}
	if w := rep.Config.OrdersBatchWaitMs; w != nil {
		steal += fmt.Sprintf(", orders' OUTBOX_BATCH_WAIT %g ms", *w)
	}
	fmt.Fprintf(w, "%d measures in %.1fs, %s, duration %s, concurrency %d%s: %s\n", len(rep.Results), rep.Seconds,
		rep.Machine, rep.Config.Duration, rep.Config.Concurrency, steal, verdict)
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"}

// percentilePlot draws an SVG latency-by-percentile plot of the series: x is the percentile on a
// log scale of 1/(1-p) (p50, p90, p99, p99.9), y the latency in ms. Static: no script, no CDN.
func percentilePlot(series []timeSeries) template.HTML {
	const w, h, left, right, top, bottom = 640.0, 300.0, 56.0, 150.0, 14.0, 34.0
	const xmax = 3.0 // p99.9
	pw, ph := w-left-right, h-top-bottom
	ymax := 0.0
	sorted := make([][]time.Duration, len(series))
	for i, s := range series {
		sorted[i] = sortedCopy(s.lat)
		ymax = max(ymax, ms(quantile(sorted[i], 0.999)))
	}
	if ymax <= 0 {
		return template.HTML(`<p><em>no latencies</em></p>`)
	}
	ymax = niceCeil(ymax * 1.1)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`, w, h, w, h)
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ccc"/>`, left, top, pw, ph)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		y := top + ph - ph*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e5e5e5"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`,
			left, y, left+pw, y, left-4, y+4, trimFloat(v))
	}
	for i, label := range []string{"p0", "p90", "p99", "p99.9"} {
		x := left + pw*float64(i)/xmax
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#e5e5e5"/><text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`,
			x, top, x, top+ph, x, top+ph+14, label)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">percentile</text>`, left+pw/2, h-4)
	fmt.Fprintf(&b, `<text x="12" y="%.0f" transform="rotate(-90 12 %.0f)" text-anchor="middle">ms</text>`, top+ph/2, top+ph/2)
	for i, s := range series {
		if len(sorted[i]) == 0 {
			continue
		}
		color := palette[i%len(palette)]
		var pts []string
		for k := 0; k <= 120; k++ {
			xl := xmax * float64(k) / 120
			p := 1 - math.Pow(10, -xl)
			v := math.Min(ms(quantile(sorted[i], p)), ymax)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", left+pw*xl/xmax, top+ph-ph*v/ymax))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, color, strings.Join(pts, " "))
		ly := top + 14 + float64(i)*16
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/><text x="%.0f" y="%.0f">%s (n=%d)</text>`,
			left+pw+8, ly-4, left+pw+24, ly-4, color, left+pw+28, ly, html.EscapeString(s.name), len(sorted[i]))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and escaped names only
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

var page = template.Must(template.New("bench").Funcs(template.FuncMap{"plot": percentilePlot, "noTarget": func() string { return noTarget }}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>idemshop loadtest bench</title>
<style>
body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.ok{color:#176f2c}.bad{color:#b00020;font-weight:bold}
code{font-size:90%}section{margin-bottom:2em}
</style></head><body>
<h1>idemshop: what the guards cost</h1>
<p>{{.R.Started.Format "2006-01-02 15:04:05 MST"}} · {{.R.Machine}} · {{.R.Machine.GoVersion}} · duration {{.R.Config.Duration}} per side ·
concurrency {{.R.Config.Concurrency}} · {{printf "%.1f" .R.Seconds}} s{{with .R.StealPct}} · CPU steal {{printf "%.1f" .}}%{{end}}.
{{if .R.Passed}}<span class="ok">Every invariant held.</span>{{else}}<span class="bad">Invariants broken or a measure failed.</span>{{end}}</p>
<table><tr><th class="l">measure</th><th>rps</th><th>baseline rps</th><th>ratio</th><th class="l">target</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th><th>errors</th><th>violations</th></tr>
{{range .R.Results}}<tr><td class="l"><a href="#{{.Name}}">{{.Name}}</a></td>{{if .Error}}<td class="l bad" colspan="10">{{.Error}}</td>{{else}}
<td>{{printf "%.1f" .RPS}}</td><td>{{printf "%.1f" .BaselineRPS}}</td><td>{{printf "%.2f" .Ratio}}</td>
{{if .Target}}<td class="l {{if .TargetMet}}ok{{else}}bad{{end}}">{{.Target}} {{if .TargetMet}}met{{else}}missed{{end}}</td>{{else}}<td class="l">{{noTarget}}</td>{{end}}
<td>{{printf "%.2f" .P50ms}}</td><td>{{printf "%.2f" .P90ms}}</td><td>{{printf "%.2f" .P99ms}}</td><td>{{printf "%.2f" .MaxMs}}</td>
<td>{{.Errors}}</td><td class="{{if .Violations}}bad{{else}}ok{{end}}">{{.Violations}}</td>{{end}}</tr>
{{end}}</table>
{{range .R.Results}}<section id="{{.Name}}"><h2>{{.Name}}</h2><p>{{.Title}}. Latency: {{.Latency}}.{{if .Note}} {{.Note}}.{{end}}</p>
{{if not .Error}}{{plot .Series}}
<table><tr><th class="l">side</th><th>requests</th><th>ok</th><th>errors</th><th>rps</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>
<tr><td class="l">measured</td><td>{{.Measured.Requests}}</td><td>{{.Measured.OK}}</td><td>{{.Measured.Errors}}</td><td>{{printf "%.1f" .Measured.RPS}}</td><td>{{printf "%.2f" .Measured.P50ms}}</td><td>{{printf "%.2f" .Measured.P90ms}}</td><td>{{printf "%.2f" .Measured.P99ms}}</td><td>{{printf "%.2f" .Measured.MaxMs}}</td></tr>
{{with .Baseline}}<tr><td class="l">baseline</td><td>{{.Requests}}</td><td>{{.OK}}</td><td>{{.Errors}}</td><td>{{printf "%.1f" .RPS}}</td><td>{{printf "%.2f" .P50ms}}</td><td>{{printf "%.2f" .P90ms}}</td><td>{{printf "%.2f" .P99ms}}</td><td>{{printf "%.2f" .MaxMs}}</td></tr>{{end}}
</table>{{end}}
{{range .ViolationDetails}}<p class="bad">violation: {{.}}</p>{{end}}{{range .Measured.ErrorMsg}}<p>error sample: <code>{{.}}</code></p>{{end}}
</section>{{end}}
{{if .R.Growth}}<h2>growth</h2><table><tr><th>idempotency_keys rows</th><th>rps</th><th>p50 ms</th><th>p99 ms</th><th>errors</th><th>fill s</th><th class="l">EXPLAIN of the key insert</th></tr>
{{range .R.Growth}}<tr><td>{{.Rows}}</td><td>{{printf "%.1f" .RPS}}</td><td>{{printf "%.2f" .P50ms}}</td><td>{{printf "%.2f" .P99ms}}</td><td>{{.Errors}}</td><td>{{printf "%.1f" .FillSec}}</td><td class="l"><code>{{.Explain}}</code></td></tr>{{end}}</table>{{end}}
{{if .R.RSS}}<h2>resident memory under load</h2><table><tr><th class="l">process</th><th>max MiB</th><th>samples</th><th class="l">target &lt; 64 MiB</th></tr>
{{range .R.RSS}}<tr><td class="l">{{.Process}}</td>{{if .Samples}}<td>{{printf "%.1f" .MaxMiB}}</td><td>{{.Samples}}</td><td class="l {{if .TargetOK}}ok{{else}}bad{{end}}">{{if .TargetOK}}met{{else}}missed{{end}}</td>{{else}}<td colspan="3" class="l">not sampled: {{.Error}}</td>{{end}}</tr>{{end}}</table>{{end}}
</body></html>
`))

// WriteHTML renders the report as one static HTML page with inline SVG plots.
func WriteHTML(w io.Writer, rep Report) error {
	return page.Execute(w, struct{ R Report }{rep})
}

// WriteJSON writes the report as indented JSON, one document: the shape `loadtest bench --json` prints
// and `--json-file` saves, so that a run can be compared with the last one.
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("bench: encode JSON report: %w", err)
	}
	return nil
}

// Series returns the result's latency series (template helper).
func (r Result) Series() []timeSeries { return r.series }
