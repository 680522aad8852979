package codeshape

import (
	"bufio"
	"go/parser"
	"go/token"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// architectureDoc holds the folder table TestFoldersTable checks.
const architectureDoc = "docs/architecture.md"

// folderRow is one row of the folder table: the folders of its first
// column. A folder ending in "/*" stands for every package below it;
// main.go stands for the module's root package.
type folderRow struct {
	line    int
	folders []string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// folderTable reads the rows of the table under "## Folders", top to
// bottom.
func folderTable(t *testing.T) []folderRow {
	t.Helper()
	f, err := os.Open(filepath.Join(root, architectureDoc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []folderRow
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Folders"
		case in && strings.HasPrefix(line, "| `"):
			first := strings.SplitN(line, "|", 3)[1]
			row := folderRow{line: n}
			for _, m := range backticked.FindAllStringSubmatch(first, -1) {
				row.folders = append(row.folders, m[1])
			}
			rows = append(rows, row)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) < 10 {
		t.Fatalf("%s: found %d rows under \"## Folders\"; has the table moved?", architectureDoc, len(rows))
	}
	return rows
}

// rowOf returns the index of the row that lists the package in dir ("."
// for the root), or -1.
func rowOf(rows []folderRow, dir string) int {
	for i, r := range rows {
		for _, f := range r.folders {
			if names(f, dir) {
				return i
			}
		}
	}
	return -1
}

// names reports whether the table's folder f stands for the package in dir.
func names(f, dir string) bool {
	if pattern, ok := strings.CutSuffix(f, "*"); ok {
		return strings.HasPrefix(dir, pattern)
	}
	return f == dir || f == "main.go" && dir == "."
}

// modulePath reads the module path from go.mod.
func modulePath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	mod, ok := strings.CutPrefix(strings.TrimSpace(first), "module ")
	if !ok {
		t.Fatalf("go.mod does not start with a module line: %q", first)
	}
	return mod
}

// TestFoldersTable checks docs/architecture.md's folder table against the
// code: every package with non-test code is in a row, every folder the
// table names has Go files, and non-test code imports only packages of its
// own row or of rows below it.
func TestFoldersTable(t *testing.T) {
	rows := folderTable(t)
	mod := modulePath(t)
	used := make([]map[string]bool, len(rows))
	for i := range used {
		used[i] = map[string]bool{}
	}
	reported := map[string]bool{}
	fset := token.NewFileSet()
	for _, rel := range goFiles(t) {
		dir := pathpkg.Dir(rel)
		test := strings.HasSuffix(rel, "_test.go")
		from := rowOf(rows, dir)
		if from < 0 {
			// A folder of tests alone (test/...) may go unlisted.
			if !test && !reported[dir] {
				t.Errorf("package %s is in no row of the folder table of %s", dir, architectureDoc)
				reported[dir] = true
			}
			continue
		}
		for _, f := range rows[from].folders {
			if names(f, dir) {
				used[from][f] = true
			}
		}
		if test {
			continue // tests may import anything
		}
		file, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			target, ok := strings.CutPrefix(path, mod+"/")
			if !ok {
				continue
			}
			if to := rowOf(rows, target); to >= 0 && to < from {
				t.Errorf("%s imports %s, which %s lists above it (line %d, above line %d): move a row or the code",
					rel, target, architectureDoc, rows[to].line, rows[from].line)
			}
		}
	}
	for i, r := range rows {
		for _, f := range r.folders {
			if !used[i][f] {
				t.Errorf("%s:%d names %s, which holds no Go file", architectureDoc, r.line, f)
			}
		}
	}
}

// TestTopLevelFoldersTogether checks that the rows of each top-level
// folder stand together in the folder table, so that the rows' order,
// which TestFoldersTable enforces on every import, is also an order of the
// top-level folders: no import runs upwards between them. main.go and cmd
// are one group (the command).
func TestTopLevelFoldersTogether(t *testing.T) {
	rows := folderTable(t)
	left := map[string]int{} // top-level folder -> line of the row that left it
	cur := ""
	for _, r := range rows {
		for _, f := range r.folders {
			top := topLevel(f)
			if top == cur {
				continue
			}
			if line, ok := left[top]; ok {
				t.Errorf("%s:%d lists %s, whose top-level folder %s the table left at line %d: keep the rows of one top-level folder together",
					architectureDoc, r.line, f, top, line)
			}
			if cur != "" {
				left[cur] = r.line
			}
			cur = top
		}
	}
}

// topLevel is the top-level folder of a folder of the table ("cmd" for
// main.go).
func topLevel(f string) string {
	if f == "main.go" {
		return "cmd"
	}
	top, _, _ := strings.Cut(f, "/")
	return top
}

// TestRowOf pins how the table's folders match packages.
func TestRowOf(t *testing.T) {
	rows := []folderRow{{folders: []string{"main.go", "cmd"}}, {folders: []string{"internal/lib/*"}}, {folders: []string{"internal/procs"}}}
	for dir, want := range map[string]int{
		".": 0, "cmd": 0, "cmd/demo": -1, "internal/lib/clip": 1, "internal/lib": -1, "internal/procs": 2, "internal/procs/kubeapi": -1, "internal": -1,
	} {
		if got := rowOf(rows, dir); got != want {
			t.Errorf("rowOf(%q) = %d, want %d", dir, got, want)
		}
	}
}
