// Command mutants runs the curated guard mutants (internal/mutants) and requires the tests named for each
// to fail. It prints a table (mutant, guard, the test that killed it, or why it was not killed) and exits
// 1 if any mutant survived, timed out or was invalid. The real tree is never written.
//
// Most mutants run from mutant schemata (internal/mutants/schema.go): one test binary per test package
// holds every mutant whose tests live there, and each run chooses one (IDEMSHOP_MUTANT). The binaries
// are built once, with `go test -c -overlay`; the 154 mutants of 2026-12-05 took 2m57s (132 in schemata) instead of
// 7m50s–10m48s with one build each. A test that fails without the chosen mutant's statement having run
// failed for another reason: it runs once more, and a second such failure makes the mutant INVALID, not
// killed by chance. A mutant a schema cannot hold (Schema says which and why; a test that reads the file
// itself: ReadsSource) runs the old way, alone: the mutated file written to a scratch directory and
// `go test -overlay`.
//
// The tests run without -race and without vet (the suite runs both; a mutant only needs an assertion to
// fail), so they share the build cache `go vet ./...` filled in `make lint`. The project's own packages
// are compiled without optimizations and inlining (-gcflags=idemshop/...=-N -l, mutants.BuildFlags), which halves their compile time
// while the Go spec promises the same behaviour; the suite runs the tests on the optimized build. Do not
// edit the tree during a run: the mutated files are read once, the others live.
//
//	go run ./cmd/mutants                       # every mutant, three at a time
//	go run ./cmd/mutants -only pay-finish-fence,sweeper-refund-requested
//	go run ./cmd/mutants -baseline             # the same tests on the unchanged tree: all must pass
//	go run ./cmd/mutants -only pay-finish-fence -run '^TestPayStale'   # does this test alone kill it?
//	go run ./cmd/mutants -check                # only check that every snippet occurs exactly once
//	go run ./cmd/mutants -list                 # print the mutants
//
// The tests need the same services as `make test` (PostgreSQL, Redis, RabbitMQ; see docs/testing.md).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"idemshop/internal/mutants"
)

func main() {
	os.Exit(run())
}

type options struct {
	only      string
	run       string
	jobs      int
	timeout   time.Duration
	baseline  bool
	check     bool
	list      bool
	keep      bool
	race      bool
	schema    bool
	verbose   bool
	moduleDir string
}

func run() int {
	var o options
	flag.StringVar(&o.only, "only", "", "comma-separated mutant ids to run (default: all)")
	flag.StringVar(&o.run, "run", "", "use this -run regexp instead of each mutant's own (same packages)")
	flag.IntVar(&o.jobs, "j", 3, "mutants run (and schema binaries built) at once, 1 to 4")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Minute, "go test -timeout for one mutant")
	flag.BoolVar(&o.baseline, "baseline", false, "run each mutant's tests on the unchanged tree instead; they must pass")
	flag.BoolVar(&o.check, "check", false, "only check the list against the tree (every original occurs exactly once)")
	flag.BoolVar(&o.list, "list", false, "print the mutants and exit")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory (mutated files, overlays and logs)")
	flag.BoolVar(&o.race, "race", false, "run the tests with -race (slower; the suite already runs the tests with it)")
	flag.BoolVar(&o.schema, "schema", true, "build one test binary per test package holding all its mutants, chosen at run time (internal/mutants/schema.go); false: one build per mutant")
	flag.BoolVar(&o.verbose, "v", false, "print each mutant's go test output as it finishes")
	flag.Parse()
	if o.jobs < 1 || o.jobs > 4 {
		fmt.Fprintln(os.Stderr, "mutants: -j must be 1 to 4")
		return 2
	}
	if err := mutants.Validate(mutants.List); err != nil {
		fmt.Fprintln(os.Stderr, "mutants: the list is broken:", err)
		return 2
	}
	var ids []string
	if o.only != "" {
		ids = strings.Split(o.only, ",")
	}
	selected, err := mutants.Select(mutants.List, ids)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	if o.run != "" {
		if _, err := regexp.Compile(o.run); err != nil {
			fmt.Fprintln(os.Stderr, "mutants: -run:", err)
			return 2
		}
		for i := range selected {
			selected[i].Run = o.run
		}
	}
	if o.list {
		for _, m := range selected {
			fmt.Printf("%-22s %-22s %s\n%45s -run '%s' %s\n", m.ID, m.Guard, m.File, "", m.Run, strings.Join(m.Pkgs, " "))
		}
		return 0
	}
	if o.moduleDir, err = moduleRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	if o.check {
		return check(o, selected)
	}
	return runAll(o, selected)
}

