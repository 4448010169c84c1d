package paysig_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"idemshop/internal/mutants"
)

// A MAC compare that stops at the first differing byte leaks, through the time a 401 takes, how many
// leading bytes of a forged MAC are right. No behavioural test can see that reliably, so this one reads
// the source: Verify must compare MACs with hmac.Equal (or subtle.ConstantTimeCompare), and must not
// compare bytes with ==, != or bytes.Equal.
func TestVerifyComparesInConstantTime(t *testing.T) {
	t.Parallel()
	src, err := mutants.ReadSource("paysig.go") // under make mutants, the mutated file
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "paysig.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var verify *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "Verify" && fd.Recv != nil {
			verify = fd
		}
	}
	if verify == nil {
		t.Fatal("paysig.go has no Verifier.Verify")
	}
	constantTime := 0
	ast.Inspect(verify.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			switch callee(n) {
			case "hmac.Equal", "subtle.ConstantTimeCompare":
				constantTime++
			case "bytes.Equal", "bytes.Compare", "reflect.DeepEqual", "slices.Equal":
				t.Errorf("%s: Verify compares with %s, which stops at the first difference", fset.Position(n.Pos()), callee(n))
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isConversion(n.X) || isConversion(n.Y)) {
				t.Errorf("%s: Verify compares converted bytes with %s", fset.Position(n.Pos()), n.Op)
			}
		}
		return true
	})
	if constantTime == 0 {
		t.Error("Verify does not compare MACs with hmac.Equal")
	}
}

// callee names a call's function as pkg.Func, or "" for anything else.
func callee(c *ast.CallExpr) string {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return pkg.Name + "." + sel.Sel.Name
}

// isConversion reports string(x) or []byte(x).
func isConversion(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 1 {
		return false
	}
	switch fn := c.Fun.(type) {
	case *ast.Ident:
		return fn.Name == "string"
	case *ast.ArrayType:
		return fn.Len == nil
	}
	return false
}
