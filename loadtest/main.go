// Command loadtest runs the lab against running services (orders with ORDERS_LAB=true, payments-mock,
// points-consumer). Flags come before scenario names.
//
//	loadtest incident [--json|--wide] [--verbose] [--keep] [--orders N] [--unsafe]
//	loadtest lab [--json|--wide] [--verbose] [--keep] [all|S1 S2 ...]
//	loadtest replay [--json] [--unsafe] [--keep] FILE   (recorded platform traffic, loadtest/replays)
//	loadtest bench [--json] [--json-file F] [--duration D] [--html FILE] [--growth] [--only M] [--concurrency N] [--outbox-rate R]
//	loadtest bench-summary FILE...   (the JSON reports of several bench runs: each figure's range)
//	loadtest soak [--json]    (starts its own shop; SOAK_* env, see docs/reliability.md)
//
// Exit status: 0 when every invariant held (and, for lab, every unsafe variant showed its failure), 1
// when not, 2 on a usage or set-up error.
//
// incident and lab print a report that fits 100 columns on stdout (--wide: every figure; --json: the
// machine-readable report), and log to stderr only errors unless --verbose or LOG_LEVEL=debug.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"idemshop/internal/lab"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/redisx"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: loadtest incident|lab|replay|bench|bench-summary|soak [flags] [scenarios|FILE]")
		return 2
	}
	if args[0] == "bench-summary" {
		return runBenchSummary(args[1:], stdout, stderr) // bench.go: reads files, needs no services
	}
	cfg, err := config.LoadLoadtest()
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if args[0] == "bench" {
		return runBench(ctx, cfg, args[1:], stdout, stderr) // bench.go: flags of its own
	}
	if args[0] == "soak" {
		return runSoak(ctx, cfg, args[1:], stdout, stderr) // soak.go: its own shop and SOAK_* env
	}
	if args[0] == "replay" {
		return runReplay(ctx, cfg, args[1:], stdout, stderr) // replay.go: a recording, FILE
	}

	fs := flag.NewFlagSet("loadtest "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	wide := fs.Bool("wide", false, "print every figure, one long line per scenario (the default report fits 100 columns)")
	verbose := fs.Bool("verbose", false, "log at debug level to stderr, the in-process services' lines included (default: errors only)")
	orders := fs.Int("orders", 20, "incident: number of orders")
	unsafe := fs.Bool("unsafe", false, "incident: pay through the unsafe callback path (lab mode)")
	keep := fs.Bool("keep", false, "leave the rows the run created (users lab-<scenario>-<side>-<hex>) for inspection")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	switch args[0] {
	case "incident", "lab":
	default:
		fmt.Fprintf(stderr, "loadtest: unknown command %q\n", args[0])
		return 2
	}
	if args[0] == "incident" && fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadtest incident: unexpected arguments %q (flags only)\n", fs.Args())
		return 2
	}
	if args[0] == "lab" {
		// incident's flags: `lab --unsafe S10` ran the lab as ever, and said nothing.
		var misplaced []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "orders" || f.Name == "unsafe" {
				misplaced = append(misplaced, "--"+f.Name)
			}
		})
		if len(misplaced) > 0 {
			fmt.Fprintf(stderr, "loadtest lab: %s %s for incident only (lab runs each scenario's unsafe and guarded sides)\n",
				strings.Join(misplaced, " and "), map[bool]string{true: "is", false: "are"}[len(misplaced) == 1])
			return 2
		}
	}
	if *orders < 1 || *orders > 10000 {
		fmt.Fprintln(stderr, "loadtest: --orders must be 1..10000")
		return 2
	}

	// Checked before labLogLevel replaces it: LOG_LEVEL=loud was taken for "not debug" (replay refused it).
	if _, err := logging.New(io.Discard, cfg.Log.Format, cfg.Log.Level); err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	_, levelSet := os.LookupEnv("LOG_LEVEL")
	cfg.Log.Level = labLogLevel(*verbose, cfg.Log.Level, levelSet)
	env, closeEnv, err := open(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	defer closeEnv()
	// The guarded incident needs no lab route; the unsafe one and every lab scenario do.
	if err := env.CheckServices(ctx, args[0] == "lab" || *unsafe); err != nil {
		fmt.Fprintf(stderr, "loadtest %s: %v\n", args[0], err)
		return 2
	}
	// Both set the platform's chaos (the lab calms it before each scenario).
	if err := env.CheckPlatformAdmin(ctx); err != nil {
		fmt.Fprintf(stderr, "loadtest %s: %v\n", args[0], err)
		return 2
	}
	// The lab's database, secret and (for the scenarios) stores must be the shop's.
	if err := env.CheckShop(ctx, args[0] == "lab"); err != nil {
		fmt.Fprintf(stderr, "loadtest %s: %v\n", args[0], err)
		return 2
	}
	env.Keep = *keep
	progress := progressLine(stderr, *asJSON)

	if args[0] == "incident" {
		env.Log.Info("incident", "orders", *orders, "unsafe", *unsafe, "seed", env.Seed)
		rep, err := lab.Incident(ctx, env, *orders, *unsafe, progress)
		progress("")
		if err != nil {
			fmt.Fprintln(stderr, "loadtest incident:", err)
			return 2
		}
		printIncident(stdout, rep, env.Seed, *asJSON, *wide)
		if len(rep.Violations) > 0 {
			return 1
		}
		return 0
	}

	scenarios, err := lab.Select(fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, "loadtest lab:", err)
		return 2
	}
	env.Log.Info("lab", "scenarios", len(scenarios), "seed", env.Seed)
	results := lab.Run(ctx, env, scenarios, func(r lab.Result) { progress(fmt.Sprintf("%s done", r.ID)) })
	progress("")
	printLab(stdout, results, env.Seed, *asJSON, *wide)
	for _, r := range results {
		if !r.Passed() {
			return 1
		}
	}
	return 0
}

