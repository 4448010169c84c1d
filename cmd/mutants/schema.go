package main

import (
	"bytes"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"idemshop/internal/mutants"
)

// schemaBuild is what buildSchemas made: one test binary per test package, each holding every mutant
// whose tests live there (internal/mutants/schema.go), and the overlay they were built with.
type schemaBuild struct {
	overlay string
	goroot  string
	bins    map[string]string // test package (as in Mutant.Pkgs) → its test binary
	in      map[string]bool   // mutant id → it is in the binaries of all its packages
	failed  int               // schema binaries that did not build (their mutants ran alone)
}

// buildSchemas writes the schema of every file that list mutates, an overlay that puts them (and each
// package's SchemaFile) in place, and builds the test binary of every package that list's tests live
// in, o.jobs at a time. A mutant left out (Schema says why; a test that reads its source; a binary that
// did not build) is not in b.in: the caller runs it the old way, one build each.
func buildSchemas(o options, scratch string, list []mutants.Mutant) (schemaBuild, error) {
	b := schemaBuild{bins: map[string]string{}, in: map[string]bool{}}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return b, fmt.Errorf("go env GOROOT: %w", err)
	}
	b.goroot = strings.TrimSpace(string(goroot))
	dir := filepath.Join(scratch, "schema")
	replace := map[string]string{}
	byFile := map[string][]mutants.Mutant{}
	var files []string
	for _, m := range list {
		switch {
		case m.ReadsSource:
			fmt.Printf("mutants: %s runs alone: its test reads its file (mutants.ReadSource)\n", m.ID)
			continue
		case strings.HasSuffix(m.File, "_test.go"):
			// An external test package (x_test) would not see the package's SchemaFile.
			fmt.Printf("mutants: %s runs alone: it mutates a test file\n", m.ID)
			continue
		}
		if byFile[m.File] == nil {
			files = append(files, m.File)
		}
		byFile[m.File] = append(byFile[m.File], m)
	}
	candidate := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(o.moduleDir, f))
		if err != nil {
			return b, err
		}
		out, skipped, err := mutants.Schema(src, byFile[f])
		if err != nil {
			return b, fmt.Errorf("%s: %w", f, err)
		}
		for _, m := range byFile[f] {
			if why, ok := skipped[m.ID]; ok {
				fmt.Printf("mutants: %s runs alone: %s\n", m.ID, why)
				continue
			}
			candidate[m.ID] = true
		}
		if len(skipped) == len(byFile[f]) {
			continue
		}
		if err := writeReplacement(replace, dir, filepath.Join(o.moduleDir, f), out); err != nil {
			return b, err
		}
		pkgDir := filepath.Dir(filepath.Join(o.moduleDir, f))
		support := filepath.Join(pkgDir, mutants.SchemaFile)
		if _, done := replace[support]; done {
			continue
		}
		clause, err := parser.ParseFile(token.NewFileSet(), f, src, parser.PackageClauseOnly)
		if err != nil {
			return b, err
		}
		js, err := mutants.SchemaSupport(clause.Name.Name)
		if err != nil {
			return b, err
		}
		if err := writeReplacement(replace, dir, support, js); err != nil {
			return b, err
		}
	}
	// The directory exists only once a schema was written: when every mutant of the run runs alone
	// (ONLY= one that cannot be in a schema), there is none, and the empty overlay goes there too.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return b, err
	}
	b.overlay = filepath.Join(dir, "overlay.json")
	if err := writeOverlayFile(b.overlay, replace); err != nil {
		return b, err
	}

	var pkgs []string
	for _, m := range list {
		if candidate[m.ID] {
			for _, p := range m.Pkgs {
				if !slices.Contains(pkgs, p) {
					pkgs = append(pkgs, p)
				}
			}
		}
	}
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, o.jobs)
	for i, p := range pkgs {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			bin := filepath.Join(scratch, "bin", fmt.Sprintf("%02d-%s.test", i, filepath.Base(p)))
			out, err := goTestCompile(o, b.overlay, bin, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				// Every mutant of this package then runs alone, where the one that does not compile
				// shows as INVALID.
				fmt.Printf("mutants: the schema binary of %s did not build (%v); its mutants run alone:\n%s\n", p, err, clipLines(out, 20))
				return
			}
			b.bins[p] = bin
		})
	}
	wg.Wait()
	for _, m := range list {
		if !candidate[m.ID] {
			continue
		}
		in := true
		for _, p := range m.Pkgs {
			in = in && b.bins[p] != ""
		}
		b.in[m.ID] = in
	}
	fmt.Printf("mutants: %d of %d mutants in %d schema test binaries, built in %s\n",
		countTrue(b.in), len(list), len(b.bins), time.Since(start).Round(time.Second))
	b.failed = len(pkgs) - len(b.bins)
	return b, nil
}

