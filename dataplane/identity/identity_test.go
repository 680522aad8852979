package identity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/lib/filewatch"
)

// secret is key material used throughout; no error may ever contain it.
const secret = "S3cr3t-Key-Material-42"

// sha256Hex is the hex SHA-256 of s.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// header returns a header with the given X-Api-Key values.
func header(values ...string) http.Header {
	h := http.Header{}
	for _, v := range values {
		h.Add(HeaderName, v)
	}
	return h
}

func TestAPIKeyDirect(t *testing.T) {
	printable512 := strings.Repeat("k", MaxKeyLength)
	tests := []struct {
		name   string
		values []string // X-Api-Key values; none means no header
		keyErr error    // wanted error of APIKey
		tenant string   // wanted tenant from Direct if APIKey succeeds; "" means ErrInvalidKey
	}{
		{name: "missing", keyErr: ErrMissingKey},
		{name: "empty", values: []string{""}, keyErr: ErrMissingKey},
		{name: "two values", values: []string{"shop-a", "shop-b"}, keyErr: ErrInvalidKey},
		{name: "two empty values", values: []string{"", ""}, keyErr: ErrInvalidKey},
		{name: "513 chars", values: []string{printable512 + "k"}, keyErr: ErrInvalidKey},
		{name: "512 chars is a key but no tenant", values: []string{printable512}},
		{name: "NUL", values: []string{"shop\x00a"}, keyErr: ErrInvalidKey},
		{name: "tab", values: []string{"shop\ta"}, keyErr: ErrInvalidKey},
		{name: "newline", values: []string{"shop\na"}, keyErr: ErrInvalidKey},
		{name: "DEL", values: []string{"shop\x7f"}, keyErr: ErrInvalidKey},
		{name: "space", values: []string{"shop a"}, keyErr: ErrInvalidKey},
		{name: "non-ASCII", values: []string{"shöp"}, keyErr: ErrInvalidKey},
		{name: "invalid UTF-8", values: []string{"shop\xff"}, keyErr: ErrInvalidKey},
		{name: "braces", values: []string{"{shop-a}"}},
		{name: "closing brace", values: []string{"shop}a"}},
		{name: "colon", values: []string{"shop:route"}},
		{name: "slash", values: []string{"shop/a"}},
		{name: "leading dash", values: []string{"-shop"}},
		{name: "65 chars", values: []string{strings.Repeat("a", 65)}},
		{name: "valid", values: []string{"shop-a"}, tenant: "shop-a"},
		{name: "valid punctuation", values: []string{"A.b_c-9"}, tenant: "A.b_c-9"},
		{name: "valid 64 chars", values: []string{strings.Repeat("a", 64)}, tenant: strings.Repeat("a", 64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := APIKey(header(tt.values...))
			if !errors.Is(err, tt.keyErr) || (err == nil) != (tt.keyErr == nil) {
				t.Fatalf("APIKey: err = %v, want %v", err, tt.keyErr)
			}
			if err == nil {
				if key != tt.values[0] {
					t.Fatalf("APIKey = %q, want %q", key, tt.values[0])
				}
				var tenant string
				tenant, err = Direct{}.Tenant(key)
				if tenant != tt.tenant {
					t.Fatalf("Direct = %q, want %q", tenant, tt.tenant)
				}
				if tt.tenant == "" && !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("Direct: err = %v, want ErrInvalidKey", err)
				}
			}
			if err != nil {
				for _, v := range tt.values {
					if v != "" && strings.Contains(err.Error(), v) {
						t.Errorf("error %q contains the key", err)
					}
				}
				if s := Status(err); s != http.StatusBadRequest && s != http.StatusUnauthorized {
					t.Errorf("Status = %d", s)
				}
			}
		})
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		err  error // input
		want int   // HTTP status
	}{
		{nil, 200},
		{ErrMissingKey, 401},
		{ErrUnknownKey, 401},
		{ErrInvalidKey, 400},
		{fmt.Errorf("wrapped: %w", ErrInvalidKey), 400},
		{errors.New("other"), 500},
	}
	for _, tt := range tests {
		if got := Status(tt.err); got != tt.want {
			t.Errorf("Status(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	if got, want := Fingerprint("test"), "sha256:9f86d081884c"; got != want {
		t.Errorf("Fingerprint = %q, want %q", got, want)
	}
	if fp := Fingerprint(secret); strings.Contains(fp, secret) || len(fp) != len("sha256:")+12 {
		t.Errorf("Fingerprint(secret) = %q", fp)
	}
	if Fingerprint("a") == Fingerprint("b") {
		t.Error("Fingerprint does not tell a from b")
	}
}

func TestNoAllocs(t *testing.T) {
	m, err := ParseMapped([]byte(keyFile))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string   // resolver name
		r    Resolver // resolver under test
		key  string   // presented key
	}{
		{"Direct", Direct{}, "shop-a"},
		{"Mapped", m, "s3cr3t-key-of-shop-b"},
		{"Mapped long key", m, strings.Repeat("k", MaxKeyLength)},
	}
	for _, tt := range tests {
		h := header(tt.key)
		if n := testing.AllocsPerRun(100, func() {
			k, _ := APIKey(h)
			_, _ = tt.r.Tenant(k)
		}); n != 0 {
			t.Errorf("%s: APIKey+Tenant allocate %v times per call, want 0", tt.name, n)
		}
	}
}

