package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"idemshop/internal/bench"
	"idemshop/internal/platform/config"
)

// runBench is `loadtest bench`: every guarded path against its baseline, in one run (internal/bench).
// Exit status 0 when every measure ran and every invariant held, 1 when not, 2 on a usage or set-up
// error. Performance targets are reported, never turned into an exit status.
func runBench(ctx context.Context, cfg config.Loadtest, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadtest bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	duration := fs.Duration("duration", 10*time.Second, "measuring time of each side of each measure")
	htmlFile := fs.String("html", "", "also write an HTML report (static, inline SVG) to this file")
	jsonFile := fs.String("json-file", "", "also write the JSON report to this file (what --json prints)")
	growth := fs.Bool("growth", false, "also measure create p99 with idempotency_keys pre-filled to 10k, 1M and 5M rows")
	concurrency := fs.Int("concurrency", 8, "clients of the throughput measures")
	outboxRate := fs.Int("outbox-rate", 500, "events/s of the outbox lag measure (at 500, 2000/s is measured too)")
	only := fs.String("only", "", "run only these measures: create, callback, consumer, outbox or growth")
	pointsURL := fs.String("points-url", "http://127.0.0.1:8082", "points-consumer base URL, for its /metrics (RSS); empty: skip")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadtest bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	env, closeEnv, err := open(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	defer closeEnv()
	// The no-key baseline and the outbox writer are lab routes.
	if err := env.CheckServices(ctx, true); err != nil {
		fmt.Fprintln(stderr, "loadtest bench:", err)
		return 2
	}
	progress := func(string) {}
	if f, ok := stderr.(*os.File); ok && !*asJSON {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			progress = func(msg string) { fmt.Fprintf(stderr, "\r\033[K%s", msg) }
		}
	}
	processes := map[string]string{
		"orders":        strings.TrimSuffix(cfg.OrdersURL, "/") + "/metrics",
		"payments-mock": strings.TrimSuffix(cfg.PaymentsURL, "/") + "/metrics",
	}
	if *pointsURL != "" {
		processes["points-consumer"] = strings.TrimSuffix(*pointsURL, "/") + "/metrics"
	}
	env.Log.Info("bench", "duration", *duration, "concurrency", *concurrency, "growth", *growth)
	rep, err := bench.Run(ctx, env, bench.Config{Duration: *duration, Concurrency: *concurrency,
		OutboxRate: *outboxRate, Growth: *growth, Only: *only, Processes: processes, Progress: progress})
	progress("")
	if err != nil && len(rep.Results) == 0 {
		fmt.Fprintln(stderr, "loadtest bench:", err)
		return 2
	}
	if *asJSON {
		_ = bench.WriteJSON(stdout, rep)
	} else {
		bench.WriteText(stdout, rep)
	}
	if *htmlFile != "" {
		if werr := writeFile(*htmlFile, rep, bench.WriteHTML); werr != nil {
			fmt.Fprintln(stderr, "loadtest bench:", werr)
			return 2
		}
		if !*asJSON {
			fmt.Fprintln(stdout, "HTML report:", *htmlFile)
		}
	}
	if *jsonFile != "" {
		if werr := writeFile(*jsonFile, rep, bench.WriteJSON); werr != nil {
			fmt.Fprintln(stderr, "loadtest bench:", werr)
			return 2
		}
		if !*asJSON {
			fmt.Fprintln(stdout, "JSON report:", *jsonFile)
		}
	}
	if err != nil || !rep.Passed() {
		return 1
	}
	return 0
}

// writeFile writes rep to path with write (bench.WriteHTML, bench.WriteJSON).
func writeFile(path string, rep bench.Report, write func(io.Writer, bench.Report) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := write(f, rep); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// runBenchSummary prints, for the JSON reports named in args (bench --json-file), each measure's
// figure in every run, its range and how many runs met their target. It exits 1 when a run broke an
// invariant or a measure failed to run, as bench itself does (naming the file on stderr; missed
// targets do not count), and 2 when a file is missing, is not a report, or is named twice.
func runBenchSummary(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: loadtest bench-summary FILE...   (JSON reports of loadtest bench --json-file)")
		return 2
	}
	// The same file under two names (a link, ./a and a) is one run: compared as files, not as paths.
	var seen []os.FileInfo
	reps := make([]bench.Report, 0, len(args))
	for _, path := range args {
		if fi, err := os.Stat(path); err == nil {
			if slices.ContainsFunc(seen, func(s os.FileInfo) bool { return os.SameFile(s, fi) }) {
				fmt.Fprintf(stderr, "loadtest bench-summary: %s is named twice (it would count as two runs)\n", path)
				return 2
			}
			seen = append(seen, fi)
		}
		rep, err := readReportFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "loadtest bench-summary: %s: %v\n", path, err)
			return 2
		}
		reps = append(reps, rep)
	}
	bench.WriteSummary(stdout, len(reps), bench.Summarize(reps))
	if m := bench.Machines(reps); m != "" {
		fmt.Fprintln(stdout, m)
	}
	if st := bench.Steals(reps); st != "" {
		fmt.Fprintln(stdout, st)
	}
	if bw := bench.BatchWaits(reps); bw != "" {
		fmt.Fprintln(stdout, bw)
	}
	rc := 0
	for i, rep := range reps {
		if rep.Passed() {
			continue
		}
		rc = 1
		violations, failed := 0, 0
		for _, r := range rep.Results {
			violations += r.Violations
			if r.Error != "" {
				failed++
			}
		}
		fmt.Fprintf(stderr, "%s: %d invariant violations, %d measures failed to run\n", args[i], violations, failed)
	}
	return rc
}

// readReportFile reads one report from path.
func readReportFile(path string) (bench.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return bench.Report{}, err
	}
	defer f.Close()
	return bench.ReadReport(f)
}
