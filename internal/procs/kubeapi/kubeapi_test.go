package kubeapi

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"testing"
)

func TestModuleRoot(t *testing.T) {
	top := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(top, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("repo/go.mod", "// comment\nmodule "+module+"\n\ngo 1.26\n")
	write("repo/hack/image/go.mod", "module "+module+"/hack/image\n")
	write("repo/hack/image/cmd/x.go", "package main\n")
	write("repo/dataplane/limiter/x.go", "package limiter\n")
	write("other/go.mod", "module example.com/other\n")
	repo := filepath.Join(top, "repo")
	for _, tc := range []struct{ dir, want string }{
		{"repo", repo},
		{"repo/dataplane/limiter", repo},
		{"repo/hack/image/cmd", repo}, // a nested module is passed over
		{"other", ""},
	} {
		if got := moduleRoot(filepath.Join(top, tc.dir)); got != tc.want {
			t.Errorf("moduleRoot(%s) = %q, want %q", tc.dir, got, tc.want)
		}
	}
}

// TestRepoRoot: the test runs in this package's directory, three levels
// below the top, whichever way it was built (-trimpath or not).
func TestRepoRoot(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := RepoRoot(), filepath.Clean(filepath.Join(wd, "..", "..", "..")); got != want {
		t.Fatalf("RepoRoot() = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(RepoRoot(), "hack", "envtest.sh")); err != nil {
		t.Fatal(err)
	}
}

// TestRaceBuildFlags: the flags follow how this test binary was built, so
// that a race build of tollgate from a test reuses its compiled packages.
func TestRaceBuildFlags(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	want := []string{"-race"}
	for _, s := range info.Settings {
		if s.Key == "-trimpath" && s.Value == "true" {
			want = append(want, "-trimpath")
		}
	}
	if got := RaceBuildFlags(); !slices.Equal(got, want) {
		t.Fatalf("RaceBuildFlags() = %v, want %v", got, want)
	}
}
