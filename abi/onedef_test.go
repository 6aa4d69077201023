package abi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// oneDefNames are the constants that only package abi may declare.
var oneDefNames = map[string]bool{
	"KindAgent":   true,
	"KindModel":   true,
	"IndexByCwd":  true,
	"IndexByHash": true,
	"IndexByUUID": true,
}

// spelledOut says what in a string literal repeats a name abi owns: an
// index kind ("by-cwd", "by-hash", "by-uuid") as the literal or as one of
// its path components ("index/by-hash/"), a socket suffix (".sock", or a
// literal or component ending in it), or the default root ("/ctx", or a
// path below it). Words in messages ("by-cwd is read only") and other
// paths that merely start with the letters ("/ctxfs") are not names.
func spelledOut(lit string) string {
	if lit == "/ctx" || strings.HasPrefix(lit, "/ctx/") {
		return "the default root /ctx"
	}
	for _, part := range strings.Split(lit, "/") {
		switch {
		case part == IndexByCwd || part == IndexByHash || part == IndexByUUID:
			return "the index kind " + part
		case strings.HasSuffix(part, ".sock"):
			return "the socket suffix .sock"
		}
	}
	return ""
}

// TestOneDefinition: the tree's shared names are defined once, in abi.
// No non-test Go file of the module outside abi/ spells out an index kind,
// the socket suffix or the default root in a string literal, or declares
// its own KindAgent, KindModel or IndexBy* constant or variable: they use
// abi's.
func TestOneDefinition(t *testing.T) {
	files := eachModuleFile(t, "abi", func(rel, p string) {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		imports := map[*ast.BasicLit]bool{}
		for _, im := range f.Imports {
			imports[im.Path] = true
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING || imports[n] {
					return true
				}
				v, err := strconv.Unquote(n.Value)
				if err != nil {
					return true
				}
				if what := spelledOut(v); what != "" {
					t.Errorf("%s: the literal %s spells out %s: use abi's definition", fset.Position(n.Pos()), n.Value, what)
				}
			case *ast.GenDecl:
				if n.Tok != token.CONST && n.Tok != token.VAR {
					return true
				}
				for _, spec := range n.Specs {
					for _, name := range spec.(*ast.ValueSpec).Names {
						if oneDefNames[name.Name] {
							t.Errorf("%s: declares its own %s %s: abi defines it", fset.Position(name.Pos()), n.Tok, name.Name)
						}
					}
				}
			}
			return true
		})
	})
	if files < 20 {
		t.Fatalf("only %d Go files found: not the module root?", files)
	}
}

// eachModuleFile calls fn with the path from the module's root and the
// path of every non-test Go file of the module, outside hidden, "_",
// testdata and vendor directories and the directory skip ("" for none),
// and returns how many it found.
func eachModuleFile(t *testing.T, skip string, fn func(rel, path string)) int {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			name := d.Name()
			if rel == skip || rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			files++
			fn(rel, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestSpelledOut pins what TestOneDefinition counts as a second definition.
func TestSpelledOut(t *testing.T) {
	for lit, want := range map[string]bool{
		"by-cwd": true, "by-hash": true, "by-uuid": true, "index/by-hash/": true, "%s/by-uuid/%s": true,
		".sock": true, "coder.sock": true, "%s.sock": true, "agent/x.sock/": true,
		"/ctx": true, "/ctx/home": true,
		"by-cwd is read only": false, "/var/lib/ctxfs": false, "/ctxfs": false, "socket": false, "ctx": false, "": false,
	} {
		if got := spelledOut(lit) != ""; got != want {
			t.Errorf("spelledOut(%q) = %v, want %v", lit, got, want)
		}
	}
}
