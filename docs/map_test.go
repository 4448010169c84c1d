package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The map in design.md is the contract's index: "pattern | guarded file: function | unsafe twin ...".
// A row that names a file or a function that does not exist is a bug in the contract, and code moves
// (issue 15 moved most of it). So every Go file the map links must exist, and every `Name` or
// `Type.Method` written after a link must be declared in that file.
func TestMapPointsAtCodeThatExists(t *testing.T) {
	raw, err := os.ReadFile("design.md")
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "## The map: from a pattern to its code")
	require.NotEqual(t, -1, start, "design.md has its map section")
	section := doc[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}

	link := regexp.MustCompile(`\[[^\]]+\.go\]\(\.\./([^)]+\.go)\)`)
	name := regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)(?:\\(\\))?`")
	checked := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, cell := range strings.Split(line, " | ") {
			locs := link.FindAllStringSubmatchIndex(cell, -1)
			for i, loc := range locs {
				path := filepath.Join("..", cell[loc[2]:loc[3]])
				// The names after a link, up to the next link, belong to that link's file.
				tail := cell[loc[1]:]
				if i+1 < len(locs) {
					tail = cell[loc[1]:locs[i+1][0]]
				}
				decls, err := declared(path)
				if !assert.NoError(t, err, "the map links %s", path) {
					continue
				}
				for _, m := range name.FindAllStringSubmatch(tail, -1) {
					checked++
					assert.True(t, decls[m[1]], "design.md's map names %s in %s, which does not declare it", m[1], path)
				}
			}
		}
	}
	assert.Greater(t, checked, 40, "the map names the code it points at")
}

// declared returns the top-level names of a Go file: functions, types, vars and consts as "Name", and
// methods as "Type.Method".
func declared(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				out[d.Name.Name] = true
				continue
			}
			typ := d.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				out[id.Name+"."+d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out[n.Name] = true
					}
				}
			}
		}
	}
	return out, nil
}
