package codeshape

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"strings"
	"testing"
)

// MaxFuncLines is the longest a non-test function may be, counted from the
// func keyword to the closing brace, without a "long: " reason.
const MaxFuncLines = 60

// longMarker, on the last line of a function's doc comment and followed by
// a reason, allows the function to be longer than MaxFuncLines.
const longMarker = "long: "

// skipped are the packages (folders relative to the repository root) this
// test does not look at yet, each with why.
var skipped = map[string]string{}

// root is the repository root, two levels above this package.
const root = "../.."

// goFiles lists the Go files of this module, relative to root, tests
// included: it leaves out nested modules (hack/envtest), hidden folders,
// bin/ and testdata.
func goFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || rel == "bin" {
				return fs.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return fs.SkipDir // another module
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found only %d Go files under %s; is the walk broken?", len(files), root)
	}
	return files
}

// sourceFiles lists the non-test Go files of goFiles, leaving out the
// skipped packages.
func sourceFiles(t *testing.T) []string {
	var files []string
	for _, rel := range goFiles(t) {
		if _, skip := skipped[pathpkg.Dir(rel)]; !skip && !strings.HasSuffix(rel, "_test.go") {
			files = append(files, rel)
		}
	}
	return files
}

// TestFunctionLength fails for every non-test function over MaxFuncLines
// lines whose doc comment does not end with a "long: " reason.
func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	for _, rel := range sourceFiles(t) {
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if ast.IsGenerated(f) {
			continue
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
			if n := end - start + 1; n > MaxFuncLines && !hasLongReason(fn.Doc) {
				t.Errorf("%s:%d: %s is %d lines (at most %d): split it, or end its doc comment with %q and why",
					rel, start, funcName(fn), n, MaxFuncLines, longMarker)
			}
		}
	}
}

// hasLongReason reports whether the last line of doc holds the marker and a
// reason after it.
func hasLongReason(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	last := doc.List[len(doc.List)-1].Text
	if i := strings.LastIndex(last, "\n"); i >= 0 { // a /* */ comment
		last = last[i+1:]
	}
	_, reason, ok := strings.Cut(last, longMarker)
	return ok && strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(reason), "*/")) != ""
}

// funcName names fn as Type.Method or Func.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

// TestHasLongReason pins what counts as a reason.
func TestHasLongReason(t *testing.T) {
	parse := func(src string) *ast.CommentGroup {
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", "package x\n"+src+"\nfunc f() {}\n", parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		return f.Decls[0].(*ast.FuncDecl).Doc
	}
	for _, tc := range []struct {
		doc  string
		want bool
	}{
		{"", false},
		{"// f does things.", false},
		{"// f does things.\n// long: one step per field, read top to bottom.", true},
		{"// long: a reason\n// f does things.", false},
		{"// f does things. long:", false},
		{"// f does things. long:   ", false},
		{"/* f does things.\nlong: a reason */", true},
	} {
		if got := hasLongReason(parse(tc.doc)); got != tc.want {
			t.Errorf("hasLongReason(%q) = %v, want %v", tc.doc, got, tc.want)
		}
	}
}
