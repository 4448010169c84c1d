package mutants_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/mutants"
)

func TestListIsValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, mutants.Validate(mutants.List))
	assert.GreaterOrEqual(t, len(mutants.List), 25)
}

func TestApplyNeedsExactlyOneOccurrence(t *testing.T) {
	t.Parallel()
	m := mutants.Mutant{ID: "x", File: "f.go", Original: "fence <= ?", Replacement: "TRUE"}
	out, err := mutants.Apply([]byte("WHERE id = ? AND fence <= ?"), m)
	require.NoError(t, err)
	assert.Equal(t, "WHERE id = ? AND TRUE", string(out))

	_, err = mutants.Apply([]byte("WHERE id = ?"), m)
	assert.ErrorContains(t, err, "does not occur")
	_, err = mutants.Apply([]byte("fence <= ? OR fence <= ?"), m)
	assert.ErrorContains(t, err, "occurs 2 times")
	m.Replacement = m.Original
	_, err = mutants.Apply([]byte("fence <= ?"), m)
	assert.Error(t, err)
}

func TestSelect(t *testing.T) {
	t.Parallel()
	list := []mutants.Mutant{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	got, err := mutants.Select(list, []string{"c", "a"})
	require.NoError(t, err)
	assert.Equal(t, []mutants.Mutant{{ID: "a"}, {ID: "c"}}, got)
	_, err = mutants.Select(list, []string{"a", "nope"})
	assert.ErrorContains(t, err, "nope")
}

func TestJudge(t *testing.T) {
	t.Parallel()
	exit := errors.New("exit status 1")
	cases := []struct {
		name   string
		out    string
		err    error
		want   mutants.Verdict
		detail string
	}{
		{"killed: the first failing test", "--- FAIL: TestB (0.10s)\n    x_test.go:9: no\n--- FAIL: TestA (0.20s)\nFAIL\nFAIL\tidemshop/internal/x\t0.3s\nFAIL\n",
			exit, mutants.Killed, "TestB"},
		{"killed: a subtest", "    --- FAIL: TestA/sub (0.00s)\n--- FAIL: TestA (0.00s)\n", exit, mutants.Killed, "TestA/sub"},
		{"survived", "ok  \tidemshop/internal/x\t1.2s\n", nil, mutants.Survived, "every test passed"},
		{"does not compile", "# idemshop/internal/x\ninternal/x/x.go:3:2: undefined: y\nFAIL\tidemshop/internal/x [build failed]\nFAIL\n",
			exit, mutants.Invalid, "does not compile"},
		{"no test matched", "ok  \tidemshop/internal/x\t0.01s [no tests to run]\n", nil, mutants.Invalid, "no test matched in idemshop/internal/x"},
		{"no test matched in a test binary run directly", "testing: warning: no tests to run\nPASS\n", nil, mutants.Invalid, "no test matched"},
		{"timed out", "panic: test timed out after 1m0s\n\trunning tests:\n\t\tTestHang (1m0s)\n\ngoroutine 1 [running]:\n", exit,
			mutants.Timeout, "hung in TestHang"},
		{"failed without a test", "panic: boom in init\nFAIL\tidemshop/internal/x\t0.01s\n", exit, mutants.Invalid,
			"go test failed without a failing test"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, detail := mutants.Judge(tc.out, tc.err)
			assert.Equal(t, tc.want, v)
			assert.Equal(t, tc.detail, detail)
		})
	}
	v, _ := mutants.JudgeBaseline("ok  \tidemshop/internal/x\t1.2s\n", nil)
	assert.Equal(t, mutants.Passed, v)
	v, detail := mutants.JudgeBaseline("--- FAIL: TestFlaky (1.00s)\n", exit)
	assert.Equal(t, mutants.Failed, v)
	assert.Equal(t, "TestFlaky", detail)
}

func TestTableFitsInHundredColumns(t *testing.T) {
	t.Parallel()
	var results []mutants.Result
	for _, m := range mutants.List {
		results = append(results, mutants.Result{Mutant: m, Verdict: mutants.Survived,
			Detail: "TestAVeryLongTestNameThatWouldNotFitInAnyColumn/with_a_subtest", Elapsed: 2*time.Minute + 5*time.Second})
	}
	table := mutants.Table(results)
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	require.Len(t, lines, len(mutants.List)+1)
	for _, l := range lines {
		assert.LessOrEqual(t, len(l), 100, "%q", l)
	}
	for _, r := range results {
		assert.LessOrEqual(t, len(mutants.Progress(r)), 100)
	}
}

// A test that reads a source file sees the mutated one under make mutants (the overlay in OverlayEnv
// puts it in the file's place), and the file itself otherwise or when the overlay replaces another.
func TestReadSourceFollowsTheOverlay(t *testing.T) {
	dir := t.TempDir()
	file, mutated := filepath.Join(dir, "f.sh"), filepath.Join(dir, "mutated.sh")
	require.NoError(t, os.WriteFile(file, []byte("original"), 0o644))
	require.NoError(t, os.WriteFile(mutated, []byte("mutant"), 0o644))
	overlay := func(replace map[string]string) string {
		js, err := json.Marshal(map[string]map[string]string{"Replace": replace})
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "overlay.json")
		require.NoError(t, os.WriteFile(path, js, 0o644))
		return path
	}
	t.Chdir(dir) // the path relative to the working directory, as a test gives it

	t.Setenv(mutants.OverlayEnv, "")
	got, err := mutants.ReadSource("f.sh")
	require.NoError(t, err)
	assert.Equal(t, "original", string(got), "no overlay")

	t.Setenv(mutants.OverlayEnv, overlay(map[string]string{file: mutated}))
	got, err = mutants.ReadSource("f.sh")
	require.NoError(t, err)
	assert.Equal(t, "mutant", string(got), "the overlay's replacement")

	t.Setenv(mutants.OverlayEnv, overlay(map[string]string{filepath.Join(dir, "other.go"): mutated}))
	got, err = mutants.ReadSource("f.sh")
	require.NoError(t, err)
	assert.Equal(t, "original", string(got), "an overlay of another file")
}