func TestParseMappedErrors(t *testing.T) {
	entry := func(s string) string { return "keys:\n  - tenant: shop-a\n" + s }
	tests := []struct {
		name   string
		src    string   // file content
		want   []string // substrings of the error
		secret string   // key material the error must not contain, besides secret
	}{
		{name: "empty file", src: "", want: []string{`must be a mapping with a "keys" list`}},
		{name: "top-level list", src: "- a\n", want: []string{"must be a mapping"}},
		{name: "keys missing", src: "key: " + secret + "\n", want: []string{"unknown top-level field", "keys: missing"}},
		{name: "unknown top-level field", src: "keys: []\n" + secret + ": 1\n", want: []string{"unknown top-level field"}},
		{name: "keys not a list", src: "keys: {a: b}\n", want: []string{"keys: must be a list"}},
		{name: "entry not a mapping", src: "keys: [" + secret + "]\n", want: []string{"keys[0]: must be a mapping"}},
		{name: "unknown field named like a key", src: entry("    key: x" + secret + "\n    " + secret + ": 1\n"), want: []string{"keys[0]: unknown field (fields are tenant, sha256 and key)"}},
		{name: "field in wrong case", src: "keys:\n  - Tenant: a\n    key: " + secret + "\n", want: []string{`keys[0]: unknown field (did you mean "tenant"?)`, "keys[0]: tenant: missing"}},
		{name: "tenant missing", src: "keys:\n  - key: " + secret + "\n", want: []string{"keys[0]: tenant: missing"}},
		{name: "tenant invalid", src: "keys:\n  - tenant: '{" + secret + "}'\n    sha256: " + sha256Hex("x") + "\n", want: []string{"keys[0]: tenant: must be a valid id"}},
		{name: "tenant not a string", src: "keys:\n  - tenant: [a]\n    key: " + secret + "\n", want: []string{"keys[0]: tenant: must be a valid id"}},
		{name: "both sha256 and key", src: entry("    sha256: " + sha256Hex("x") + "\n    key: " + secret + "\n"), want: []string{"keys[0]: exactly one of sha256 and key"}},
		{name: "neither sha256 nor key", src: entry(""), want: []string{"keys[0]: one of sha256 and key is required"}},
		{name: "raw key in sha256", src: entry("    sha256: " + secret + "\n"), want: []string{"keys[0]: sha256: must be 64 hex digits"}},
		{name: "sha256 not hex", src: entry("    sha256: " + strings.Repeat("z", 64) + "\n"), want: []string{"keys[0]: sha256: must be 64 hex digits"}},
		{name: "sha256 too long", src: entry("    sha256: " + sha256Hex("x") + "0\n"), want: []string{"keys[0]: sha256: must be 64 hex digits"}},
		{name: "sha256 a number", src: entry("    sha256: 1234\n"), want: []string{"keys[0]: sha256: must be 64 hex digits"}},
		{name: "key empty", src: entry("    key: ''\n"), want: []string{"keys[0]: key: must be 1-512 printable ASCII"}},
		{name: "key null", src: entry("    key:\n"), want: []string{"keys[0]: key: must be a string"}},
		{name: "key with space", src: entry("    key: " + secret + " x\n"), want: []string{"keys[0]: key: must be 1-512 printable ASCII"}},
		{name: "key too long", src: entry("    key: " + strings.Repeat(secret, 30) + "\n"), want: []string{"keys[0]: key: must be 1-512 printable ASCII"}},
		{name: "key a number", src: entry("    key: 12345678901234567\n"), want: []string{"keys[0]: key: must be a string (quote it)"}, secret: "12345678901234567"},
		{name: "key a boolean", src: entry("    key: yes\n"), want: []string{"keys[0]: key: must be a string"}},
		{
			name: "duplicate raw key",
			src:  entry("    key: " + secret + "\n  - tenant: shop-b\n    key: " + secret + "\n"),
			want: []string{"keys[1]: key: same key as keys[0]"},
		},
		{
			name: "duplicate key as digest in upper case",
			src:  entry("    key: " + secret + "\n  - tenant: shop-b\n    sha256: " + strings.ToUpper(sha256Hex(secret)) + "\n"),
			want: []string{"keys[1]: sha256: same key as keys[0]"},
		},
		{
			name: "all problems reported",
			src:  "keys:\n  - tenant: a\n    key: ' '\n  - tenant: b\n  - tenant: c\n    key: " + secret + "\n  - tenant: '-d'\n    sha256: " + secret + "\n",
			want: []string{"keys[0]: key:", "keys[1]: one of", "keys[3]: tenant:", "keys[3]: sha256:"},
		},
		{
			name:   "every wrong type reported",
			src:    "keys:\n  - tenant: [" + secret + "]\n    key: 12345678901234567\n  - tenant: b\n    sha256: {" + secret + ": 1}\n",
			want:   []string{"keys[0]: tenant: must be a valid id", "keys[0]: key: must be a string", "keys[1]: sha256: must be 64 hex digits"},
			secret: "12345678901234567",
		},
		{name: "keys null entry", src: "keys: [null]\n", want: []string{"keys[0]: must be a mapping"}},
		{name: "keys a string", src: "keys: " + secret + "\n", want: []string{"keys: must be a list"}},
		{name: "tab indentation", src: "keys:\n\t- tenant: a\n", want: []string{"syntax: line 2: found character that cannot start any token"}},
		{name: "unknown anchor", src: entry("    key: *" + secret + "\n"), want: []string{"syntax: ", "details withheld"}},
		{name: "duplicate field named like a key", src: entry("    key: a\n    " + secret + ": 1\n    " + secret + ": 2\n"), want: []string{"syntax: line 5: duplicate field"}},
		{name: "numeric duplicate field", src: entry("    key: a\n    12345678901234567: 1\n    12345678901234567: 2\n"), want: []string{"syntax: line 5: duplicate field"}, secret: "12345678901234567"},
		{name: "complex map key", src: entry("    key: a\n    ? [" + secret + "]\n    : 1\n"), want: []string{"syntax: ", "details withheld"}},
		{name: "NaN key", src: entry("    key: .nan\n"), want: []string{"syntax: invalid YAML"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMapped([]byte(tt.src))
			if err == nil {
				t.Fatalf("ParseMapped succeeded (%d keys)\n%s", m.Len(), tt.src)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
			for _, s := range []string{secret, sha256Hex(secret), tt.secret} {
				if s != "" && strings.Contains(msg, s) {
					t.Errorf("error contains key material %q:\n%s", s, msg)
				}
			}
		})
	}
}

// TestParseMappedUnknownTopLevelOnce: however many unknown top-level fields
// there are, one message says so, and it names none of them.
func TestParseMappedUnknownTopLevelOnce(t *testing.T) {
	_, err := ParseMapped([]byte("keys: []\n" + secret + ": 1\nother: 2\n"))
	if err == nil {
		t.Fatal("ParseMapped accepted unknown top-level fields")
	}
	msg := err.Error()
	if n := strings.Count(msg, "unknown top-level field"); n != 1 || strings.Contains(msg, secret) || strings.Contains(msg, "other") {
		t.Errorf("error:\n%s\nwant one unknown top-level field message, quoting no field", msg)
	}
}

// keyFile maps "test" (by digest, in upper case), shop-b's raw key and a
// second key of shop-a.
var keyFile = `
keys:
  - tenant: shop-a
    sha256: ` + strings.ToUpper(sha256Hex("test")) + ` # the SHA-256 of "test"
  - tenant: shop-b
    key: s3cr3t-key-of-shop-b
  - tenant: shop-a
    key: "rotated:key{of}shop-a"
`

func TestMappedLookup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeFile(t, path, keyFile)
	m, err := LoadMapped(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 3 {
		t.Errorf("Len = %d, want 3", m.Len())
	}
	tests := []struct {
		key     string // presented API key
		want    string // wanted tenant
		wantErr error  // wanted error
	}{
		{key: "test", want: "shop-a"},
		{key: "s3cr3t-key-of-shop-b", want: "shop-b"},
		{key: "rotated:key{of}shop-a", want: "shop-a"},
		{key: "shop-a", wantErr: ErrUnknownKey},
		{key: "TEST", wantErr: ErrUnknownKey},
		{key: strings.ToUpper(sha256Hex("test")), wantErr: ErrUnknownKey},
		{key: "", wantErr: ErrUnknownKey},
	}
	for _, tt := range tests {
		got, err := m.Tenant(tt.key)
		if got != tt.want || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Errorf("Tenant(%q) = %q, %v; want %q, %v", tt.key, got, err, tt.want, tt.wantErr)
		}
	}

	var nilMap *Mapped
	if _, err := nilMap.Tenant("test"); !errors.Is(err, ErrUnknownKey) || nilMap.Len() != 0 {
		t.Errorf("nil Mapped: %v, Len %d", err, nilMap.Len())
	}
	if m, err := ParseMapped([]byte("keys: []")); err != nil || m.Len() != 0 {
		t.Errorf("empty list: %v", err)
	}
	if _, err := LoadMapped(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadMapped(missing) = %v", err)
	}
}

