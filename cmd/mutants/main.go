// Command mutants runs the curated guard mutants (internal/mutants): for each one it copies the working
// tree to a scratch directory, applies the mutant there, runs the tests named for it and requires one
// of them to fail. The real tree is never touched. It prints a table (mutant, guard, the test that
// killed it, or why it was not killed) and exits 1 if any mutant survived, timed out or was invalid.
//
//	go run ./cmd/mutants                       # every mutant, two at a time
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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	verbose   bool
	moduleDir string
}

func run() int {
	var o options
	flag.StringVar(&o.only, "only", "", "comma-separated mutant ids to run (default: all)")
	flag.StringVar(&o.run, "run", "", "use this -run regexp instead of each mutant's own (same packages)")
	flag.IntVar(&o.jobs, "j", 2, "mutants run at once (at most 2: the tests share one PostgreSQL and two cores)")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Minute, "go test -timeout for one mutant")
	flag.BoolVar(&o.baseline, "baseline", false, "run each mutant's tests on the unchanged tree instead; they must pass")
	flag.BoolVar(&o.check, "check", false, "only check the list against the tree (every original occurs exactly once)")
	flag.BoolVar(&o.list, "list", false, "print the mutants and exit")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory (tree copies and logs)")
	flag.BoolVar(&o.verbose, "v", false, "print each mutant's go test output as it finishes")
	flag.Parse()
	if o.jobs < 1 || o.jobs > 2 {
		fmt.Fprintln(os.Stderr, "mutants: -j must be 1 or 2")
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

	// One snapshot of the working tree for the whole run, so that edits made meanwhile do not mix in.
	base := filepath.Join(scratch, "base")
	files, err := snapshot(o.moduleDir, base)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants: copy the tree:", err)
		return 2
	}
	fmt.Printf("mutants: %d files copied to %s; %d mutants, %d at a time\n", len(files), scratch, len(list), o.jobs)

	// The unchanged tree must compile with every test package the list names. -trimpath keeps build
	// cache keys independent of the directory, so this also warms the cache for every copy below.
	if out, err := goTest(context.Background(), base, o.timeout, "^$", pkgsOf(list)); err != nil {
		fmt.Fprintf(os.Stderr, "mutants: the unchanged tree does not build its tests; no mutant can prove anything:\n%s", out)
		return 2
	}
	fmt.Printf("mutants: the unchanged tree builds (%s)\n", time.Since(start).Round(time.Second))

	logs := filepath.Join(scratch, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
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
			dir := filepath.Join(scratch, fmt.Sprintf("w%d", slot))
			r, out := runOne(o, m, base, files, dir)
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
	if counts[want] != len(results) {
		keep = true
		fmt.Printf("go test output of every mutant: %s\n", logs)
		return 1
	}
	return 0
}

// runOne copies base into dir, applies m (unless -baseline) and runs m's tests there.
func runOne(o options, m mutants.Mutant, base string, files []string, dir string) (mutants.Result, []byte) {
	start := time.Now()
	res := mutants.Result{Mutant: m}
	fail := func(v mutants.Verdict, detail string, out []byte) (mutants.Result, []byte) {
		res.Verdict, res.Detail, res.Elapsed = v, detail, time.Since(start)
		return res, out
	}
	if err := os.RemoveAll(dir); err != nil {
		return fail(mutants.Invalid, "scratch: "+err.Error(), nil)
	}
	if err := copyFiles(base, dir, files); err != nil {
		return fail(mutants.Invalid, "scratch: "+err.Error(), nil)
	}
	path := filepath.Join(dir, m.File)
	src, err := os.ReadFile(path)
	if err != nil {
		return fail(mutants.Invalid, "no such file", nil)
	}
	mutated, err := mutants.Apply(src, m)
	if err != nil {
		return fail(mutants.Invalid, "refused: "+err.Error(), nil)
	}
	if !o.baseline {
		if err := os.WriteFile(path, mutated, 0o644); err != nil {
			return fail(mutants.Invalid, "scratch: "+err.Error(), nil)
		}
	}
	// The outer deadline only catches a go command that ignores -timeout (a wedged build).
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout+2*time.Minute)
	defer cancel()
	out, err := goTest(ctx, dir, o.timeout, m.Run, m.Pkgs)
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

// goTest runs `go test -count=1 -failfast -trimpath -timeout T -run R pkgs` in dir and returns its
// combined output.
func goTest(ctx context.Context, dir string, timeout time.Duration, runRE string, pkgs []string) ([]byte, error) {
	args := append([]string{"test", "-count=1", "-failfast", "-trimpath", "-timeout", timeout.String(), "-run", runRE}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return buf.Bytes(), err
}

// pkgsOf lists the packages named by list, each once.
func pkgsOf(list []mutants.Mutant) []string {
	var out []string
	for _, m := range list {
		for _, p := range m.Pkgs {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
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

// snapshot copies the working tree as git sees it (tracked and untracked files, minus ignored ones:
// no .git, no bin/, no built binaries) from root to dst and returns the copied paths.
func snapshot(root, dst string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		st, err := os.Lstat(filepath.Join(root, f))
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the working tree, or a symlink or submodule
		}
		files = append(files, f)
	}
	return files, copyFiles(root, dst, files)
}

func copyFiles(from, to string, files []string) error {
	for _, f := range files {
		if err := copyFile(filepath.Join(from, f), filepath.Join(to, f)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
