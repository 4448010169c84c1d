// Package mutants holds the curated guard mutants of `make mutants` (list.go) and the pieces of their
// runner (cmd/mutants) that need no services: applying a mutant to a file, reading `go test` output,
// and printing the table.
//
// A guard is only proven by a test that fails without it. Each mutant removes or weakens one guard (a
// WHERE predicate, an ON CONFLICT, a fence comparison, a Lua step, a lease check...) by replacing one
// exact snippet of one file; the runner builds the mutated program (in a schema with the others where it
// can: schema.go) and runs the tests named for it, which must fail.
package mutants

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// OverlayEnv names the variable through which cmd/mutants hands its `go build -overlay` file to the
// tests it runs, so that testenv.Build builds the binaries a test starts with the mutated file too.
const OverlayEnv = "IDEMSHOP_TEST_OVERLAY"

// BuildFlags are the build flags of every program built under `make mutants`: the runner's test
// binaries, and the binaries a test starts (testenv.Build, given OverlayEnv). The module's packages are
// compiled without optimizations and inlining (-N -l), which halves their compile time, and the Go spec
// promises the same behaviour. The same flags on both sides let a binary a test starts reuse the
// packages its test binary compiled with the same overlay: with the default flags, every package a
// schema overlay changes, and every package above it, compiled once more, optimized, for each test
// package's mutants (24-36 s of several mutants' time on 2026-12-07). -ldflags=-s -w shortens each
// link: no symbol table is read. The pattern names the module, not ./..., because a test's go build
// runs in its package's directory.
var BuildFlags = []string{"-ldflags=-s -w", "-gcflags=idemshop/...=-N -l"}

// Mutant is one deliberate break of one guard.
type Mutant struct {
	// ID is short, stable and unique: `make mutants ONLY=<id>` runs this one alone.
	ID string
	// Guard names the guard of the ladder that the mutant breaks.
	Guard string
	// File is the file to change, relative to the module root.
	File string
	// Original must occur exactly once in File; Replacement takes its place.
	Original, Replacement string
	// Pkgs are the packages whose tests must catch the mutant (e.g. ./internal/ordersapp), and Run the
	// -run regexp that selects those tests.
	Pkgs []string
	Run  string
	// ReadsSource says the killing test reads File itself (a static check, such as the constant-time
	// compare's, or a shell script the test runs), through ReadSource: `go test -overlay` changes what
	// is compiled, not what is on disk. Such a mutant runs alone, never in a schema, whose file holds
	// the original body beside the mutated copy.
	ReadsSource bool
}

