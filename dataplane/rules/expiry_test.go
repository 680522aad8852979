package rules

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A temporary rule read from files ends at its spec.expiresAt as it ends in
// a cluster: dropped from the snapshot without any change to the files.
func TestFileSourceDropsExpiredRules(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, doc("default", "tenant: '*'\nroute: '*'\ncapacity: 20\nrefillPerSecond: 10")+"---\n"+
		doc("boost", "tenant: shop-a\nroute: '*'\ncapacity: 500\nrefillPerSecond: 100\nexpiresAt: 2025-07-01T13:00:00Z")+"---\n"+
		doc("short", "tenant: shop-b\nroute: '*'\ncapacity: 300\nrefillPerSecond: 100\nexpiresAt: 2025-07-01T12:30:00+00:00")+"---\n"+
		doc("old", "tenant: shop-c\nroute: '*'\ncapacity: 900\nrefillPerSecond: 100\nexpiresAt: 2025-07-01T11:00:00Z"))
	store := NewStore(defaultRule)
	var rec recorder
	opts := rec.options(0)
	opts.Clock = func() time.Time { return time.Unix(0, now.Load()) }
	src, err := NewFileSource(path, store, opts)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, want map[string]int64, version int64) {
		t.Helper()
		for tenant, c := range want {
			if got := capacityOf(store, tenant, "orders"); got != c {
				t.Errorf("%s: %s has capacity %d, want %d", step, tenant, got, c)
			}
		}
		if store.Version() != version {
			t.Errorf("%s: snapshot version %d, want %d", step, store.Version(), version)
		}
	}
	check("at the start", map[string]int64{"shop-a": 500, "shop-b": 300, "shop-c": 20, "other": 20}, 1)
	if _, warnings, _ := rec.counts(); warnings != 1 || !strings.Contains(rec.warnings[0], "RateLimitRule default/old is not in force: spec.expiresAt 2025-07-01T11:00:00Z has passed") {
		t.Errorf("warnings %q, want one about default/old", rec.warnings)
	}
	if d, ok := src.untilExpiry(); !ok || d != 30*time.Minute {
		t.Errorf("untilExpiry = %v, %v; want 30m", d, ok)
	}

	src.poll()
	check("a poll before any expiry changes nothing", map[string]int64{"shop-b": 300}, 1)

	now.Store(t0.Add(30 * time.Minute).UnixNano())
	src.poll()
	check("at the first expiry", map[string]int64{"shop-a": 500, "shop-b": 20}, 2)
	src.poll()
	check("the next poll keeps it", map[string]int64{"shop-b": 20}, 2)

	now.Store(t0.Add(2 * time.Hour).UnixNano())
	src.poll()
	check("after the last expiry", map[string]int64{"shop-a": 20, "shop-b": 20}, 3)
	if _, ok := src.untilExpiry(); ok {
		t.Error("no expiry is left, yet untilExpiry reports one")
	}
	if _, _, errs := rec.counts(); errs != 0 {
		t.Errorf("errors: %v", rec.lastError())
	}
}

// TestFileSourceRunExpiresLive: Run drops a rule at its expiry on the real
// clock, between polls of an unchanged file.
func TestFileSourceRunExpiresLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	expires := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	writeFile(t, path, doc("boost", "tenant: shop-a\nroute: '*'\ncapacity: 500\nrefillPerSecond: 100\nexpiresAt: "+expires))
	store := NewStore(defaultRule)
	var rec recorder
	// Polls far apart: only the expiry timer can drop the rule in time.
	src, err := NewFileSource(path, store, rec.options(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if capacityOf(store, "shop-a", "x") != 500 {
		t.Fatal("the boost is not in force before its expiry")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	eventually(t, "the boost to expire", func() bool { return capacityOf(store, "shop-a", "x") == 20 })
	at, _ := time.Parse(time.RFC3339Nano, expires)
	if time.Now().Before(at) {
		t.Errorf("the rule left before its expiry %v", at)
	}
}
