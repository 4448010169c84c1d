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

// A mutant in a package variable's value (a Lua script, an SQL string, the transition table) has no
// function to hold its copy. The value itself chooses, when the package initializes:
//
//	var acquireScript = idemshopMutantVar("lock-fence-incr", redis.NewScript(`...mutated...`), /*line :159:21*/redis.NewScript(`...`))
//
// Both values are built at init (a script's hash, a map literal: no side effects); the chosen mutant
// counts as reached once the program has started with it, as a mutant built alone would.

// SchemaFile is the name of the file the runner adds to each package that holds a schema:
// idemshopMutantOn, idemshopMutantReached and idemshopMutantVar. Its name ends in no _test, so the
// package itself has it.
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
//   - its snippet does not occur exactly once, or is neither inside a function's body nor inside the
//     value of a package variable declared without a type of its own (a const, or `var n int64 = 3`,
//     whose untyped value would not convert through idemshopMutantVar);
//   - its snippet holds a label (renaming the copy's labels would change it);
//   - its function's body declares with :=, at its top level, a name that is also a parameter or a
//     result (`ctx, cancel := context.WithTimeout(ctx, d)`): in the function's own block that assigns
//     it; in the copy's block, one level down, it would declare a new variable (see redeclared);
//   - its function has a goto (it could jump past the reached mark, or back over a copy's declaration);
//   - applied alone, it might not compile where its copy would (see compilesAlone).
func Schema(src []byte, ms []Mutant) (out []byte, skipped map[string]string, err error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	offset := func(p token.Pos) int { return fset.Position(p).Offset }
	var edits []edit
	skipped = map[string]string{}
	bases := selectorBases(src)
	// A package variable's value → its mutants (id, and the replacement at its offset), in list order.
	type valueMutant struct {
		id  string
		cut edit
	}
	inValue := map[ast.Expr][]valueMutant{}
	var values []ast.Expr
	for k, m := range ms {
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
			v := packageVarValue(file, offset, start, end)
			if v == nil {
				skipped[m.ID] = "not inside a function's body or a package variable's value"
				continue
			}
			if why := compilesAlone(src, bases, nil, offset, m); why != "" {
				skipped[m.ID] = why
				continue
			}
			if inValue[v] == nil {
				values = append(values, v)
			}
			inValue[v] = append(inValue[v], valueMutant{m.ID, edit{at: start, end: end, text: m.Replacement}})
			continue
		}
		if name := redeclared(fn); name != "" {
			skipped[m.ID] = fn.Name.Name + " declares " + name + " again at its body's top level"
			continue
		}
		if hasGoto(fn.Body) {
			// A goto could jump past the reached mark, or back over a copy's declaration.
			skipped[m.ID] = fn.Name.Name + " has a goto"
			continue
		}
		if why := compilesAlone(src, bases, fn, offset, m); why != "" {
			skipped[m.ID] = why
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
			copyEdits = append(copyEdits, edit{at: at, end: at + len(label.Name), text: fmt.Sprintf("idemshopMutant%d_%s", k, label.Name)})
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
	for _, v := range values {
		from, to := offset(v.Pos()), offset(v.End())
		pos := fset.Position(v.Pos())
		text := fmt.Sprintf("/*line :%d:%d*/%s", pos.Line, pos.Column, src[from:to])
		for _, vm := range slices.Backward(inValue[v]) {
			text = fmt.Sprintf("idemshopMutantVar(%q, %s, %s)", vm.id, applyEdits(src, from, to, []edit{vm.cut}), text)
		}
		edits = append(edits, edit{at: from, end: to, text: text})
	}
	return []byte(applyEdits(src, 0, len(src), edits)), skipped, nil
}

// packageVarValue is the value, in a package-level var declaration without a type of its own, that
// holds src[start:end] (nil if none does).
func packageVarValue(file *ast.File, offset func(token.Pos) int, start, end int) ast.Expr {
	for _, d := range file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for _, v := range vs.Values {
				if start >= offset(v.Pos()) && end <= offset(v.End()) && vs.Type == nil {
					return v
				}
			}
		}
	}
	return nil
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

// redeclared is a name that fn's body declares with := at its top level (a labeled statement counts)
// while fn's receiver, parameters or results declare it already ("" if none). In the function's own
// block that := assigns the parameter; in the copy's block, one level down, it declares a new variable,
// which may differ in type (an error parameter against a *MyErr result), and which defers, closures,
// pointers and a pointer receiver's methods do not see.
func redeclared(fn *ast.FuncDecl) string {
	names := map[string]bool{}
	for _, list := range []*ast.FieldList{fn.Recv, fn.Type.Params, fn.Type.Results} {
		if list == nil {
			continue
		}
		for _, f := range list.List {
			for _, n := range f.Names {
				names[n.Name] = true
			}
		}
	}
	for _, s := range fn.Body.List {
		for l, ok := s.(*ast.LabeledStmt); ok; l, ok = s.(*ast.LabeledStmt) {
			s = l.Stmt
		}
		if a, ok := s.(*ast.AssignStmt); ok && a.Tok == token.DEFINE {
			for _, l := range a.Lhs {
				if id, ok := l.(*ast.Ident); ok && names[id.Name] {
					return id.Name
				}
			}
		}
	}
	return ""
}

func hasGoto(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if b, ok := n.(*ast.BranchStmt); ok && b.Tok == token.GOTO {
			found = true
		}
		return !found
	})
	return found
}

