package rules

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// recorder collects a FileSource's callbacks.
type recorder struct {
	mu       sync.Mutex
	reloads  []*snapshot.Set
	warnings []string
	errs     []error
}

func (r *recorder) options(interval time.Duration) FileOptions {
	return FileOptions{
		Interval:  interval,
		OnReload:  func(s *snapshot.Set) { r.mu.Lock(); r.reloads = append(r.reloads, s); r.mu.Unlock() },
		OnWarning: func(m string) { r.mu.Lock(); r.warnings = append(r.warnings, m); r.mu.Unlock() },
		OnError:   func(e error) { r.mu.Lock(); r.errs = append(r.errs, e); r.mu.Unlock() },
	}
}

func (r *recorder) counts() (reloads, warnings, errs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reloads), len(r.warnings), len(r.errs)
}

func (r *recorder) lastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return r.errs[len(r.errs)-1]
}

// writeFile replaces path atomically, as the kubelet and careful editors do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every few milliseconds until it holds or a generous
// deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func capacityOf(s *Store, tenant, route string) int64 { return s.Lookup(tenant, route).Capacity }

func TestFileSourceSingleFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, doc("a", spec1)+"---\n"+doc("b", "tenant: '*'\nroute: reports\ncapacity: 3\nrefill: {tokens: 10, period: 1m}"))
	store := NewStore(defaultRule)
	var rec recorder
	if _, err := NewFileSource(path, store, rec.options(0)); err != nil {
		t.Fatal(err)
	}
	if !store.Loaded() || store.Version() != 1 || store.Current().Len() != 2 {
		t.Fatalf("store: loaded %v, version %d", store.Loaded(), store.Version())
	}
	if r := store.Lookup("anyone", "reports"); r.RefillPeriodMs != 60000 || r.RefillTokens != 10 {
		t.Errorf("10 per minute compiled to %+v", *r)
	}
	if capacityOf(store, "shop-a", "orders") != 10 || capacityOf(store, "x", "y") != 20 {
		t.Errorf("lookups do not match the file")
	}
	if reloads, warnings, errs := rec.counts(); reloads != 1 || warnings != 0 || errs != 0 {
		t.Errorf("callbacks: %d reloads, %d warnings, %d errors", reloads, warnings, errs)
	}
}

func TestFileSourceDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.yml"), doc("b", "tenant: t\nroute: r\ncapacity: 2\nrefillPerSecond: 1"))
	writeFile(t, filepath.Join(dir, "a.yaml"), doc("a", "tenant: t\nroute: r\ncapacity: 1\nrefillPerSecond: 1"))
	writeFile(t, filepath.Join(dir, "c.json"), `{"apiVersion":"ratelimit.tollgate.dev/v1alpha1","kind":"RateLimitRule","metadata":{"name":"c"},"spec":{"tenant":"u","route":"r","capacity":3,"refillPerSecond":1}}`)
	// Not read: other extensions, hidden files, subdirectories, dangling links.
	writeFile(t, filepath.Join(dir, "README.md"), "not yaml: [")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "not yaml: [")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub.yaml", "x.yaml"), "not yaml: [")
	if err := os.Symlink(filepath.Join(dir, "gone.yaml"), filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}

	store := NewStore(defaultRule)
	var rec recorder
	if _, err := NewFileSource(dir, store, rec.options(0)); err != nil {
		t.Fatal(err)
	}
	if store.Current().Len() != 2 || capacityOf(store, "t", "r") != 1 || capacityOf(store, "u", "r") != 3 {
		t.Fatalf("store has %d rules; t/r capacity %d", store.Current().Len(), capacityOf(store, "t", "r"))
	}
	// b.yml's rule conflicts with a.yaml's and loses by name.
	if _, warnings, _ := rec.counts(); warnings != 1 || !strings.Contains(rec.warnings[0], filepath.Join(dir, "b.yml")+": document 1") {
		t.Errorf("warnings %q", rec.warnings)
	}
}

