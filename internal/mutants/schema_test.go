package mutants_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/mutants"
)

// toy is a file with mutants in each kind of function a schema must hold: a plain function, a method, a
// variadic generic function, one without results, two in one function, an unnamed parameter, a deferred
// function that calls recover(), functions that read their caller's line, a body with a label, package
// variables' values (one over several lines, before the functions that read their lines); and some it
// must leave out.
const toy = `package toy

import (
	"fmt"
	"runtime"
)

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

func catch(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("recovered: %v", r)
	}
}

// Safe turns a panic of f into an error (recover() works only in the deferred call's own frame).
func Safe(f func()) (err error) {
	defer catch(&err)
	f()
	return nil
}

// Words spans lines: its copies in the schema must not move the lines below.
var Words = []string{
	"one",
	"two",
}

var Typed int64 = 333

// Plain has no mutant, so no line directive of its own: its line is right only if Words' copies
// gave the lines after them back.
func Plain() int { return Here() }

// Here is the line it is called from.
func Here() int {
	_, _, line, _ := runtime.Caller(1)
	return line
}

func Lines() (int, int) {
	first := Here()
	var second int
outer:
	for i := 0; ; i++ {
		if i > 2 {
			second = Here()
			break outer
		}
	}
	return first, second
}

func Reset(n int) (m int) {
	m, ok := n*2, true
	_ = ok
	return m
}

// Twice's := assigns its parameter n in the function's block, and declares a new n in a copy's.
func Twice(n int) int {
	n, ok := n*2, true
	_ = ok
	return n
}

func Hop(n int) int {
again:
	if n > 1 {
		n /= 2
		goto again
	}
	return n
}

func Kind(n int) string {
	switch {
	case n < 0:
		return "negative"
	}
	return "other"
}
`

var toyMutants = []mutants.Mutant{
	{ID: "sum-minus", Original: "return a + b", Replacement: "return a - b"},
	{ID: "add-twice", Original: "c.n += d", Replacement: "c.n += 2 * d"},
	{ID: "max-is-min", Original: "if r > first {", Replacement: "if r < first {"},
	{ID: "note-none", Original: "Log = append(Log, fmt.Sprint(\"note:\", s))", Replacement: "_ = s"},
	{ID: "clamp-low", Original: "if x < 0 {", Replacement: "if x < -5 {"},
	{ID: "clamp-high", Original: "if x > 9 {", Replacement: "if false {"},
	{ID: "unnamed-param", Original: "return limit", Replacement: "return 0"},
	{ID: "catch-says", Original: "\"recovered: %v\"", Replacement: "\"caught: %v\""},
	{ID: "here-plus", Original: "return line", Replacement: "return line + 1000"},
	{ID: "lines-later", Original: "if i > 2 {", Replacement: "if i > 3 {"},
	{ID: "twice-thrice", Original: "n, ok := n*2", Replacement: "n, ok := n*3"},
	{ID: "kind-no-end", Original: "return \"other\"", Replacement: "_ = \"other\""},
	{ID: "no-runtime", Original: "_, _, line, _ := runtime.Caller(1)", Replacement: "line := 0"},
	{ID: "hop-more", Original: "if n > 1 {", Replacement: "if n > 2 {"},
	{ID: "lines-first", Original: "first := Here()", Replacement: "first := Here() + 1"},
	{ID: "words-first", Original: "\"one\",", Replacement: "\"uno\","},
	{ID: "words-second", Original: "\"two\",\n", Replacement: "\"dos\",\n\t\"tres\",\n"},
	{ID: "kind-zero", Original: "return \"negative\"", Replacement: "return \"negative\"\n\tcase n == 0:\n\t\treturn \"zero\""},
	// Left out:
	{ID: "limit-const", Original: "const limit = 10", Replacement: "const limit = 11"},
	{ID: "typed-more", Original: "333", Replacement: "444"},
	{ID: "break-label", Original: "break outer", Replacement: "break"},
	{ID: "reset-thrice", Original: "m, ok := n*2", Replacement: "m, ok := n*3"},
	{ID: "gone", Original: "nowhere", Replacement: "x"},
}