// labLogLevel is the log level of incident and lab. They log only errors unless asked: the services and
// consumers some scenarios start in this process (S6, S9, S11) log as the real ones do, some 150 lines
// per `lab all` (S9's orders without Redis alone about 120 INFO, and slow-query WARNs), and the scenario's
// verdict already says what they did; a set-up failure is printed as an error either way. --verbose or
// LOG_LEVEL=debug gives every line. Any other LOG_LEVEL is ignored here: make demo and the e2e tests
// export LOG_LEVEL=warn for the services, and the lab would then print the deliberately unsafe
// consumers' "LAB UNSAFE" warnings between the progress and the report.
func labLogLevel(verbose bool, level string, set bool) string {
	if verbose || (set && strings.EqualFold(level, "debug")) {
		return "debug"
	}
	return "error"
}

// open connects to the stores the lab reads and builds its environment.
func open(ctx context.Context, cfg config.Loadtest, stderr io.Writer) (*lab.Env, func(), error) {
	logger, err := logging.New(stderr, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return nil, nil, err
	}
	db, err := postgres.Open(ctx, cfg.Postgres.URL, postgres.Options{LockTimeout: cfg.LockTimeout,
		StatementTimeout: cfg.StatementTimeout, MaxConns: 10})
	if err != nil {
		// A database that does not exist said so, but not which setting named it (a helper's finding).
		return nil, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	// S9 points an in-process orders at a dead Redis on purpose: go-redis's pool would log every refused
	// dial. The scenario reports what matters (no duplicates, latency), so those lines are dropped.
	redisx.UseLogger(slog.New(slog.DiscardHandler))
	rdb, err := redisx.Open(cfg.Redis.URL, cfg.Redis.Timeout)
	if err != nil {
		_ = postgres.Close(db)
		return nil, nil, err
	}
	env := &lab.Env{OrdersURL: cfg.OrdersURL, PaymentsURL: cfg.PaymentsURL, AdminToken: cfg.AdminToken,
		DB: db, Redis: rdb, RedisPrefix: cfg.Redis.KeyPrefix, AMQPURL: cfg.AMQPURL, AMQPPrefix: cfg.NamePrefix,
		DatabaseURL: cfg.Postgres.URL, RedisURL: cfg.Redis.URL, Secret: []byte(cfg.PaymentWebhookSecret),
		HTTP: &http.Client{Timeout: cfg.HTTPTimeout}, Log: logger, Seed: cfg.Seed, Quiet: cfg.Quiet}
	return env, func() { _ = rdb.Close(); _ = postgres.Close(db) }, nil
}

// printIncident writes the incident's report, built first and written at once (see printLab). The
// text report fits 100 columns: its violations are wrapped, unless wide.
func printIncident(w io.Writer, rep lab.IncidentReport, seed uint64, asJSON, wide bool) {
	var b bytes.Buffer
	defer func() { _, _ = w.Write(b.Bytes()) }()
	if asJSON {
		_ = json.NewEncoder(&b).Encode(struct {
			lab.IncidentReport
			Seed uint64 `json:"seed"`
		}{rep, seed})
		return
	}
	mode := "guarded"
	if rep.Unsafe {
		mode = "UNSAFE"
	}
	fmt.Fprintf(&b, "incident (%s): %d orders, every callback sent 3 times in parallel, seed %d, %.1fs\n",
		mode, rep.Orders, seed, rep.Seconds)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  callbacks received\t%d\n", rep.Callbacks.Received)
	fmt.Fprintf(tw, "  callbacks applied\t%d\t(want %d)\n", rep.Callbacks.Applied, rep.Orders)
	fmt.Fprintf(tw, "  stock delta\t%d\t(want %d)\n", rep.StockDelta, rep.WantStock)
	fmt.Fprintf(tw, "  points delta\t%d\t(want %d)\n", rep.PointsDelta, rep.WantPoints)
	_ = tw.Flush()
	width := reportWidth
	if wide {
		width = 0
	}
	printViolationsWidth(&b, rep.Violations, width)
}

// printViolations ends a text report: "every invariant held", or the violations (the first ten),
// each wrapped to fit 100 columns.
func printViolations(w io.Writer, violations []string) {
	printViolationsWidth(w, violations, reportWidth)
}

// printViolationsWidth is printViolations with lines of at most width runes (0: not wrapped).
func printViolationsWidth(w io.Writer, violations []string, width int) {
	if len(violations) == 0 {
		fmt.Fprintln(w, "  every invariant held")
		return
	}
	fmt.Fprintf(w, "  %d violations:\n", len(violations))
	for i, v := range violations {
		if i == 10 {
			fmt.Fprintf(w, "    ... and %d more\n", len(violations)-10)
			break
		}
		if width == 0 {
			fmt.Fprintln(w, "    -", v)
			continue
		}
		for j, line := range wrap(v, width-6, "") {
			prefix := "      "
			if j == 0 {
				prefix = "    - "
			}
			fmt.Fprintln(w, prefix+line)
		}
	}
}