func TestFileSourceSamples(t *testing.T) {
	store := NewStore(defaultRule)
	if _, err := NewFileSource(filepath.Join("..", "..", "config", "samples"), store, FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := store.Current().Len(); n != 12 {
		t.Fatalf("samples compiled to %d rules, want 12 (one per sample file)", n)
	}
	// The samples keyed otherwise than tenant and route form kinds of
	// their own: per address, per tenant, shared and per claim.
	if kinds := store.Current().Kinds(); len(kinds) != 4 {
		t.Errorf("kinds %q, want 4 besides the default", kinds)
	}
	// The samples of the limits beyond the token bucket keep their fields.
	if r := store.Lookup("shop-c", "list-orders"); r.MaxInFlight != 4 {
		t.Errorf("concurrency sample: %+v", *r)
	}
	if r := store.Lookup("partner-x", "create-order"); r.QuotaLimit != 1_000_000 || r.QuotaZone != "Europe/Paris" {
		t.Errorf("quota sample: %+v", *r)
	}
	if r := store.Lookup("shop-c", "export"); r.Cost == nil || r.Cost.Header != "X-Cost" {
		t.Errorf("request cost sample: %+v", *r)
	}
	if r := store.Lookup("anyone", "chat-completions"); r.Cost == nil || r.Cost.Response == nil || r.Cost.Response.ClientGone() != 500 {
		t.Errorf("response cost sample: %+v", *r)
	}
	if r := store.Lookup("shop-b", "anything"); r.Source != "default/shop-b-hourly" || r.RefillPeriodMs != 3_600_000 {
		t.Errorf("shop-b: %+v", *r)
	}
	if r := store.Lookup("shop-c", "reports"); r.Source != "default/reports-per-minute" || r.RefillPeriodMs != 60000 {
		t.Errorf("reports: %+v", *r)
	}
}

func TestNewFileSourceErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string // written to rules.yaml; empty: the path does not exist
		want    string // substring of the error
	}{
		{name: "missing path", want: "no such file"},
		{name: "unknown field", content: doc("a", spec1+"burst: 3"), want: `rules.yaml: document 1 (line 1): unknown field "spec.burst"`},
		{name: "wrong kind", content: "---\n" + doc("a", spec1) + "---\n" + strings.Replace(doc("b", spec1), "RateLimitRule", "RateLimit", 1), want: `rules.yaml: document 2 (line 12): apiVersion "ratelimit.tollgate.dev/v1alpha1", kind "RateLimit"`},
		{name: "missing name", content: strings.Replace(doc("a", spec1), "name: a", "generateName: a-", 1), want: "metadata.name: missing"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name, "rules.yaml")
			if tt.content != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				writeFile(t, path, tt.content)
			}
			store := NewStore(defaultRule)
			_, err := NewFileSource(path, store, FileOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("case %d: error %v, want it to contain %q", i, err, tt.want)
			}
			if store.Loaded() {
				t.Errorf("a failed load changed the store")
			}
		})
	}
}

func TestFileSourceEmptyDirectory(t *testing.T) {
	store := NewStore(defaultRule)
	var rec recorder
	if _, err := NewFileSource(t.TempDir(), store, rec.options(0)); err != nil {
		t.Fatal(err)
	}
	if !store.Loaded() || store.Current().Len() != 0 || capacityOf(store, "a", "b") != 20 {
		t.Errorf("empty directory: loaded %v", store.Loaded())
	}
	if _, warnings, _ := rec.counts(); warnings != 1 {
		t.Errorf("warnings %q, want one about the empty directory", rec.warnings)
	}
}