// writeFile replaces path atomically, as the kubelet does.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// recv returns the next value of ch, failing after a generous deadline.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// run runs w until the test ends.
func run(t *testing.T, w *MappedWatcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestMappedWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeFile(t, path, "keys:\n  - tenant: shop-a\n    key: key-a\n")
	reloads, errs := make(chan int, 16), make(chan error, 16)
	polls := make(chan struct{}, 1)
	w, err := NewMappedWatcher(path, WatcherOptions{
		Interval: 20 * time.Millisecond,
		OnReload: func(n int) { reloads <- n },
		OnError:  func(err error) { errs <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.polled = func() {
		select {
		case polls <- struct{}{}:
		default:
		}
	}
	// waitPolls waits until at least n-1 whole polls have run.
	waitPolls := func(n int) {
		for range n {
			recv(t, polls, "poll")
		}
	}
	expect := func(key, want string) {
		t.Helper()
		if got, err := w.Tenant(key); got != want || (err == nil) != (want != "") {
			t.Errorf("Tenant(%q) = %q, %v; want %q", key, got, err, want)
		}
	}
	run(t, w)
	expect("key-a", "shop-a")

	writeFile(t, path, "keys:\n  - tenant: shop-a\n    key: key-a\n  - tenant: shop-b\n    key: key-b\n")
	if n := recv(t, reloads, "reload"); n != 2 {
		t.Errorf("OnReload(%d), want 2", n)
	}
	expect("key-b", "shop-b")

	// A bad file is reported once, without key material, and the last good
	// keys stay in use.
	writeFile(t, path, "keys:\n  - tenant: shop-c\n    sha256: "+secret+"\n")
	err = recv(t, errs, "OnError")
	if !strings.Contains(err.Error(), "keys[0]: sha256:") || strings.Contains(err.Error(), secret) {
		t.Errorf("OnError(%v)", err)
	}
	waitPolls(3)
	if len(errs) != 0 || len(reloads) != 0 {
		t.Errorf("bad file reported again (%d) or applied (%d)", len(errs), len(reloads))
	}
	expect("key-b", "shop-b")

	// Fixing the file applies it.
	writeFile(t, path, "keys:\n  - tenant: shop-c\n    key: key-c\n")
	if n := recv(t, reloads, "reload"); n != 1 {
		t.Errorf("OnReload(%d), want 1", n)
	}
	expect("key-c", "shop-c")
	expect("key-b", "")
	if w.Current().Len() != 1 {
		t.Errorf("Current().Len() = %d", w.Current().Len())
	}

	// A missing file is an error too, reported once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errs, "OnError"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OnError(%v), want not exist", err)
	}
	waitPolls(3)
	if len(errs) != 0 {
		t.Errorf("missing file reported again (%d)", len(errs))
	}
	expect("key-c", "shop-c")
}

func TestNewMappedWatcherErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewMappedWatcher(filepath.Join(dir, "missing"), WatcherOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	path := filepath.Join(dir, "keys.yaml")
	writeFile(t, path, "keys:\n  - tenant: '"+secret+"{'\n    key: "+secret+"\n")
	_, err := NewMappedWatcher(path, WatcherOptions{})
	if err == nil || !strings.Contains(err.Error(), "keys[0]: tenant:") || strings.Contains(err.Error(), secret) {
		t.Errorf("bad file: %v", err)
	}
}

func TestWatcherConcurrentTenant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	fileA := "keys:\n  - tenant: shop-a\n    key: stable\n"
	fileB := fileA + "  - tenant: shop-b\n    key: flip\n"
	writeFile(t, path, fileA)
	var reloads atomic.Int64
	w, err := NewMappedWatcher(path, WatcherOptions{
		Interval: time.Millisecond,
		OnReload: func(int) { reloads.Add(1) },
		OnError:  func(err error) { t.Errorf("OnError(%v)", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got, err := w.Tenant("stable"); got != "shop-a" || err != nil {
					t.Errorf("Tenant(stable) = %q, %v", got, err)
					return
				}
				if got, err := w.Tenant("flip"); got != "shop-b" && !errors.Is(err, ErrUnknownKey) {
					t.Errorf("Tenant(flip) = %q, %v", got, err)
					return
				}
			}
		})
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 1; reloads.Load() < 20 && time.Now().Before(deadline); i++ {
		want := reloads.Load() + 1
		writeFile(t, path, []string{fileA, fileB}[i%2])
		for reloads.Load() < want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	if reloads.Load() < 20 {
		t.Errorf("only %d reloads", reloads.Load())
	}
}

func BenchmarkDirect(b *testing.B) {
	h := header("shop-a")
	for b.Loop() {
		k, err := APIKey(h)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := (Direct{}).Tenant(k); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMapped(b *testing.B) {
	var src strings.Builder
	src.WriteString("keys:\n")
	for i := range 1000 {
		fmt.Fprintf(&src, "  - tenant: shop-%d\n    sha256: %s\n", i, sha256Hex(fmt.Sprintf("key-%032d", i)))
	}
	m, err := ParseMapped([]byte(src.String()))
	if err != nil {
		b.Fatal(err)
	}
	h := header(fmt.Sprintf("key-%032d", 500))
	for b.Loop() {
		k, err := APIKey(h)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Tenant(k); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzAPIKey(f *testing.F) {
	for _, s := range []string{"", "shop-a", "a b", "\x00", "ö", strings.Repeat("k", 513), "{x}:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := APIKey(http.Header{HeaderName: {v}})
		if err != nil {
			if err != ErrMissingKey && err != ErrInvalidKey {
				t.Fatalf("unexpected error %v", err)
			}
			if (v == "") != (err == ErrMissingKey) {
				t.Fatalf("APIKey(%q): %v", v, err)
			}
			return
		}
		if k != v || len(k) == 0 || len(k) > MaxKeyLength {
			t.Fatalf("APIKey(%q) = %q", v, k)
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x21 || k[i] > 0x7e {
				t.Fatalf("APIKey accepted byte %#x in %q", k[i], k)
			}
		}
	})
}

func FuzzDirect(f *testing.F) {
	for _, s := range []string{"shop-a", "{shop}", "a:b", "-a", "a.b_c", strings.Repeat("a", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		tenant, err := Direct{}.Tenant(key)
		if err != nil {
			if err != ErrInvalidKey || tenant != "" {
				t.Fatalf("Direct(%q) = %q, %v", key, tenant, err)
			}
			return
		}
		if tenant != key || strings.ContainsAny(tenant, "{}:") || !v1alpha1.ValidIdentifier(tenant) {
			t.Fatalf("Direct accepted %q", key)
		}
	})
}

// keyLine finds simple "key: value" lines of a key file.
var keyLine = regexp.MustCompile(`(?m)^[ \t-]*key:[ \t]*["']?(.*?)["']?[ \t]*$`)

func FuzzParseMapped(f *testing.F) {
	f.Add([]byte(keyFile))
	f.Add([]byte("keys:\n  - tenant: a\n    key: SECRET\n  - tenant: b\n    key: SECRET\n"))
	f.Add([]byte("keys:\n  - tenant: SECRET\n    sha256: SECRET\n    SECRET: *SECRET\n"))
	f.Add([]byte(`{"keys": [{"tenant": "a", "key": "SECRET"}, {"SECRET": 1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Wherever the fuzzer puts SECRET, a key is there in full.
		withSecret := bytes.ReplaceAll(data, []byte("SECRET"), []byte(secret))
		for _, in := range [][]byte{data, withSecret} {
			m, err := ParseMapped(in)
			if err == nil {
				for _, tenant := range m.tenants {
					if !v1alpha1.ValidIdentifier(tenant) {
						t.Fatalf("invalid tenant %q accepted", tenant)
					}
				}
				continue
			}
			msg := err.Error()
			if strings.Contains(msg, secret) {
				t.Fatalf("error quotes the key:\n%s", msg)
			}
			for _, sm := range keyLine.FindAllSubmatch(in, -1) {
				if v := string(sm[1]); len(v) >= 12 && strings.Contains(msg, v) {
					t.Fatalf("error quotes key %q:\n%s", v, msg)
				}
			}
		}
	})
}

// LoadMapped reads and parses the key file at path, as the MappedWatcher
// does.
func LoadMapped(path string) (*Mapped, error) {
	return filewatch.Load(path, maxFileSize, ParseMapped)
}
