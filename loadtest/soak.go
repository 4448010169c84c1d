package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"idemshop/internal/platform/config"
	"idemshop/internal/platform/logging"
	"idemshop/internal/soak"
)

// runSoak is `loadtest soak [--json]`: the soak starts its own shop from SOAK_BIN, so ORDERS_URL and
// PAYMENTS_URL are not used; with SOAK_FAULTS=infra or all it also starts its own PostgreSQL, Redis
// and RabbitMQ and points the shop at them. `loadtest soak --cleanup` removes those of SOAK_RUN_ID. Exit 0 when the shop converged with no violation, 1 on any violation, 2
// on a usage or set-up error (or Ctrl-C). See docs/reliability.md.
func runSoak(ctx context.Context, cfg config.Loadtest, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadtest soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	cleanup := fs.Bool("cleanup", false, "only stop and remove the private PostgreSQL/Redis/RabbitMQ of run SOAK_RUN_ID "+
		"(left by a soak that was killed outright), then exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadtest soak: unexpected arguments %q\n", fs.Args())
		return 2
	}
	sc, err := config.LoadSoak()
	if err != nil {
		fmt.Fprintln(stderr, "loadtest soak:", err)
		return 2
	}
	if *cleanup {
		if sc.RunID == "" {
			fmt.Fprintln(stderr, "loadtest soak --cleanup: set SOAK_RUN_ID")
			return 2
		}
		dir := soak.InfraDir(sc.RunID)
		if _, err := os.Stat(dir); err != nil {
			return 0 // nothing left
		}
		code := 0
		for _, e := range soak.CleanupInfra(dir) {
			fmt.Fprintln(stderr, "loadtest soak --cleanup:", e)
			code = 1
		}
		fmt.Fprintln(stderr, "loadtest soak: removed the private infra left in", dir)
		return code
	}
	faults, err := soak.ParseFaults(sc.Faults)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest soak:", err)
		return 2
	}
	seed, random, err := soak.ParseSeed(sc.Seed)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest soak:", err)
		return 2
	}
	logger, err := logging.New(stderr, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest soak:", err)
		return 2
	}
	runID := sc.RunID
	if runID == "" {
		runID = fmt.Sprintf("soak_%d_%d", time.Now().Unix(), os.Getpid())
	}
	fmt.Fprintf(stderr, "soak: seed %d, run %s\n", seed, runID)
	rep, err := soak.Run(ctx, soak.Options{
		Seed: seed, Duration: sc.Duration, Grace: sc.Grace, Converge: sc.Converge, Faults: faults, Chaos: sc.Chaos,
		RequireInfra: sc.InfraRequired,
		Bin:          sc.Bin, RunID: runID, Logs: sc.Logs, ChildLogLevel: sc.ChildLogLevel,
		PostgresURL: cfg.Postgres.URL, RedisURL: cfg.Redis.URL, AMQPURL: cfg.AMQPURL,
		Secret: cfg.PaymentWebhookSecret, AdminToken: cfg.AdminToken, HTTPTimeout: cfg.HTTPTimeout,
		Log: logger, Progress: progressLine(stderr, *asJSON),
	})
	if rep != nil {
		rep.SeedRandom = random
	}
	if err != nil {
		if rep != nil && rep.Logs != "" {
			fmt.Fprintln(stderr, "loadtest soak: services' logs in", rep.Logs)
		}
		var se soak.SetupError
		if errors.As(err, &se) {
			fmt.Fprintln(stderr, "loadtest soak: set-up:", err)
		} else {
			fmt.Fprintf(stderr, "loadtest soak: interrupted (%v; seed %d); what the run created was removed\n", err, seed)
		}
		return 2
	}
	if *asJSON {
		_ = rep.JSON(stdout)
	} else {
		rep.Print(stdout)
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// progressLine is a one-line progress display on a terminal, nothing in logs and pipes.
func progressLine(stderr io.Writer, asJSON bool) func(string) {
	if f, ok := stderr.(*os.File); ok && !asJSON {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return func(msg string) { fmt.Fprintf(stderr, "\r\033[K%s", msg) }
		}
	}
	return func(string) {}
}
