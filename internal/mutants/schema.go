package mutants

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
)

// Mutant schemata (Untch, Offutt and Harrold, "Mutation analysis using mutant schemata", ISSTA 1993):
// instead of compiling one program per mutant, the runner compiles one program that holds every mutant
// and picks one at run time. A mutant's enclosing function is copied with the mutant applied, and the
// original function first hands over to that copy when the mutant is the chosen one:
//
//	func (g *Guard) Do(ctx context.Context, r Request) (Result, error) { if idemshopMutantOn("key-read-first") { return g.idemshopMutant3_Do(ctx, r) };
//		... the original body, unchanged ...
//	}
//	func (g *Guard) idemshopMutant3_Do(ctx context.Context, r Request) (Result, error) {
//		... the body with key-read-first applied ...
//	}
//
// The hand-over sits on the line of the function's opening brace and the copies go to the end of the
// file, so every original line keeps its number. With no mutant chosen the program is the tree's own,
// plus one string comparison at the top of each mutated function. A test binary built once per test
// package then serves every mutant its tests must kill: the runner compiles about 20 binaries instead of
// about 150.

// SelectEnv names the variable that chooses, at run time, the mutant a schema program runs (its id);
// ReachedEnv names a file that the program (or any program a test starts with its environment) creates
// the first time it enters the chosen mutant's function. A test that fails without it having been
// created failed for another reason than the mutant.
const (
	SelectEnv  = "IDEMSHOP_MUTANT"
	ReachedEnv = "IDEMSHOP_MUTANT_REACHED"
)

// SchemaFile is the name of the file the runner adds to each package that holds a schema:
// idemshopMutantOn, which the hand-overs call. Its name ends in no _test, so the package itself has it.
const SchemaFile = "zz_idemshop_mutants.go"

// Schema returns src with every mutant of ms (all of one file) put in as a copy of its enclosing
// function, chosen at run time by SelectEnv (see above). seq gives each mutant's copy its number; the
// copies' names must be unique within the package. A mutant that cannot be put in a schema is left out
// and named in skipped with the reason: its snippet is not inside a function's body (a package-level
// SQL string or Lua script), or its function has a parameter or receiver without a name (the hand-over
// could not pass it on). The runner builds those the old way, one program each.
func Schema(src []byte, ms []Mutant, seq map[string]int) (out []byte, skipped map[string]string, err error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	offset := func(p token.Pos) int { return fset.Position(p).Offset }
	type edit struct {
		at   int
		text string
	}
	var handovers []edit
	var copies []string
	skipped = map[string]string{}
	for _, m := range ms {
		start := strings.Index(string(src), m.Original)
		if start < 0 || strings.Count(string(src), m.Original) != 1 {
			return nil, nil, fmt.Errorf("mutant %s: the original does not occur exactly once", m.ID)
		}
		end := start + len(m.Original)
		var fn *ast.FuncDecl
		for _, d := range file.Decls {
			if f, ok := d.(*ast.FuncDecl); ok && f.Body != nil && start > offset(f.Body.Lbrace) && end < offset(f.Body.Rbrace) {
				fn = f
			}
		}
		if fn == nil {
			skipped[m.ID] = "not inside a function's body"
			continue
		}
		args, ok := forwardedArgs(fn)
		if !ok {
			skipped[m.ID] = "a parameter or receiver of " + fn.Name.Name + " has no name"
			continue
		}
		n, ok := seq[m.ID]
		if !ok {
			return nil, nil, fmt.Errorf("mutant %s: no sequence number", m.ID)
		}
		name := fmt.Sprintf("idemshopMutant%d_%s", n, fn.Name.Name)

		// The copy: the function's text from `func` to its closing brace, renamed, mutant applied.
		fStart, fEnd := offset(fn.Pos()), offset(fn.End())
		nameAt := offset(fn.Name.Pos()) - fStart
		text := string(src[fStart:fEnd])
		text = text[:nameAt] + name + text[nameAt+len(fn.Name.Name):]
		text = strings.Replace(text, m.Original, m.Replacement, 1)
		copies = append(copies, text)

		call := name + typeArgs(fn) + "(" + args + ")"
		if fn.Recv != nil {
			call = fn.Recv.List[0].Names[0].Name + "." + call
		}
		if fn.Type.Results != nil && len(fn.Type.Results.List) > 0 {
			call = "return " + call
		} else {
			call += "; return"
		}
		handovers = append(handovers, edit{at: offset(fn.Body.Lbrace) + 1,
			text: fmt.Sprintf(" if idemshopMutantOn(%q) { %s };", m.ID, call)})
	}
	var b strings.Builder
	last := 0
	slices.SortStableFunc(handovers, func(x, y edit) int { return x.at - y.at })
	for _, e := range handovers {
		b.Write(src[last:e.at])
		b.WriteString(e.text)
		last = e.at
	}
	b.Write(src[last:])
	for _, c := range copies {
		b.WriteString("\n\n// A mutant's copy (cmd/mutants): see internal/mutants/schema.go.\n")
		b.WriteString(c)
		b.WriteString("\n")
	}
	return []byte(b.String()), skipped, nil
}

// forwardedArgs is the argument list that passes fn's parameters on unchanged ("a, b, rest..."); ok is
// false when a parameter or the receiver has no name (or is _), which the hand-over could not name.
func forwardedArgs(fn *ast.FuncDecl) (string, bool) {
	if fn.Recv != nil {
		if names := fn.Recv.List[0].Names; len(names) == 0 || names[0].Name == "_" {
			return "", false
		}
	}
	var args []string
	for _, field := range fn.Type.Params.List {
		if len(field.Names) == 0 {
			return "", false
		}
		for _, n := range field.Names {
			if n.Name == "_" {
				return "", false
			}
			a := n.Name
			if _, variadic := field.Type.(*ast.Ellipsis); variadic {
				a += "..."
			}
			args = append(args, a)
		}
	}
	return strings.Join(args, ", "), true
}

// typeArgs instantiates a generic function's copy with its own type parameters ("[K, V]"); "" for
// others. A method's type parameters come with its receiver.
func typeArgs(fn *ast.FuncDecl) string {
	if fn.Type.TypeParams == nil {
		return ""
	}
	var names []string
	for _, field := range fn.Type.TypeParams.List {
		for _, n := range field.Names {
			names = append(names, n.Name)
		}
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// SchemaSupport is the source of SchemaFile for package pkg: idemshopMutantOn, which says whether id is
// the mutant chosen by SelectEnv and, the first time it is, creates the ReachedEnv file.
func SchemaSupport(pkg string) ([]byte, error) {
	if pkg == "" || !token.IsIdentifier(pkg) {
		return nil, errors.New("schema support: no package name")
	}
	return []byte(`// Code generated by cmd/mutants (mutant schemata: see internal/mutants/schema.go). DO NOT EDIT.

package ` + pkg + `

import (
	"os"
	"sync"
)

var (
	idemshopMutantChosen  = os.Getenv("` + SelectEnv + `")
	idemshopMutantReached sync.Once
)

func idemshopMutantOn(id string) bool {
	if id != idemshopMutantChosen {
		return false
	}
	idemshopMutantReached.Do(func() {
		if path := os.Getenv("` + ReachedEnv + `"); path != "" {
			_ = os.WriteFile(path, nil, 0o644)
		}
	})
	return true
}
`), nil
}