func TestSchemaLeavesOutWhatItCannotHold(t *testing.T) {
	t.Parallel()
	out, skipped, err := mutants.Schema([]byte(toy), toyMutants)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"limit-const":  "not inside a function's body or a package variable's value",
		"typed-more":   "not inside a function's body or a package variable's value",
		"break-label":  "a label inside its snippet",
		"reset-thrice": "Reset declares m again at its body's top level",
		"twice-thrice": "Twice declares n again at its body's top level",
		"kind-no-end":  "its mutated Kind may not end in a return",
		"no-runtime":   "it removes the last runtime.X (an unused import or variable, alone)",
		"hop-more":     "Hop has a goto",
		"gone":         "its original does not occur exactly once",
	}, skipped)
	assert.NotContains(t, string(out), "const limit = 11")
	assert.NotContains(t, string(out), "m, ok := n*3")
	// The copy starts on the opening brace's line, and both bodies are told that line again.
	assert.Contains(t, string(out), "func (c *Counter) Add(d int) int { if idemshopMutantOn(\"add-twice\") {/*line :15:35*/\n\tidemshopMutantReached(); c.n += 2 * d\n")
	assert.Contains(t, string(out), "\n}; /*line :15:35*/\n\tc.n += d\n")
	// The copy's labels are renamed; the original's are not.
	assert.Contains(t, string(out), "idemshopMutant9_outer:\n")
	assert.Contains(t, string(out), "break idemshopMutant9_outer\n")
	assert.Contains(t, string(out), "idemshopMutant14_outer:\n") // a second mutant of Lines: its own label
	assert.Contains(t, string(out), "\nouter:\n")
}

// TestSchemaRunsTheChosenMutantOnly builds the toy's schema with the go command and runs it with each
// mutant chosen, and with none: only the chosen one changes what the program prints, a reached file
// appears only when the mutated statement ran, recover() and runtime.Caller see the frames they see in
// the tree, and every line keeps its number.
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
	"strings"

	"toymod/toy"
)

