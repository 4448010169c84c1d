package mutants_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/mutants"
)

// toy is a file with one mutant in each kind of function a schema must hand over from: a plain
// function, a method, a variadic generic function, one without results, and two in one function.
const toy = `package toy

import "fmt"

// Sum adds.
func Sum(a, b int) int {
	return a + b
}

type Counter struct{ n int }

func (c *Counter) Add(d int) int {
	c.n += d
	return c.n
}

func Max[T int | float64](first T, rest ...T) T {
	for _, r := range rest {
		if r > first {
			first = r
		}
	}
	return first
}

var Log []string

func Note(s string) {
	Log = append(Log, fmt.Sprint("note:", s))
}

func Clamp(x int) int {
	if x < 0 {
		return 0
	}
	if x > 9 {
		return 9
	}
	return x
}

const limit = 10

func Unnamed(int) int { return limit }
`

var toyMutants = []mutants.Mutant{
	{ID: "sum-minus", Original: "return a + b", Replacement: "return a - b"},
	{ID: "add-twice", Original: "c.n += d", Replacement: "c.n += 2 * d"},
	{ID: "max-is-min", Original: "if r > first {", Replacement: "if r < first {"},
	{ID: "note-none", Original: "Log = append(Log, fmt.Sprint(\"note:\", s))", Replacement: "_ = s"},
	{ID: "clamp-low", Original: "if x < 0 {", Replacement: "if x < -5 {"},
	{ID: "clamp-high", Original: "if x > 9 {", Replacement: "if false {"},
	{ID: "limit-const", Original: "const limit = 10", Replacement: "const limit = 11"},
	{ID: "unnamed-param", Original: "return limit", Replacement: "return 0"},
}

func toySeq() map[string]int {
	seq := map[string]int{}
	for i, m := range toyMutants {
		seq[m.ID] = i
	}
	return seq
}

func TestSchemaLeavesOutWhatItCannotHandOver(t *testing.T) {
	t.Parallel()
	out, skipped, err := mutants.Schema([]byte(toy), toyMutants, toySeq())
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"limit-const":   "not inside a function's body",
		"unnamed-param": "a parameter or receiver of Unnamed has no name",
	}, skipped)
	assert.NotContains(t, string(out), "const limit = 11")

	// Every line of the file keeps its number: the hand-overs share the opening brace's line and the
	// copies come after the last line.
	orig, got := strings.Split(toy, "\n"), strings.Split(string(out), "\n")
	for i, line := range orig {
		assert.True(t, strings.HasPrefix(got[i], line), "line %d: %q became %q", i+1, line, got[i])
	}
	assert.Contains(t, got[11], `if idemshopMutantOn("add-twice") { return c.idemshopMutant1_Add(d) };`)
	assert.Contains(t, got[16], `if idemshopMutantOn("max-is-min") { return idemshopMutant2_Max[T](first, rest...) };`)
	assert.Contains(t, got[27], `if idemshopMutantOn("note-none") { idemshopMutant3_Note(s); return };`)

	_, _, err = mutants.Schema([]byte(toy), []mutants.Mutant{{ID: "gone", Original: "nowhere", Replacement: "x"}}, map[string]int{"gone": 0})
	assert.ErrorContains(t, err, "does not occur exactly once")
}

// TestSchemaRunsTheChosenMutantOnly builds the toy's schema with the go command and runs it with each
// mutant chosen, and with none: only the chosen one changes what the program prints, and the reached
// file appears only when the chosen mutant's function ran.
func TestSchemaRunsTheChosenMutantOnly(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a program with the go command")
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		return path
	}
	write("go.mod", "module toymod\n\ngo 1.22\n")
	toyPath := write("toy/toy.go", toy)
	write("main.go", `package main

import (
	"fmt"
	"os"

	"toymod/toy"
)

func main() {
	c := &toy.Counter{}
	c.Add(3)
	if len(os.Args) > 1 {
		toy.Note("x") // only when asked: the reached file must then appear for note-none alone
	}
	fmt.Println(toy.Sum(5, 3), c.Add(1), toy.Max(1, 7, 4), len(toy.Log), toy.Clamp(-3), toy.Clamp(12), toy.Unnamed(0))
}
`)
	out, _, err := mutants.Schema([]byte(toy), toyMutants, toySeq())
	require.NoError(t, err)
	support, err := mutants.SchemaSupport("toy")
	require.NoError(t, err)
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
		toyPath: write("scratch/toy.go", string(out)),
		filepath.Join(dir, "toy", mutants.SchemaFile): write("scratch/support.go", string(support)),
	}})
	require.NoError(t, err)
	bin := filepath.Join(dir, "toy.bin")
	build := exec.Command("go", "build", "-o", bin, "-overlay", write("scratch/overlay.json", string(overlay)), ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	b, err := build.CombinedOutput()
	require.NoError(t, err, "%s", b)

	run := func(chosen string, args ...string) (string, bool) {
		reached := filepath.Join(dir, "reached-"+chosen)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), mutants.SelectEnv+"="+chosen, mutants.ReachedEnv+"="+reached)
		b, err := cmd.Output()
		require.NoError(t, err)
		_, statErr := os.Stat(reached)
		return strings.TrimSpace(string(b)), statErr == nil
	}
	cases := []struct {
		chosen, want string
		args         []string
		reached      bool
	}{
		{"", "8 4 7 0 0 9 10", nil, false},
		{"sum-minus", "2 4 7 0 0 9 10", nil, true},
		{"add-twice", "8 8 7 0 0 9 10", nil, true},
		{"max-is-min", "8 4 1 0 0 9 10", nil, true},
		{"note-none", "8 4 7 0 0 9 10", nil, false},
		{"note-none", "8 4 7 0 0 9 10", []string{"note"}, true},
		{"clamp-low", "8 4 7 0 -3 9 10", nil, true},
		{"clamp-high", "8 4 7 0 0 12 10", nil, true},
		{"limit-const", "8 4 7 0 0 9 10", nil, false}, // left out of the schema
	}
	for _, tc := range cases {
		got, reached := run(tc.chosen, tc.args...)
		assert.Equal(t, tc.want, got, "mutant %q", tc.chosen)
		assert.Equal(t, tc.reached, reached, "mutant %q: reached", tc.chosen)
	}
	// Without the mutant, note-none's call leaves its note.
	got, _ := run("", "note")
	assert.Equal(t, "8 4 7 1 0 9 10", got)
}

func TestSchemaSupportNeedsAPackageName(t *testing.T) {
	t.Parallel()
	_, err := mutants.SchemaSupport("")
	assert.Error(t, err)
	_, err = mutants.SchemaSupport("not a name")
	assert.Error(t, err)
	src, err := mutants.SchemaSupport("toy")
	require.NoError(t, err)
	assert.Contains(t, string(src), "package toy\n")
}
