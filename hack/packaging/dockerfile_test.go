package packaging_test

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// No Docker engine runs where these tests do, so the Dockerfile is checked
// by parts: its instructions are read, and its `go build` line is run as is
// on a copy of the build context filtered by .dockerignore.

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN...
	args string
}

func readDockerfile(t testing.TB) []instruction {
	t.Helper()
	data, err := os.ReadFile(repoPath("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		ins  []instruction
		cur  strings.Builder
		cont bool
	)
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if !cont && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont && strings.HasPrefix(trimmed, "#") {
			continue // comments inside a continued instruction
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			cont = true
			continue
		}
		cur.WriteString(trimmed)
		cont = false
		cmd, args, _ := strings.Cut(cur.String(), " ")
		ins = append(ins, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return ins
}

// TestDockerfileInstructions checks the parts of the image that cannot be
// exercised here: base images, user and entrypoint.
func TestDockerfileInstructions(t *testing.T) {
	ins := readDockerfile(t)
	var froms, users, entrypoints []string
	copiesBinary := false
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "USER":
			users = append(users, in.args)
		case "ENTRYPOINT":
			entrypoints = append(entrypoints, in.args)
		case "COPY":
			if strings.Contains(in.args, "--from=build") && strings.HasSuffix(in.args, "/tollgate /tollgate") {
				copiesBinary = true
			}
		}
	}
	goVersion := goModGoVersion(t)
	if len(froms) != 2 {
		t.Fatalf("want a two-stage build, got FROM %q", froms)
	}
	if !regexp.MustCompile(`(^| )golang:` + regexp.QuoteMeta(goVersion) + ` AS build$`).MatchString(froms[0]) {
		t.Errorf("build stage %q: want golang:%s (go.mod's go version) AS build", froms[0], goVersion)
	}
	if froms[1] != "gcr.io/distroless/static:nonroot" {
		t.Errorf("runtime stage %q: want gcr.io/distroless/static:nonroot", froms[1])
	}
	if !copiesBinary {
		t.Error("the runtime stage must COPY --from=build /tollgate /tollgate")
	}
	if len(users) != 1 || users[0] != "65532:65532" {
		t.Errorf("USER %q: want exactly USER 65532:65532", users)
	}
	if len(entrypoints) != 1 || entrypoints[0] != `["/tollgate"]` {
		t.Errorf(`ENTRYPOINT %q: want exactly ENTRYPOINT ["/tollgate"]`, entrypoints)
	}
	// The module download layer comes before the sources are copied.
	order := []string{}
	for _, in := range ins {
		switch {
		case in.cmd == "COPY" && in.args == "go.mod go.sum ./":
			order = append(order, "mod")
		case in.cmd == "RUN" && strings.Contains(in.args, "go mod download"):
			order = append(order, "download")
		case in.cmd == "COPY" && in.args == ". .":
			order = append(order, "src")
		}
	}
	if strings.Join(order, ",") != "mod,download,src" {
		t.Errorf("want COPY go.mod go.sum ./, RUN go mod download, COPY . . in that order; got %v", order)
	}
}

// goModGoVersion is go.mod's go directive as major.minor (the image tag).
func goModGoVersion(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(repoPath("go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("no go directive in go.mod")
	}
	return string(m[1])
}

// dockerBuildLine returns the shell command of the RUN instruction that runs
// `go build`, without its RUN options (--mount=...).
func dockerBuildLine(t testing.TB) string {
	t.Helper()
	var lines []string
	for _, in := range readDockerfile(t) {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		words := strings.Fields(in.args)
		for len(words) > 0 && strings.HasPrefix(words[0], "--") {
			words = words[1:]
		}
		lines = append(lines, strings.Join(words, " "))
	}
	if len(lines) != 1 {
		t.Fatalf("want exactly one RUN ... go build in the Dockerfile, got %q", lines)
	}
	return lines[0]
}

// TestDockerfileFlagsMatchMakefile keeps `make build` and the image in step.
func TestDockerfileFlagsMatchMakefile(t *testing.T) {
	mk, err := os.ReadFile(repoPath("Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^GO_BUILD_FLAGS\s*:=\s*(.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no GO_BUILD_FLAGS in the Makefile")
	}
	// Make's $(COMMIT) is the Dockerfile's build argument ${COMMIT}.
	flags := regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllString(strings.TrimSpace(string(m[1])), "$${$1}")
	line := dockerBuildLine(t)
	if !strings.Contains(line, "go build "+flags+" ") {
		t.Errorf("Dockerfile build line %q does not use the Makefile's GO_BUILD_FLAGS %q", line, flags)
	}
	if !strings.Contains(line, "CGO_ENABLED=0 ") {
		t.Errorf("Dockerfile build line %q must set CGO_ENABLED=0", line)
	}
}

// The build arguments the image binary is built with (docker build
// --build-arg COMMIT=... BUILD_DATE=...).
const (
	imageCommit    = "0123456789abcdef0123456789abcdef01234567"
	imageBuildDate = "2026-12-01T12:00:00Z"
)

var (
	imageBinaryOnce sync.Once
	imageBinaryPath string
	imageBinaryErr  error
)

// imageBinary builds tollgate exactly as the Dockerfile does: its `go build`
// line, run by a shell, in a copy of the build context (the tree minus
// .dockerignore), for this machine's platform. Built once per test run.
func imageBinary(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux; this builds for the host platform")
	}
	if testing.Short() {
		t.Skip("builds the whole binary (minutes with a cold build cache)")
	}
	imageBinaryOnce.Do(func() { imageBinaryPath, imageBinaryErr = buildImageBinary(t) })
	if imageBinaryErr != nil {
		t.Fatal(imageBinaryErr)
	}
	return imageBinaryPath
}

