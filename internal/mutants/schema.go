package mutants

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strings"
)

// Mutant schemata (Untch, Offutt and Harrold, "Mutation analysis using mutant schemata", ISSTA 1993):
// instead of compiling one program per mutant, the runner compiles one program that holds every mutant
// and picks one at run time. A mutated function starts with a copy of its own body, the mutant applied,
// run instead of the body when the mutant is the chosen one:
//
//	func (g *Guard) Do(ctx context.Context, r Request) (Result, error) { if idemshopMutantOn("key-read-first") {/*line :88:69*/
//		... the body with key-read-first applied, idemshopMutantReached() before the mutated statement ...
//	}; /*line :88:69*/
//		... the original body, unchanged ...
//	}
//
// The copy runs in the function itself: the same frame for recover() and runtime.Caller, the same
// named results for defers, the same parameters. It starts on the line of the opening brace, and the
// /*line*/ directives give both bodies their original line numbers, so a panic or a log line points
// where it would in the tree. Only the copy's labels are renamed (a function cannot hold a label twice),
// and closures are numbered after the copy's (Do.func3, not Do.func1, in a stack trace). With no mutant
// chosen the program is the tree's own, plus one string comparison at the top of each mutated function.
// A test binary built once per test package then serves every mutant its tests must kill: the runner
// compiles about 15 binaries instead of about 150.

// SelectEnv names the variable that chooses, at run time, the mutant a schema program runs (its id);
// ReachedEnv names a file that the program (or any program a test starts with its environment) creates
// the first time it reaches the statement that holds the chosen mutant. A test that fails without it
// having been created failed for another reason than the mutant.
const (
	SelectEnv  = "IDEMSHOP_MUTANT"
	ReachedEnv = "IDEMSHOP_MUTANT_REACHED"
)

// SchemaFile is the name of the file the runner adds to each package that holds a schema:
// idemshopMutantOn and idemshopMutantReached. Its name ends in no _test, so the package itself has it.
const SchemaFile = "zz_idemshop_mutants.go"

// newClause finds a case or default clause that a replacement brings.
var newClause = regexp.MustCompile(`(?m)^\s*(?:case\s|default\s*:)`)

// edit replaces src[at:end] with text (an insertion when at == end).
type edit struct {
	at, end int
	text    string
}

// Schema returns src with every mutant of ms (all of one file) put in as a copy of its function's body,
// chosen at run time by SelectEnv (see above). A mutant that cannot be put in a schema is left out and
// named in skipped with the reason; the runner builds those the old way, one program each:
//   - its snippet does not occur exactly once, or is not inside a function's body (a package-level SQL
//     string or Lua script);
//   - its snippet holds a label (renaming the copy's labels would change it);
//   - its function's body declares with :=, at its top level, a name that is also a named result, or a
//     parameter that a closure or a pointer holds (`v, err := f()` with a named result err): in the
//     function's own block that assigns it; in the copy's block, one level down, it would declare a new
//     variable that defers and closures do not see.
func Schema(src []byte, ms []Mutant) (out []byte, skipped map[string]string, err error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	offset := func(p token.Pos) int { return fset.Position(p).Offset }
	var edits []edit
	skipped = map[string]string{}
	for _, m := range ms {
		start := strings.Index(string(src), m.Original)
		if start < 0 || strings.Count(string(src), m.Original) != 1 {
			skipped[m.ID] = "its original does not occur exactly once"
			continue
		}
		end := start + len(m.Original)
		var fn *ast.FuncDecl
		for _, d := range file.Decls {
			if f, ok := d.(*ast.FuncDecl); ok && f.Body != nil && start > offset(f.Body.Lbrace) && end <= offset(f.Body.Rbrace) {
				fn = f
			}
		}
		if fn == nil {
			skipped[m.ID] = "not inside a function's body"
			continue
		}
		if name := redeclared(fn); name != "" {
			skipped[m.ID] = fn.Name.Name + " declares " + name + " again at its body's top level"
			continue
		}
		copyEdits := []edit{{at: start, end: end, text: m.Replacement}}
		labelInSnippet := false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			var label *ast.Ident
			switch n := n.(type) {
			case *ast.LabeledStmt:
				label = n.Label
			case *ast.BranchStmt:
				label = n.Label
			}
			if label == nil {
				return true
			}
			at := offset(label.Pos())
			if at+len(label.Name) > start && at < end {
				labelInSnippet = true
			}
			copyEdits = append(copyEdits, edit{at: at, end: at + len(label.Name), text: "idemshopMutantLabel_" + label.Name})
			return true
		})
		if labelInSnippet {
			skipped[m.ID] = "a label inside its snippet"
			continue
		}
		at := reachedPoint(fn.Body, offset, start, end, src, newClause.MatchString(m.Replacement))
		copyEdits = append(copyEdits, edit{at: at, end: at, text: "idemshopMutantReached(); "})

		bodyAt := offset(fn.Body.Lbrace) + 1
		body := applyEdits(src, bodyAt, offset(fn.Body.Rbrace), copyEdits)
		brace := fset.Position(fn.Body.Lbrace)
		line := fmt.Sprintf("/*line :%d:%d*/", brace.Line, brace.Column+1)
		fallOut := "" // a body with results ends in a terminating statement; one without may run off its end
		if fn.Type.Results == nil || len(fn.Type.Results.List) == 0 {
			fallOut = "; return"
		}
		edits = append(edits, edit{at: bodyAt, end: bodyAt,
			text: fmt.Sprintf(" if idemshopMutantOn(%q) {%s%s%s\n}; %s", m.ID, line, body, fallOut, line)})
	}
	return []byte(applyEdits(src, 0, len(src), edits)), skipped, nil
}

