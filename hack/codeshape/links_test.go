package codeshape

import (
	"bufio"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownLink is an inline Markdown link or image: [text](target) or
// ![alt](target), with an optional "title" after the target.
var markdownLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// markdownFiles lists the Markdown files of the repository (README.md,
// docs/, the chart's README...), relative to root, leaving out hidden
// folders, bin/ and testdata.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || rel == "bin" || name == "node_modules") {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".md") {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files under %s; is the walk broken?", len(files), root)
	}
	return files
}

// anchors returns the anchors GitHub gives the headings of a Markdown file:
// lower case, punctuation other than '-' and '_' dropped, spaces turned into
// '-', and "-1", "-2"... appended to repeats. Headings inside fenced code
// blocks are not headings.
func anchors(t *testing.T, rel string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := slug(text)
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// slug is GitHub's anchor for a heading's text.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool {
	return strings.ToLower(string(r)) != strings.ToUpper(string(r))
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestMarkdownLinks checks every relative link of every Markdown file: the
// file or folder it names exists, and an anchor (#...) names a heading of
// that file. Links to other sites are not followed (the tests run without
// the internet).
func TestMarkdownLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	links := 0
	for _, rel := range markdownFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for n, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				file, anchor, _ := strings.Cut(target, "#")
				dest := rel
				if file != "" {
					dest = pathpkg.Clean(pathpkg.Join(pathpkg.Dir(rel), file))
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						t.Errorf("%s:%d: link %s: %s does not exist", rel, n+1, target, dest)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if cache[dest] == nil {
					cache[dest] = anchors(t, dest)
				}
				if !cache[dest][anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with the anchor #%s", rel, n+1, target, dest, anchor)
				}
			}
		}
	}
	if links < 10 {
		t.Fatalf("found only %d relative links; is the pattern broken?", links)
	}
}

// TestSlug pins the anchors of a few headings.
func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"Start here":              "start-here",
		"Why was I rate limited?": "why-was-i-rate-limited",
		"Envoy, Istio: tollgate as the global rate limit service": "envoy-istio-tollgate-as-the-global-rate-limit-service",
		"`spec.by`: what a bucket is keyed by":                    "specby-what-a-bucket-is-keyed-by",
		"HTTP/2 and gRPC":                                         "http2-and-grpc",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
}

// MaxReadmeLines is how long README.md may be: the first page a newcomer
// reads (what tollgate is, the two commands, install, a first rule, where
// to read on) fits a few screens; the reference lives in docs/.
const MaxReadmeLines = 250

// TestReadmeFitsAFewScreens fails when README.md grows past MaxReadmeLines.
func TestReadmeFitsAFewScreens(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > MaxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move reference material into docs/ and link it", n, MaxReadmeLines)
	}
}
