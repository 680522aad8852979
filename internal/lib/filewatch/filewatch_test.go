package filewatch

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	write(t, path, "12345")
	if data, err := ReadFile(path, 5); err != nil || string(data) != "12345" {
		t.Errorf("ReadFile(max 5) = %q, %v", data, err)
	}
	_, err := ReadFile(path, 4)
	if err == nil || !strings.Contains(err.Error(), path+": larger than 4 bytes") {
		t.Errorf("ReadFile(max 4) error = %v", err)
	}
	if strings.Contains(err.Error(), "1234") {
		t.Errorf("error quotes the content: %v", err)
	}
	if _, err := ReadFile(path+".missing", 5); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(missing) error = %v, want fs.ErrNotExist", err)
	}
}

// parseWord accepts a file holding one lower-case word.
func parseWord(data []byte) (*string, error) {
	s := strings.TrimSpace(string(data))
	if s == "" || strings.ToLower(s) != s {
		return nil, errors.New("want one lower-case word")
	}
	return &s, nil
}

func TestWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "word")
	write(t, path, "a")
	var reloads []string
	var errs []error
	polls := 0
	w, err := New(path, 64, parseWord, Options[string]{
		OnReload: func(s *string) { reloads = append(reloads, *s) },
		OnError:  func(err error) { errs = append(errs, err) },
		OnPoll:   func() { polls++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if *w.Current() != "a" {
		t.Fatalf("Current() = %q", *w.Current())
	}

	w.Poll() // unchanged: nothing to do
	write(t, path, "b")
	w.Poll()
	w.Poll()
	write(t, path, "BAD")
	w.Poll()
	w.Poll() // the same bad content is reported once
	write(t, path, "b")
	w.Poll() // back to the good content: nothing to reload
	write(t, path, "BAD")
	w.Poll() // a failure after good content is reported again
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w.Poll()
	w.Poll()

	if got := strings.Join(reloads, ","); got != "b" {
		t.Errorf("reloads = %q, want b", got)
	}
	if len(errs) != 3 {
		t.Fatalf("errors = %v, want 3", errs)
	}
	if !strings.HasPrefix(errs[0].Error(), path+": ") || errs[0].Error() != errs[1].Error() {
		t.Errorf("parse errors = %v, %v; want them prefixed with the path", errs[0], errs[1])
	}
	if !errors.Is(errs[2], fs.ErrNotExist) {
		t.Errorf("read error = %v, want fs.ErrNotExist", errs[2])
	}
	if *w.Current() != "b" {
		t.Errorf("Current() = %q, want the last good value b", *w.Current())
	}
	if polls != 9 {
		t.Errorf("OnPoll called %d times, want 9", polls)
	}
}

func TestNewFails(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(filepath.Join(dir, "missing"), 64, parseWord, Options[string]{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	write(t, bad, "BAD")
	if _, err := New(bad, 64, parseWord, Options[string]{}); err == nil || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Errorf("bad file: %v", err)
	}
}

// A source other than one file: parse runs only for new content.
func TestNewSourceParsesNewContentOnly(t *testing.T) {
	content := []byte("a")
	parses := 0
	read := func() (Content[string], error) {
		data := bytes.Clone(content)
		return Content[string]{Sum: sha256.Sum256(data), Parse: func() (*string, error) {
			parses++
			return parseWord(data)
		}}, nil
	}
	w, err := NewSource(read, Options[string]{})
	if err != nil {
		t.Fatal(err)
	}
	w.Poll()
	w.Poll()
	content = []byte("c")
	w.Poll()
	w.Poll()
	if parses != 2 || *w.Current() != "c" {
		t.Errorf("parses = %d, Current() = %q; want 2, c", parses, *w.Current())
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	write(t, good, "a\n")
	write(t, bad, "BAD")
	if v, err := Load(good, 64, parseWord); err != nil || *v != "a" {
		t.Errorf("Load(good) = %v, %v", v, err)
	}
	if _, err := Load(bad, 64, parseWord); err == nil || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Errorf("Load(bad) error = %v, want it prefixed with the path", err)
	}
	if _, err := Load(good, 1, parseWord); err == nil || !strings.Contains(err.Error(), "larger than 1 bytes") {
		t.Errorf("Load(too large) error = %v", err)
	}
}