// TestFileSourceBadReload drives polls by hand to count callbacks exactly.
func TestFileSourceBadReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	good := doc("a", spec1)
	writeFile(t, path, good)
	store := NewStore(defaultRule)
	var rec recorder
	src, err := NewFileSource(path, store, rec.options(0))
	if err != nil {
		t.Fatal(err)
	}
	set := store.Current()

	steps := []struct {
		name    string
		content string // "" removes the file
		reloads int    // callback totals after three polls
		errs    int
		version int64
	}{
		{name: "unchanged", content: good, reloads: 1, errs: 0, version: 1},
		{name: "invalid: reported once", content: doc("a", spec1+"capacity: x"), reloads: 1, errs: 1, version: 1},
		{name: "another invalid content", content: doc("a", "tenant: ''\nroute: r\ncapacity: 1\nrefillPerSecond: 1"), reloads: 1, errs: 2, version: 1},
		{name: "file removed", content: "", reloads: 1, errs: 3, version: 1},
		{name: "good again, same as before: no reload", content: good, reloads: 1, errs: 3, version: 1},
		{name: "the first invalid content again is reported again", content: doc("a", spec1+"capacity: x"), reloads: 1, errs: 4, version: 1},
		{name: "changed and valid", content: doc("a", "tenant: t\nroute: r\ncapacity: 7\nrefillPerSecond: 1"), reloads: 2, errs: 4, version: 2},
	}
	for _, st := range steps {
		if st.content == "" {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, path, st.content)
		}
		for range 3 {
			src.poll()
		}
		reloads, _, errs := rec.counts()
		if reloads != st.reloads || errs != st.errs || store.Version() != st.version {
			t.Fatalf("%s: %d reloads, %d errors, version %d; want %d, %d, %d (last error: %v)",
				st.name, reloads, errs, store.Version(), st.reloads, st.errs, st.version, rec.lastError())
		}
		if st.version == 1 && store.Current() != set {
			t.Fatalf("%s: the last good snapshot was replaced", st.name)
		}
	}
	if capacityOf(store, "t", "r") != 7 {
		t.Errorf("final content not in force")
	}
}

func TestFileSourceRunFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), doc("a", spec1))
	store := NewStore(defaultRule)
	var rec recorder
	src, err := NewFileSource(dir, store, rec.options(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// A new file is picked up.
	writeFile(t, filepath.Join(dir, "b.yaml"), doc("b", "tenant: shop-b\nroute: '*'\ncapacity: 50\nrefillPerSecond: 1"))
	eventually(t, "the new file", func() bool { return capacityOf(store, "shop-b", "x") == 50 })

	// An invalid change is reported and the last good rules stay.
	writeFile(t, filepath.Join(dir, "a.yaml"), doc("a", spec1+"oops: 1"))
	eventually(t, "OnError", func() bool { return rec.lastError() != nil })
	if err := rec.lastError(); !strings.Contains(err.Error(), `a.yaml: document 1 (line 1): unknown field "spec.oops"`) {
		t.Errorf("error %v", err)
	}
	if capacityOf(store, "shop-a", "orders") != 10 || capacityOf(store, "shop-b", "x") != 50 {
		t.Errorf("the last good rules are not in force")
	}

	// Fixing it and removing a file take effect.
	writeFile(t, filepath.Join(dir, "a.yaml"), doc("a", strings.Replace(spec1, "capacity: 10", "capacity: 11", 1)))
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the fix", func() bool {
		return capacityOf(store, "shop-a", "orders") == 11 && capacityOf(store, "shop-b", "x") == 20
	})
	if _, _, errs := rec.counts(); errs != 1 {
		t.Errorf("%d errors, want 1", errs)
	}
}

func TestFileSourceReadError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, doc("a", spec1))
	store := NewStore(defaultRule)
	var rec recorder
	src, err := NewFileSource(dir, store, rec.options(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	src.poll()
	src.poll()
	if _, _, errs := rec.counts(); errs != 1 || !errors.Is(rec.lastError(), os.ErrNotExist) {
		t.Errorf("%d errors, last %v", errs, rec.lastError())
	}
	if capacityOf(store, "shop-a", "orders") != 10 {
		t.Errorf("rules lost when the directory vanished")
	}
}