func main() {
	c := &toy.Counter{}
	c.Add(3)
	if len(os.Args) > 1 {
		toy.Note("x") // only when asked: the reached file must then appear for note-none alone
	}
	first, second := toy.Lines()
	fmt.Println(toy.Sum(5, 3), c.Add(1), toy.Max(1, 7, 4), len(toy.Log), toy.Clamp(-3), toy.Clamp(12), toy.Unnamed(0),
		toy.Safe(func() { panic("boom") }), first, second, toy.Reset(2), toy.Twice(2), toy.Kind(0))
	fmt.Println(strings.Join(toy.Words, "+"), toy.Typed, toy.Plain())
}
`)
	out, _, err := mutants.Schema([]byte(toy), toyMutants)
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

	lineOf := func(text string) int {
		for i, l := range strings.Split(toy, "\n") {
			if strings.TrimSpace(l) == text {
				return i + 1
			}
		}
		t.Fatalf("no line %q", text)
		return 0
	}
	first, second := lineOf("first := Here()"), lineOf("second = Here()")
	plain := lineOf("func Plain() int { return Here() }")
	// run returns the program's first line, and checks its second (the package variables).
	run := func(chosen string, args ...string) (string, bool) {
		reached := filepath.Join(dir, "reached-"+chosen+strings.Join(args, ""))
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), mutants.SelectEnv+"="+chosen, mutants.ReachedEnv+"="+reached)
		b, err := cmd.Output()
		require.NoError(t, err)
		_, statErr := os.Stat(reached)
		first, vars, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		words := map[string]string{"words-first": "uno+two", "words-second": "one+dos+tres"}[chosen]
		line := plain
		if chosen == "here-plus" {
			line += 1000
		}
		assert.Equal(t, fmt.Sprintf("%s 333 %d", cmp.Or(words, "one+two"), line), vars, "mutant %q: the package variables", chosen)
		return first, statErr == nil
	}
	want := func(format string, more ...any) string {
		return fmt.Sprintf(format, append(more, first, second)...) + " 4 other"
	}
	cases := []struct {
		chosen, want string
		args         []string
		reached      bool
	}{
		{"", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, false},
		{"sum-minus", want("2 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, true},
		{"add-twice", want("8 8 7 0 0 9 10 recovered: boom %d %d 4"), nil, true},
		{"max-is-min", want("8 4 1 0 0 9 10 recovered: boom %d %d 4"), nil, true},
		{"note-none", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, false},
		{"note-none", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), []string{"note"}, true},
		{"clamp-low", want("8 4 7 0 -3 9 10 recovered: boom %d %d 4"), nil, true},
		{"clamp-high", want("8 4 7 0 0 12 10 recovered: boom %d %d 4"), nil, true},
		{"unnamed-param", want("8 4 7 0 0 9 0 recovered: boom %d %d 4"), nil, true},
		{"catch-says", want("8 4 7 0 0 9 10 caught: boom %d %d 4"), nil, true},
		{"here-plus", fmt.Sprintf("8 4 7 0 0 9 10 recovered: boom %d %d 4 4 other", first+1000, second+1000), nil, true},
		{"twice-thrice", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, false}, // left out
		{"lines-first", fmt.Sprintf("8 4 7 0 0 9 10 recovered: boom %d %d 4 4 other", first+1, second), nil, true},
		// The new clause runs, not the statement it follows: the mark is before the switch.
		{"kind-zero", strings.TrimSuffix(want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), " 4 other") + " 4 zero", nil, true},
		{"lines-later", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, true},
		{"reset-thrice", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, false}, // left out of the schema
		// A package variable's mutant: reached once the program started with it.
		{"words-first", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, true},
		{"words-second", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, true},
		{"typed-more", want("8 4 7 0 0 9 10 recovered: boom %d %d 4"), nil, false}, // left out
	}
	for _, tc := range cases {
		got, reached := run(tc.chosen, tc.args...)
		assert.Equal(t, tc.want, got, "mutant %q", tc.chosen)
		assert.Equal(t, tc.reached, reached, "mutant %q %v: reached", tc.chosen, tc.args)
	}
	// Without the mutant, note-none's call leaves its note.
	got, _ := run("", "note")
	assert.Equal(t, want("8 4 7 1 0 9 10 recovered: boom %d %d 4"), got)
}

// TestSchemaMarksTheMutatedStatement: the reached mark goes before the innermost statement holding the
// snippet, not at the function's entry, so a test that only enters the function does not count.
func TestSchemaMarksTheMutatedStatement(t *testing.T) {
	t.Parallel()
	src := "package p\n\nfunc F(flag bool) int {\n\tn := 1\n\tif flag {\n\t\tn += 2\n\t}\n\treturn n\n}\n"
	out, skipped, err := mutants.Schema([]byte(src), []mutants.Mutant{{ID: "m", Original: "n += 2", Replacement: "n += 3"}})
	require.NoError(t, err)
	assert.Empty(t, skipped)
	assert.Contains(t, string(out), "\tif flag {\n\t\tidemshopMutantReached(); n += 3\n")
	// A snippet that starts with the statement's indentation marks before the indentation.
	out, _, err = mutants.Schema([]byte(src), []mutants.Mutant{{ID: "m", Original: "\t\tn += 2\n", Replacement: "\t\tn += 3\n"}})
	require.NoError(t, err)
	assert.Contains(t, string(out), "\tif flag {\nidemshopMutantReached(); \t\tn += 3\n")

	// A snippet that starts at a case or default marks before the switch: a mark before the clause
	// would end the clause above it, and run only there.
	src = "package p\n\nfunc G(n int) int {\n\tswitch {\n\tcase n < 0:\n\t\treturn 0\n\tdefault:\n\t\treturn n\n\t}\n}\n"
	for orig, repl := range map[string]string{"case n < 0:": "case n < 1:", "\tdefault:\n\t\treturn n": "\tdefault:\n\t\treturn -n"} {
		out, _, err = mutants.Schema([]byte(src), []mutants.Mutant{{ID: "m", Original: orig, Replacement: repl}})
		require.NoError(t, err)
		assert.Contains(t, string(out), "/*line :3:20*/\n\tidemshopMutantReached(); switch {\n", orig)
		_, err = parser.ParseFile(token.NewFileSet(), "", out, 0)
		assert.NoError(t, err, orig)
	}
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
