// Command loadtest runs the lab against running services (orders with ORDERS_LAB=true, payments-mock,
// points-consumer). Flags come before scenario names.
//
//	loadtest incident [--json] [--keep] [--orders N] [--unsafe]
//	loadtest lab [--json] [--keep] [all|S1 S2 ...]
//	loadtest replay [--json] [--unsafe] [--keep] FILE   (recorded platform traffic, loadtest/replays)
//	loadtest bench [--json] [--duration D] [--html FILE] [--growth] [--concurrency N] [--outbox-rate R]
//	loadtest soak [--json]    (starts its own shop; SOAK_* env, see docs/reliability.md)
//
// Exit status: 0 when every invariant held (and, for lab, every unsafe variant showed its failure), 1
// when not, 2 on a usage or set-up error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
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
		fmt.Fprintln(stderr, "usage: loadtest incident|lab|replay|bench|soak [flags] [scenarios|FILE]")
		return 2
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
	if *orders < 1 || *orders > 10000 {
		fmt.Fprintln(stderr, "loadtest: --orders must be 1..10000")
		return 2
	}

	env, closeEnv, err := open(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	defer closeEnv()
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
		printIncident(stdout, rep, *asJSON)
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
	printLab(stdout, results, *asJSON)
	for _, r := range results {
		if !r.Passed() {
			return 1
		}
	}
	return 0
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
		return nil, nil, err
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

func printIncident(w io.Writer, rep lab.IncidentReport, asJSON bool) {
	if asJSON {
		_ = json.NewEncoder(w).Encode(rep)
		return
	}
	mode := "guarded"
	if rep.Unsafe {
		mode = "UNSAFE"
	}
	fmt.Fprintf(w, "incident (%s): %d orders, every callback sent 3 times in parallel, %.1fs\n", mode, rep.Orders, rep.Seconds)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  callbacks received\t%d\n", rep.Callbacks.Received)
	fmt.Fprintf(tw, "  callbacks applied\t%d\t(want %d)\n", rep.Callbacks.Applied, rep.Orders)
	fmt.Fprintf(tw, "  stock delta\t%d\t(want %d)\n", rep.StockDelta, rep.WantStock)
	fmt.Fprintf(tw, "  points delta\t%d\t(want %d)\n", rep.PointsDelta, rep.WantPoints)
	_ = tw.Flush()
	printViolations(w, rep.Violations)
}

// printViolations ends a text report: "every invariant held", or the violations (the first ten).
func printViolations(w io.Writer, violations []string) {
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
		fmt.Fprintln(w, "    -", v)
	}
}

func printLab(w io.Writer, results []lab.Result, asJSON bool) {
	if asJSON {
		_ = json.NewEncoder(w).Encode(map[string]any{"scenarios": results})
		return
	}
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
		if r.Error != "" {
			u, g = "error: "+r.Error, "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Title, u, yes(r.Unsafe.Reproduced && r.Error == ""), g, yes(r.Guarded.OK && r.Error == ""))
	}
	_ = tw.Flush()
	passed := 0
	for _, r := range results {
		if r.Passed() {
			passed++
		}
	}
	fmt.Fprintf(w, "%d of %d scenarios: unsafe reproduced and guarded held\n", passed, len(results))
}