// check applies every selected mutant to the real files in memory and reports the ones that do not
// apply: a guard's line changed and its mutant must follow.
func check(o options, list []mutants.Mutant) int {
	bad := 0
	for _, m := range list {
		src, err := os.ReadFile(filepath.Join(o.moduleDir, m.File))
		if err == nil {
			_, err = mutants.Apply(src, m)
		}
		if err != nil {
			bad++
			fmt.Printf("%-22s %v\n", m.ID, err)
		}
	}
	fmt.Printf("%d mutants checked, %d do not apply\n", len(list), bad)
	if bad > 0 {
		return 1
	}
	return 0
}

func runAll(o options, list []mutants.Mutant) int {
	start := time.Now()
	scratch, err := os.MkdirTemp("", "idemshop-mutants-")
	if err == nil {
		// Absolute: test binaries run in their package's directory (a relative TMPDIR would move).
		scratch, err = filepath.Abs(scratch)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	keep := o.keep
	defer func() {
		if !keep {
			_ = os.RemoveAll(scratch)
		}
	}()

	fmt.Printf("mutants: %d mutants, %d at a time; scratch %s\n", len(list), o.jobs, scratch)

	// No build of the unchanged tree first: it would link every test binary once more, and a tree that
	// does not compile shows anyway, as every mutant INVALID ("does not compile").

	logs := filepath.Join(scratch, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	var schema schemaBuild
	if o.schema && !o.baseline {
		if schema, err = buildSchemas(o, scratch, list); err != nil {
			fmt.Fprintln(os.Stderr, "mutants: schema:", err)
			return 2
		}
	}
	results := make([]mutants.Result, len(list))
	slots := make(chan int, o.jobs)
	for i := range o.jobs {
		slots <- i
	}
	var wg sync.WaitGroup
	var printMu sync.Mutex
	for i, m := range list {
		slot := <-slots
		wg.Go(func() {
			defer func() { slots <- slot }()
			var r mutants.Result
			var out []byte
			if schema.in[m.ID] {
				r, out = runSchema(o, schema, m, filepath.Join(scratch, m.ID))
			} else {
				r, out = runOne(o, m, filepath.Join(scratch, m.ID))
			}
			results[i] = r
			logFile := filepath.Join(logs, m.ID+".log")
			_ = os.WriteFile(logFile, out, 0o644)
			printMu.Lock()
			defer printMu.Unlock()
			fmt.Println(mutants.Progress(r))
			if o.verbose {
				os.Stdout.Write(out)
			}
		})
	}
	wg.Wait()

	fmt.Println()
	fmt.Print(mutants.Table(results))
	counts := map[mutants.Verdict]int{}
	for _, r := range results {
		counts[r.Verdict]++
	}
	want := mutants.Killed
	if o.baseline {
		want = mutants.Passed
	}
	var summary []string
	for _, v := range []mutants.Verdict{mutants.Killed, mutants.Passed, mutants.Failed, mutants.Survived, mutants.Timeout, mutants.Invalid} {
		if counts[v] > 0 {
			summary = append(summary, fmt.Sprintf("%d %s", counts[v], strings.ToLower(string(v))))
		}
	}
	fmt.Printf("\n%d mutants: %s; wall time %s\n", len(results), strings.Join(summary, ", "), time.Since(start).Round(time.Second))
	if schema.failed > 0 {
		fmt.Printf("%d schema test binaries did not build (their output is above): their mutants ran alone, one build each\n", schema.failed)
	}
	if counts[want] != len(results) {
		keep = true
		fmt.Printf("go test output of every mutant: %s\n", logs)
		return 1
	}
	return 0
}

// runOne applies m to its file (unless -baseline), writes the result and an overlay naming it to dir,
// and runs m's tests with that overlay.
func runOne(o options, m mutants.Mutant, dir string) (mutants.Result, []byte) {
	start := time.Now()
	res := mutants.Result{Mutant: m}
	fail := func(v mutants.Verdict, detail string, out []byte) (mutants.Result, []byte) {
		res.Verdict, res.Detail, res.Elapsed = v, detail, time.Since(start)
		return res, out
	}
	path := filepath.Join(o.moduleDir, m.File)
	src, err := os.ReadFile(path)
	if err != nil {
		return fail(mutants.Invalid, "no such file", nil)
	}
	mutated, err := mutants.Apply(src, m)
	if err != nil {
		return fail(mutants.Invalid, "refused: "+err.Error(), nil)
	}
	// A test that reads the file itself (ReadsSource) finds the mutated one through the same overlay
	// (mutants.ReadSource); until 2026-12-06 such a mutant ran in a copy of the tree, whose packages
	// compiled afresh (50-59 s for each of the workshop script's).
	overlay := ""
	if !o.baseline {
		if overlay, err = writeOverlay(dir, path, mutated); err != nil {
			return fail(mutants.Invalid, "scratch: "+err.Error(), nil)
		}
	}
	// The outer deadline only catches a go command that ignores -timeout (a wedged build).
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout+2*time.Minute)
	defer cancel()
	out, err := goTest(ctx, o, overlay, m.Run, m.Pkgs)
	if ctx.Err() != nil {
		return fail(mutants.Timeout, "go test did not end", out)
	}
	if o.baseline {
		res.Verdict, res.Detail = mutants.JudgeBaseline(string(out), err)
	} else {
		res.Verdict, res.Detail = mutants.Judge(string(out), err)
	}
	res.Elapsed = time.Since(start)
	return res, out
}

// writeOverlay writes mutated to dir and a `go build -overlay` file that puts it in place of path; it
// returns the overlay file's path.
func writeOverlay(dir, path string, mutated []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	file := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(file, mutated, 0o644); err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, writeOverlayFile(overlay, map[string]string{path: file})
}

// writeOverlayFile writes a `go build -overlay` file that puts each replace[path] in place of path.
func writeOverlayFile(overlay string, replace map[string]string) error {
	js, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return err
	}
	return os.WriteFile(overlay, js, 0o644)
}

// buildFlags are the build flags of every test binary the runner builds, alone or in a schema (see
// goTest).
func buildFlags(o options) []string {
	flags := append([]string{"-vet=off"}, mutants.BuildFlags...)
	if o.race {
		flags = append(flags, "-race")
	}
	return flags
}

// goTest runs `go test -count=1 -failfast -vet=off [-race] [-overlay F] -timeout T -run R pkgs` in the
// module directory and returns its combined output. -ldflags=-s -w only shortens
// the link: a test binary is linked anew for every mutant, and its symbol table is never read.
// The -gcflags of mutants.BuildFlags: see the package comment (the module's packages only; dependencies keep the
// build cache that go vet filled).
func goTest(ctx context.Context, o options, overlay, runRE string, pkgs []string) ([]byte, error) {
	args := append([]string{"test", "-count=1", "-failfast"}, buildFlags(o)...)
	args = append(args, "-timeout", o.timeout.String(), "-run", runRE)
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = o.moduleDir
	if overlay != "" {
		// Tests that run a built binary (testenv.Build) build it with the same overlay, so that a
		// mutant in a command's code reaches the process the test starts.
		cmd.Env = append(os.Environ(), mutants.OverlayEnv+"="+overlay)
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return buf.Bytes(), err
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}
