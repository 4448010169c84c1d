package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"idemshop/internal/platform/config"
	"idemshop/internal/replay"
	"idemshop/internal/replay/play"
)

// shipped are the recordings in loadtest/replays, built in so that a binary without the repo (the
// Docker image) replays them too: `loadtest replay incident-triple-callback.jsonl`.
//
//go:embed replays/*.jsonl
var shipped embed.FS

// runReplay is `loadtest replay [--unsafe] [--json] [--keep] FILE`; the flags may also follow FILE.
func runReplay(ctx context.Context, cfg config.Loadtest, args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("loadtest replay", flag.ContinueOnError)
	fset.SetOutput(stderr)
	asJSON := fset.Bool("json", false, "print the report as JSON")
	unsafe := fset.Bool("unsafe", false, "send to the file's unsafe lab route (orders in lab mode)")
	keep := fset.Bool("keep", false, "leave the run's user, orders and rows in the database for inspection")
	if err := fset.Parse(args); err != nil {
		return 2
	}
	file := fset.Arg(0)
	if err := fset.Parse(fset.Args()[min(1, fset.NArg()):]); err != nil {
		return 2
	}
	if file == "" || fset.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: loadtest replay [--unsafe] [--json] [--keep] FILE")
		return 2
	}
	raw, name, err := readReplay(file)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest replay:", err)
		return 2
	}
	rec, err := replay.Parse(bytes.NewReader(raw))
	if err != nil {
		fmt.Fprintf(stderr, "loadtest replay: %s: %v\n", name, err)
		return 2
	}

	env, closeEnv, err := open(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	defer closeEnv()
	// As for lab and incident: a shop that is down, or not in lab mode for --unsafe, is a set-up error
	// named as such before any fixture is made.
	if err := env.CheckServices(ctx, *unsafe); err != nil {
		fmt.Fprintln(stderr, "loadtest replay:", err)
		return 2
	}
	// And the settings that must be the shop's (lab.md): with another DATABASE_URL the first order's
	// create was refused 401, named as such, and the variable not at all (a helper's finding, 2026-12-06).
	if err := env.CheckShop(ctx, false); err != nil {
		fmt.Fprintln(stderr, "loadtest replay:", err)
		return 2
	}
	env.Log.Info("replay", "file", name, "deliveries", len(rec.Deliveries), "unsafe", *unsafe)
	progress := progressLine(stderr, *asJSON)
	rep, err := play.Run(ctx, env, rec, play.Options{Name: name, Unsafe: *unsafe, Keep: *keep, Progress: progress})
	progress("")
	if err != nil {
		fmt.Fprintln(stderr, "loadtest replay:", err)
		return 2
	}
	printReplay(stdout, rep, *asJSON)
	if len(rep.Violations) > 0 {
		return 1
	}
	return 0
}

// maxReplayBytes bounds what readReplay reads: the shipped recordings are a few KiB, and a path that
// streams without end (/dev/zero, a FIFO) must not fill memory.
const maxReplayBytes = 16 << 20

// readReplay reads path, or, when path is a bare file name and no such file exists, the shipped
// recording of that name. A path with a directory never falls back: a typo in the directory would
// otherwise replay the shipped file in silence.
func readReplay(path string) ([]byte, string, error) {
	raw, err := readAtMost(path, maxReplayBytes)
	if err == nil {
		return raw, path, nil
	}
	if !errors.Is(err, fs.ErrNotExist) || filepath.Base(path) != path {
		return nil, "", err
	}
	if raw, serr := shipped.ReadFile("replays/" + path); serr == nil {
		return raw, path + " (shipped)", nil
	}
	names, _ := fs.Glob(shipped, "replays/*.jsonl")
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return nil, "", fmt.Errorf("%w (shipped replays: %v)", err, names)
}

// readAtMost reads path whole, or fails once it has read more than limit bytes.
func readAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s: larger than %d MiB; a replay file is a few KiB of JSON lines", path, limit>>20)
	}
	return raw, nil
}

func printReplay(w io.Writer, rep play.Report, asJSON bool) {
	if asJSON {
		_ = json.NewEncoder(w).Encode(rep)
		return
	}
	mode := "guarded"
	if rep.Unsafe {
		mode = "UNSAFE"
	}
	fmt.Fprintf(w, "replay %s, %s: %d deliveries in %d groups, %d orders, %.1fs\n",
		filepath.Base(rep.File), mode, rep.Deliveries, rep.Groups, len(rep.Orders), rep.Seconds)
	if rep.Title != "" {
		fmt.Fprintf(w, "  %s\n", rep.Title)
	}
	got, want := rep.Statuses()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  sent to\t%s\n", rep.Path)
	fmt.Fprintf(tw, "  answers\t%s\n", answers(rep.Answers))
	fmt.Fprintf(tw, "  callbacks received\t%d\n", rep.Callbacks.Received)
	fmt.Fprintf(tw, "  callbacks applied\t%d\t(want %d)\n", rep.Callbacks.Applied, rep.Callbacks.WantApplied)
	fmt.Fprintf(tw, "  stock delta\t%+d\t(want %+d)\n", rep.StockDelta, rep.WantStock)
	fmt.Fprintf(tw, "  points delta\t%+d\t(want %+d)\n", rep.PointsDelta, rep.WantPoints)
	fmt.Fprintf(tw, "  orders\t%s (want %s)\n", play.Summary(got), play.Summary(want))
	_ = tw.Flush()
	if rep.Kept {
		ids := make([]int64, len(rep.Orders))
		for i, o := range rep.Orders {
			ids[i] = o.ID
		}
		fmt.Fprintf(w, "  rows kept: user %d, orders %v\n", rep.UserID, ids)
	}
	printViolations(w, rep.Violations)
}

// answers writes the answer counts as "200 x12, 503 x1".
func answers(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s x%d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}