func writeReplacement(replace map[string]string, dir, path string, content []byte) error {
	file := filepath.Join(dir, fmt.Sprintf("%03d-%s", len(replace), filepath.Base(path)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	replace[path] = file
	return os.WriteFile(file, content, 0o644)
}

// goTestCompile builds pkg's test binary to bin with the overlay and buildFlags.
func goTestCompile(o options, overlay, bin, pkg string) ([]byte, error) {
	args := append([]string{"test", "-c", "-o", bin}, buildFlags(o)...)
	cmd := exec.Command("go", append(args, "-overlay", overlay, pkg)...)
	cmd.Dir = o.moduleDir
	return cmd.CombinedOutput()
}

// runSchema runs m's tests from the schema binaries with m chosen, as `go test` would run them (in
// each package's directory, one package after another). A test that fails without the mutated
// statement having run failed for another reason (a flaky test): it is run once more, and if it fails
// so again, the mutant is INVALID rather than killed by chance.
func runSchema(o options, b schemaBuild, m mutants.Mutant, dir string) (mutants.Result, []byte) {
	start := time.Now()
	res := mutants.Result{Mutant: m}
	var all []byte
	for attempt := 1; ; attempt++ {
		reached := filepath.Join(dir, fmt.Sprintf("reached-%d", attempt))
		out, hung, err := runBinaries(o, b, m, reached)
		all = append(all, out...)
		res.Verdict, res.Detail = mutants.Judge(string(out), err)
		if hung {
			res.Verdict, res.Detail = mutants.Timeout, "the test binary did not end"
		}
		_, statErr := os.Stat(reached)
		ran := statErr == nil
		switch {
		case res.Verdict == mutants.Killed && !ran && attempt == 1:
			all = append(all, "\n[mutants] the test failed but the mutated statement never ran: once more\n"...)
			continue
		case res.Verdict == mutants.Killed && !ran:
			res.Verdict, res.Detail = mutants.Invalid, "failed, mutant never ran: "+res.Detail
		case res.Verdict == mutants.Survived && !ran:
			res.Detail = "every test passed; the mutated statement never ran"
		}
		res.Elapsed = time.Since(start)
		return res, all
	}
}

// runBinaries runs m's test binaries in turn, stopping at the first that fails; hung says one outlived
// the outer deadline (a binary that ignores -test.timeout).
func runBinaries(o options, b schemaBuild, m mutants.Mutant, reached string) (out []byte, hung bool, err error) {
	if err := os.MkdirAll(filepath.Dir(reached), 0o755); err != nil {
		return nil, false, err
	}
	var buf bytes.Buffer
	for _, p := range m.Pkgs {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout+2*time.Minute)
		// As `go test` runs a test binary: -test.paniconexit0 (an os.Exit(0) in a test is a failure, not
		// a pass), in the package's directory with PWD saying so, and GOROOT/bin first in PATH.
		cmd := exec.CommandContext(ctx, b.bins[p], "-test.paniconexit0", "-test.count=1", "-test.failfast",
			"-test.timeout="+o.timeout.String(), "-test.run="+m.Run)
		cmd.Dir = filepath.Join(o.moduleDir, p)
		cmd.Env = append(os.Environ(), "PWD="+cmd.Dir, "PATH="+b.goroot+"/bin"+string(os.PathListSeparator)+os.Getenv("PATH"),
			mutants.SelectEnv+"="+m.ID, mutants.ReachedEnv+"="+reached, mutants.OverlayEnv+"="+b.overlay)
		cmd.Stdout, cmd.Stderr = &buf, &buf
		cmd.WaitDelay = 10 * time.Second
		err := cmd.Run()
		if err != nil && cmd.ProcessState == nil {
			fmt.Fprintf(&buf, "[mutants] could not start %s: %v\n", b.bins[p], err)
		}
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut || err != nil {
			return buf.Bytes(), timedOut, err
		}
	}
	return buf.Bytes(), false, nil
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

func clipLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}