// ReadSource reads the file at path (relative to the working directory, as a test runs in its
// package's directory), or, when cmd/mutants runs the test (OverlayEnv), the mutated file its overlay
// puts in that file's place. A test that reads a source file or runs a script with it sees the mutant.
func ReadSource(path string) ([]byte, error) {
	if overlay := os.Getenv(OverlayEnv); overlay != "" {
		js, err := os.ReadFile(overlay)
		if err != nil {
			return nil, fmt.Errorf("read the overlay: %w", err)
		}
		var o struct{ Replace map[string]string }
		if err := json.Unmarshal(js, &o); err != nil {
			return nil, fmt.Errorf("read the overlay %s: %w", overlay, err)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		if r, ok := o.Replace[abs]; ok {
			return os.ReadFile(r)
		}
	}
	return os.ReadFile(path)
}

// Apply returns src with m's Original replaced by its Replacement. It refuses a mutant whose Original
// does not occur exactly once: a snippet that is missing (the code changed) or ambiguous would break
// another line than the guard it names.
func Apply(src []byte, m Mutant) ([]byte, error) {
	if m.Original == "" || m.Original == m.Replacement {
		return nil, errors.New("the original is empty or equal to the replacement")
	}
	switch n := strings.Count(string(src), m.Original); n {
	case 1:
		return []byte(strings.Replace(string(src), m.Original, m.Replacement, 1)), nil
	case 0:
		return nil, fmt.Errorf("the original does not occur in %s", m.File)
	default:
		return nil, fmt.Errorf("the original occurs %d times in %s", n, m.File)
	}
}

// Validate checks the list itself: every field set, ids unique, every -run regexp compiles.
func Validate(list []Mutant) error {
	seen := map[string]bool{}
	var errs []error
	for i, m := range list {
		switch {
		case m.ID == "" || m.Guard == "" || m.File == "" || m.Original == "" || len(m.Pkgs) == 0 || m.Run == "":
			errs = append(errs, fmt.Errorf("mutant %d (%q): every field must be set", i, m.ID))
		case seen[m.ID]:
			errs = append(errs, fmt.Errorf("mutant id %q is used twice", m.ID))
		case len(m.ID) > IDWidth || len(m.Guard) > GuardWidth:
			errs = append(errs, fmt.Errorf("mutant %q: id and guard fit in %d and %d columns", m.ID, IDWidth, GuardWidth))
		}
		seen[m.ID] = true
		if _, err := regexp.Compile(m.Run); err != nil {
			errs = append(errs, fmt.Errorf("mutant %q: -run %q: %w", m.ID, m.Run, err))
		}
	}
	return errors.Join(errs...)
}

// Select returns a copy of the mutants of list named in ids (all of them when ids is empty), in list
// order.
func Select(list []Mutant, ids []string) ([]Mutant, error) {
	if len(ids) == 0 {
		return slices.Clone(list), nil
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []Mutant
	for _, m := range list {
		if want[m.ID] {
			out = append(out, m)
			delete(want, m.ID)
		}
	}
	if len(want) > 0 {
		var unknown []string
		for id := range want {
			unknown = append(unknown, id)
		}
		return nil, fmt.Errorf("unknown mutant ids: %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

// Verdict is what became of one mutant.
type Verdict string

// The verdicts. Only Killed is a success: a test failed on an assertion (or a panic) with the guard
// gone. A mutant that times out was not caught by an assertion; one that is Invalid proved nothing.
const (
	Killed   Verdict = "KILLED"
	Survived Verdict = "SURVIVED"
	Invalid  Verdict = "INVALID"
	Timeout  Verdict = "TIMEOUT"
	// Passed and Failed are the verdicts of a baseline run (the named tests on the unchanged tree).
	Passed Verdict = "PASSED"
	Failed Verdict = "FAILED"
)

var (
	failLine     = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	timeoutPanic = regexp.MustCompile(`(?m)^panic: test timed out after \S+\n(?:.*\n)*?\s+running tests:\n\s+(\S+)`)
	buildFailed  = regexp.MustCompile(`(?m)^FAIL\s+\S+\s+\[(?:build|setup) failed\]$`)
	noTests      = regexp.MustCompile(`(?m)^(?:ok|\?)\s+(\S+)\s.*\[no test(?:s to run| files)\]$`)
	// A test binary run directly (a schema's: cmd/mutants) says it so.
	noTestsRun = regexp.MustCompile(`(?m)^testing: warning: no tests to run$`)
)

// Judge reads the combined output of one `go test` run over a mutated tree, or of a schema's test
// binaries run with the mutant chosen (exitErr is its error, nil
// for exit status 0) and says what it proves. detail is the first failing test for Killed, and a short
// reason otherwise.
func Judge(out string, exitErr error) (v Verdict, detail string) {
	if buildFailed.MatchString(out) {
		return Invalid, "does not compile"
	}
	// An assertion that failed first counts, even if another test then hung.
	if m := failLine.FindStringSubmatch(out); m != nil {
		return Killed, m[1]
	}
	if m := timeoutPanic.FindStringSubmatch(out); m != nil {
		return Timeout, "hung in " + m[1]
	}
	if m := noTests.FindStringSubmatch(out); m != nil {
		return Invalid, "no test matched in " + m[1]
	}
	if noTestsRun.MatchString(out) {
		return Invalid, "no test matched"
	}
	if exitErr != nil {
		// A failure without a failing test: a package that panicked in init or TestMain, a vet error...
		return Invalid, "go test failed without a failing test"
	}
	return Survived, "every test passed"
}

// JudgeBaseline reads a run of a mutant's tests on the unchanged tree: they must pass.
func JudgeBaseline(out string, exitErr error) (Verdict, string) {
	v, detail := Judge(out, exitErr)
	switch v {
	case Survived:
		return Passed, "the tests pass without the mutant"
	case Killed:
		return Failed, detail
	}
	return v, detail
}

// Result is one row of the table.
type Result struct {
	Mutant  Mutant
	Verdict Verdict
	Detail  string
	Elapsed time.Duration
}

// Widths of the table's columns. An id or a guard never needs clipping (Validate keeps them within
// their widths); a test name longer than the last column is cut. 22+1+22+1+8+1+45 = 100 columns.
const (
	IDWidth     = 22
	GuardWidth  = 22
	resultWidth = 8
	detailWidth = 45
)

// Table prints results as a fixed-width table no wider than 100 columns: mutant, guard, verdict, and
// the test that killed it (or why it was not killed).
func Table(results []Result) string {
	var b strings.Builder
	row := func(id, guard, verdict, detail string) {
		line := fmt.Sprintf("%-*s %-*s %-*s %s", IDWidth, clip(id, IDWidth), GuardWidth, clip(guard, GuardWidth),
			resultWidth, clip(verdict, resultWidth), clip(detail, detailWidth))
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
	row("MUTANT", "GUARD", "RESULT", "KILLED BY (or why not)")
	for _, r := range results {
		row(r.Mutant.ID, r.Mutant.Guard, string(r.Verdict), r.Detail)
	}
	return b.String()
}

// Progress is the line printed as each mutant finishes (at most 100 columns).
func Progress(r Result) string {
	line := fmt.Sprintf("  %-*s %-*s %6s  %s", IDWidth, r.Mutant.ID, resultWidth, r.Verdict,
		r.Elapsed.Round(time.Second), r.Detail)
	return clip(line, 100)
}

// clip cuts s to width columns, marking a cut with '~' (the table stays ASCII, one byte per column).
func clip(s string, width int) string {
	if len(s) <= width {
		return s
	}
	return s[:width-1] + "~"
}