func buildImageBinary(t testing.TB) (string, error) {
	line := dockerBuildLine(t)
	// Let a shell split and expand the line as /bin/sh in the build stage
	// does; BuildKit's TARGETOS/TARGETARCH become the host platform.
	env := []string{"TARGETOS=" + runtime.GOOS, "TARGETARCH=" + runtime.GOARCH,
		"COMMIT=" + imageCommit, "BUILD_DATE=" + imageBuildDate}
	out, err := run(root, nil, env, "bash", "-c", `eval "set -- $1"; printf '%s\0' "$@"`, "bash", line)
	if err != nil {
		return "", err
	}
	words := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	var assign []string
	for len(words) > 0 && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(words[0]) {
		assign, words = append(assign, words[0]), words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		return "", fmt.Errorf("build line %q: want [VAR=value...] go build ...", line)
	}
	// The binary is reused by several tests.
	dir := filepath.Join(sharedDir, "image")
	context := filepath.Join(dir, "src")
	if err := copyBuildContext(context); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tollgate")
	outSet := false
	for i := range words {
		if words[i] == "-o" && i+1 < len(words) {
			words[i+1], outSet = bin, true
		}
	}
	if !outSet {
		return "", fmt.Errorf("build line %q has no -o", line)
	}
	// GOFLAGS is cleared as in the golang image; the context has no .git.
	env = append([]string{"GOFLAGS="}, assign...)
	if _, err := run(context, nil, env, "go", words[1:]...); err != nil {
		return "", err
	}
	return bin, nil
}

// dockerignore reads the patterns of .dockerignore. Only the subset this
// repository uses is supported (the matcher below implements it exactly):
// no "!" exceptions and no "**".
func dockerignore() ([]string, error) {
	data, err := os.ReadFile(repoPath(".dockerignore"))
	if err != nil {
		return nil, err
	}
	var pats []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") || strings.Contains(l, "**") {
			return nil, fmt.Errorf(".dockerignore: %q: this test supports no ! or ** patterns", l)
		}
		l = strings.Trim(path.Clean(l), "/")
		if _, err := path.Match(l, ""); err != nil {
			return nil, fmt.Errorf(".dockerignore: %q: %v", l, err)
		}
		pats = append(pats, l)
	}
	return pats, nil
}

// ignored reports whether Docker leaves rel (slash-separated, from the
// context root) out of the context: a pattern matches the path or one of its
// parent directories, anchored at the root.
func ignored(pats []string, rel string) bool {
	parts := strings.Split(rel, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		for _, p := range pats {
			if ok, _ := path.Match(p, prefix); ok {
				return true
			}
		}
	}
	return false
}

// copyBuildContext copies the files of the working tree (tracked and
// untracked, as git lists them) that .dockerignore keeps into dst.
func copyBuildContext(dst string) error {
	pats, err := dockerignore()
	if err != nil {
		return err
	}
	out, err := run(root, nil, nil, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return err
	}
	n := 0
	for _, rel := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
		if rel == "" || ignored(pats, rel) {
			continue
		}
		if err := copyFile(filepath.Join(root, rel), filepath.Join(dst, rel)); err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the working tree
			}
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("the build context is empty")
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil || fi.IsDir() {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	o, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}

func TestDockerignore(t *testing.T) {
	pats, err := dockerignore()
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]bool{
		".git/HEAD":                  true,
		"bin/tollgate":               true,
		"bin":                        true,
		"charts/tollgate/Chart.yaml": true,
		"x.test":                     true,
		"main.go":                    false,
		"go.sum":                     false,
		"lua/token_bucket.lua":       false, // embedded
		"lua/concurrency.lua":        false, // embedded
		"config/samples/ratelimit_v1alpha1_ratelimitrule_shop-a.yaml": false, // embedded
		"dataplane/gateway/gateway.go":                                false,
		"cmd/root.go":                                                 false,
	} {
		if got := ignored(pats, rel); got != want {
			t.Errorf("ignored(%q) = %v, want %v", rel, got, want)
		}
	}
}

// TestDockerfileBuild builds the binary the way the image does and checks
// that it is static (it must run on distroless/static, which has no libc or
// dynamic loader) and that it runs.
func TestDockerfileBuild(t *testing.T) {
	bin := imageBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			t.Error("the binary has a PT_INTERP program header: it needs a dynamic loader")
		case elf.PT_DYNAMIC:
			t.Error("the binary has a PT_DYNAMIC program header: it is dynamically linked")
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Error("the binary has a .dynamic section")
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary imports shared libraries %v", libs)
	}
	// -s -w: no symbol table, no DWARF.
	if s := f.Section(".symtab"); s != nil {
		t.Error("the binary has a symbol table: -ldflags \"-s -w\" missing?")
	}
	for _, args := range [][]string{{"--help"}, {"gateway", "--help"}, {"controller", "--help"}} {
		out, err := run(t.TempDir(), nil, nil, bin, args...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "Usage:") {
			t.Errorf("%v: no usage in %q", args, out)
		}
	}
}