// compilesAlone says why m, applied alone, might not compile where its copy in a schema would ("" if
// nothing is seen): the copy sits in an if, so a function with results whose mutated body no longer
// ends in a terminating statement would run on into the original body instead of failing with
// "missing return"; and the original body keeps using what the mutant stopped using, so an import or a
// variable left unused would not fail either. Those run alone, where the compiler judges them. The
// unused check is coarse (a name that no longer appears before a dot at all): a mutant it leaves out
// only costs a build of its own.
// bases is selectorBases(src).
func compilesAlone(src []byte, bases map[string]bool, fn *ast.FuncDecl, offset func(token.Pos) int, m Mutant) string {
	mutated, err := Apply(src, m)
	if err != nil {
		return err.Error()
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", mutated, parser.SkipObjectResolution)
	if err != nil {
		return "the mutated file does not parse"
	}
	if fn != nil && fn.Type.Results != nil && len(fn.Type.Results.List) > 0 {
		at := offset(fn.Pos())
		for _, d := range file.Decls {
			if f, ok := d.(*ast.FuncDecl); ok && fset.Position(f.Pos()).Offset == at && f.Body != nil {
				if n := len(f.Body.List); n == 0 || !terminating(f.Body.List[n-1], "") {
					return "its mutated " + fn.Name.Name + " may not end in a return"
				}
			}
		}
	}
	after := selectorBases(mutated)
	for name := range bases {
		if !after[name] {
			return "it removes the last " + name + ".X (an unused import or variable, alone)"
		}
	}
	return ""
}

// selectorBases is every name that appears before a dot in src (pkg.Func, v.Field).
func selectorBases(src []byte) map[string]bool {
	names := map[string]bool{}
	file, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	if err != nil {
		return names
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := s.X.(*ast.Ident); ok {
				names[id.Name] = true
			}
		}
		return true
	})
	return names
}

// terminating is the Go spec's "terminating statement" read from the syntax alone, as the compiler
// reads it for "missing return"; label is s's label, if any.
func terminating(s ast.Stmt, label string) bool {
	switch s := s.(type) {
	case *ast.ReturnStmt:
		return true
	case *ast.BranchStmt:
		return s.Tok == token.GOTO || s.Tok == token.FALLTHROUGH
	case *ast.ExprStmt:
		call, ok := s.X.(*ast.CallExpr)
		if !ok {
			return false
		}
		id, ok := call.Fun.(*ast.Ident)
		return ok && id.Name == "panic"
	case *ast.BlockStmt:
		return len(s.List) > 0 && terminating(s.List[len(s.List)-1], "")
	case *ast.IfStmt:
		return s.Else != nil && terminating(s.Body, "") && terminating(s.Else, "")
	case *ast.LabeledStmt:
		return terminating(s.Stmt, s.Label.Name)
	case *ast.ForStmt:
		return s.Cond == nil && !breaks(s.Body.List, label)
	case *ast.SwitchStmt:
		return clausesTerminate(s.Body, label, false)
	case *ast.TypeSwitchStmt:
		return clausesTerminate(s.Body, label, false)
	case *ast.SelectStmt:
		return clausesTerminate(s.Body, label, true)
	}
	return false
}

// clausesTerminate: every clause ends in a terminating statement and holds no break out of it, and a
// switch has a default (a select needs none).
func clausesTerminate(body *ast.BlockStmt, label string, isSelect bool) bool {
	hasDefault := isSelect
	for _, c := range body.List {
		var list []ast.Stmt
		switch c := c.(type) {
		case *ast.CaseClause:
			list, hasDefault = c.Body, hasDefault || c.List == nil
		case *ast.CommClause:
			list = c.Body
		}
		if len(list) == 0 || !terminating(list[len(list)-1], "") || breaks(list, label) {
			return false
		}
	}
	return hasDefault
}

// breaks says whether list holds a break that leaves the statement it belongs to: an unlabeled one
// outside any nested for, switch or select, or one naming label.
func breaks(list []ast.Stmt, label string) bool {
	found := false
	var walk func(n ast.Node, nested bool)
	walk = func(n ast.Node, nested bool) {
		ast.Inspect(n, func(x ast.Node) bool {
			switch x := x.(type) {
			case *ast.BranchStmt:
				if x.Tok == token.BREAK && (x.Label == nil && !nested || x.Label != nil && x.Label.Name == label) {
					found = true
				}
			case *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
				if x != n {
					walk(x, true)
					return false
				}
			case *ast.FuncLit:
				return false
			}
			return !found
		})
	}
	for _, s := range list {
		walk(s, false)
	}
	return found
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

// Zero values only: a package variable initialized through an interface call may run a mutated
// function before any initialized variable of this file is set.
var (
	idemshopMutantRead   sync.Once
	idemshopMutantChosen string
	idemshopMutantMarked sync.Once
)

func idemshopMutantOn(id string) bool {
	idemshopMutantRead.Do(func() { idemshopMutantChosen = os.Getenv("` + SelectEnv + `") })
	return id == idemshopMutantChosen
}

func idemshopMutantReached() {
	idemshopMutantMarked.Do(func() {
		if path := os.Getenv("` + ReachedEnv + `"); path != "" {
			_ = os.WriteFile(path, nil, 0o644)
		}
	})
}

// idemshopMutantVar is a package variable's value: mutated when id is the chosen mutant.
func idemshopMutantVar[T any](id string, mutated, original T) T {
	if idemshopMutantOn(id) {
		idemshopMutantReached()
		return mutated
	}
	return original
}
`), nil
}
