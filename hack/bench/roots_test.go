package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProfileRootsExist: the functions whose cumulative CPU the report
// attributes to the limiter (limiterFuncs) and splits the rate limit
// service by (rlsRoots, this repository's) name functions that exist.
// A renamed function would silently drop out of the share: the limiter's
// CPU per decision was under-reported that way once.
func TestProfileRootsExist(t *testing.T) {
	const module = "github.com/tollgate-dev/tollgate/"
	roots := append([]string(nil), limiterFuncs...)
	for _, r := range rlsRoots {
		roots = append(roots, r.fn)
	}
	checked := 0
	for _, fn := range roots {
		if !strings.HasPrefix(fn, module) {
			continue // gRPC's and the runtime's: not this repository's to keep
		}
		checked++
		pkg, recv, name, ok := splitFunc(strings.TrimPrefix(fn, module))
		if !ok {
			t.Errorf("%s: not of the form pkg.(*Type).Method or pkg.Func", fn)
			continue
		}
		if !declared(t, filepath.Join("..", "..", filepath.FromSlash(pkg)), recv, name) {
			t.Errorf("%s: no such function in %s", fn, pkg)
		}
	}
	if checked == 0 {
		t.Fatal("no root of this repository checked")
	}
}

// splitFunc splits "dataplane/limiter.(*worker).run" into its package
// path, receiver type ("" for a function) and name.
func splitFunc(s string) (pkg, recv, name string, ok bool) {
	slash := strings.LastIndex(s, "/")
	dot := strings.Index(s[slash+1:], ".")
	if dot < 0 {
		return "", "", "", false
	}
	pkg, rest := s[:slash+1+dot], s[slash+1+dot+1:]
	if strings.HasPrefix(rest, "(*") {
		end := strings.Index(rest, ").")
		if end < 0 {
			return "", "", "", false
		}
		return pkg, rest[2:end], rest[end+2:], true
	}
	return pkg, "", rest, true
}

// declared reports whether the package in dir declares the function.
func declared(t *testing.T, dir, recv, name string) bool {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parsing %s: %v", dir, err)
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Name.Name != name {
					continue
				}
				if recv == "" && fd.Recv == nil {
					return true
				}
				if recv != "" && fd.Recv != nil && len(fd.Recv.List) == 1 {
					if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
						if id, ok := star.X.(*ast.Ident); ok && id.Name == recv {
							return true
						}
					}
				}
			}
		}
	}
	return false
}