// applyEdits returns src[from:to] with edits applied (offsets into src; insertions at one point keep
// their order, and come before a replacement that starts there).
func applyEdits(src []byte, from, to int, edits []edit) string {
	sorted := slices.Clone(edits)
	slices.SortStableFunc(sorted, func(x, y edit) int {
		if x.at != y.at {
			return x.at - y.at
		}
		return (x.end - x.at) - (y.end - y.at)
	})
	var b strings.Builder
	last := from
	for _, e := range sorted {
		b.Write(src[last:e.at])
		b.WriteString(e.text)
		last = e.end
	}
	b.Write(src[last:to])
	return b.String()
}

// reachedPoint is where the copy marks the mutant reached: before the innermost statement, in a list of
// statements, that holds the snippet's first token, so that the mark means the mutated statement is
// about to run, not merely that the function was entered. It is the snippet's own start when that
// statement starts inside the snippet, and the body's start when no listed statement holds it (a
// snippet that starts at a case or default marks before the switch).
//
// A replacement that brings a case or default clause of its own marks before the switch or select
// that holds the snippet: the statement the snippet replaced may not run when the new clause does.
func reachedPoint(body *ast.BlockStmt, offset func(token.Pos) int, start, end int, src []byte, clauses bool) int {
	first := start
	for first < end && strings.ContainsRune(" \t\r\n", rune(src[first])) {
		first++
	}
	at, width := offset(body.Lbrace)+1, -1
	consider := func(list []ast.Stmt) {
		for _, s := range list {
			switch s.(type) {
			case *ast.CaseClause, *ast.CommClause:
				// A switch's or select's body lists its clauses: a mark before one would end the clause
				// above it. The switch itself is the statement then.
				continue
			case *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
			default:
				if clauses {
					continue
				}
			}
			from, to := offset(s.Pos()), offset(s.End())
			if from <= first && first < to && (width < 0 || to-from < width) {
				at, width = from, to-from
			}
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BlockStmt:
			consider(n.List)
		case *ast.CaseClause:
			consider(n.Body)
		case *ast.CommClause:
			consider(n.Body)
		}
		return true
	})
	if at > start && at < end {
		at = start
	}
	return at
}

// redeclared is a name that fn's body declares with := at its top level while fn's receiver, parameters
// or results declare it already, where the copy's new variable could be told apart from the one it
// hides: a named result (defers and bare returns read it), or a parameter that a closure or a pointer
// (&name) in the body holds. "" if none: `ctx, cancel := context.WithTimeout(ctx, d)` with a parameter
// ctx that nothing else holds behaves the same either way.
func redeclared(fn *ast.FuncDecl) string {
	kind := map[string]string{}
	for _, list := range []*ast.FieldList{fn.Recv, fn.Type.Params, fn.Type.Results} {
		if list == nil {
			continue
		}
		for _, f := range list.List {
			for _, n := range f.Names {
				kind[n.Name] = "parameter"
				if list == fn.Type.Results {
					kind[n.Name] = "result"
				}
			}
		}
	}
	held := map[string]bool{}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			ast.Inspect(n.Body, func(m ast.Node) bool {
				if id, ok := m.(*ast.Ident); ok {
					held[id.Name] = true
				}
				return true
			})
		case *ast.UnaryExpr:
			if id, ok := n.X.(*ast.Ident); ok && n.Op == token.AND {
				held[id.Name] = true
			}
		}
		return true
	})
	for _, s := range fn.Body.List {
		if a, ok := s.(*ast.AssignStmt); ok && a.Tok == token.DEFINE {
			for _, l := range a.Lhs {
				if id, ok := l.(*ast.Ident); ok && (kind[id.Name] == "result" || kind[id.Name] == "parameter" && held[id.Name]) {
					return id.Name
				}
			}
		}
	}
	return ""
}

// SchemaSupport is the source of SchemaFile for package pkg: idemshopMutantOn, which says whether id is
// the mutant chosen by SelectEnv, and idemshopMutantReached, which creates the ReachedEnv file once.
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
	idemshopMutantChosen = os.Getenv("` + SelectEnv + `")
	idemshopMutantMarked sync.Once
)

func idemshopMutantOn(id string) bool { return id == idemshopMutantChosen }

func idemshopMutantReached() {
	idemshopMutantMarked.Do(func() {
		if path := os.Getenv("` + ReachedEnv + `"); path != "" {
			_ = os.WriteFile(path, nil, 0o644)
		}
	})
}
`), nil
}
