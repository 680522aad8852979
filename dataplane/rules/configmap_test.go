package rules

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// These tests drive ConfigMapSource's event handling directly, without an
// API server, to count decodes and callbacks exactly. The envtest suite
// (configmap_envtest_test.go) runs it against a real one.

// cmRecorder collects a ConfigMapSource's callbacks; it is safe for
// concurrent use.
type cmRecorder struct {
	mu      sync.Mutex
	reloads []*snapshot.Set
	errs    []error
}

func (r *cmRecorder) options(ns, name string) ConfigMapOptions {
	return ConfigMapOptions{
		Namespace:    ns,
		SnapshotName: name,
		OnReload:     func(s *snapshot.Set) { r.mu.Lock(); r.reloads = append(r.reloads, s); r.mu.Unlock() },
		OnError:      func(e error) { r.mu.Lock(); r.errs = append(r.errs, e); r.mu.Unlock() },
	}
}

func (r *cmRecorder) counts() (reloads, errs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reloads), len(r.errs)
}

func (r *cmRecorder) errors() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.errs {
		b.WriteString(e.Error() + "\n")
	}
	return b.String()
}

// fataler is what shardConfigMaps needs of a *testing.T or GinkgoT().
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// shardConfigMaps renders rules as a snapshot of count shards at version.
func shardConfigMaps(t fataler, ns, prefix string, count int, version int64, rules []snapshot.Rule) []*corev1.ConfigMap {
	t.Helper()
	var out []*corev1.ConfigMap
	for i, part := range snapshot.Partition(append([]snapshot.Rule(nil), rules...), count) {
		cm, err := snapshot.NewShard(i, count, version, part).ConfigMap(ns, prefix)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cm)
	}
	return out
}

// withRV returns a copy of cm with a resourceVersion, as the informer
// delivers it.
func withRV(cm *corev1.ConfigMap, rv int) *corev1.ConfigMap {
	cm = cm.DeepCopy()
	cm.ResourceVersion = fmt.Sprint(rv)
	return cm
}

func TestConfigMapSourceEvents(t *testing.T) {
	rules := []snapshot.Rule{rule("acme", "orders", 1), rule("globex", "*", 2), rule("*", "*", 3)}
	v1 := shardConfigMaps(t, "ns", "snap", 2, 1, rules)
	store := NewStore(defaultRule)
	var rec cmRecorder
	s := NewConfigMapSource(nil, store, rec.options("ns", "snap"))

	// The initial list: half a layout is not an error while listing.
	s.upsert(withRV(v1[0], 1))
	if _, errs := rec.counts(); errs != 0 || store.Loaded() {
		t.Fatalf("during the list: errors %q, loaded %v", rec.errors(), store.Loaded())
	}
	s.upsert(withRV(v1[1], 2))
	s.listDone()
	if reloads, errs := rec.counts(); reloads != 1 || errs != 0 || !s.HasSynced() || store.Version() != 1 {
		t.Fatalf("after the list: %d reloads, errors %q, synced %v, version %d", reloads, rec.errors(), s.HasSynced(), store.Version())
	}
	first := store.Current()

	steps := []struct {
		name    string
		apply   func()
		reloads int // callback totals after the step
		errs    int
		want    int64 // capacity for acme/orders
	}{
		{name: "resync: same resourceVersion", apply: func() { s.upsert(withRV(v1[0], 1)) }, reloads: 1, errs: 0, want: 1},
		{name: "rewritten with the same content", apply: func() { s.upsert(withRV(v1[0], 10)) }, reloads: 1, errs: 0, want: 1},
		{name: "garbage", apply: func() {
			cm := withRV(v1[0], 11)
			cm.BinaryData[snapshot.DataKey] = []byte("garbage")
			s.upsert(cm)
		}, reloads: 1, errs: 1, want: 1},
		{name: "garbage resynced", apply: func() {
			cm := withRV(v1[0], 11)
			cm.BinaryData[snapshot.DataKey] = []byte("garbage")
			s.upsert(cm)
		}, reloads: 1, errs: 1, want: 1},
		{name: "annotations disagree", apply: func() {
			cm := withRV(v1[1], 12)
			cm.Annotations[snapshot.AnnotationVersion] = "9"
			s.upsert(cm)
		}, reloads: 1, errs: 2, want: 1},
		{name: "deleted via a tombstone", apply: func() {
			s.remove(cache.DeletedFinalStateUnknown{Key: "ns/snap-1-of-2", Obj: withRV(v1[1], 12)})
		}, reloads: 1, errs: 3, want: 1},
		{name: "unknown object ignored", apply: func() { s.upsert("not a configmap"); s.remove(42) }, reloads: 1, errs: 3, want: 1},
		{name: "new version", apply: func() {
			for i, cm := range shardConfigMaps(t, "ns", "snap", 2, 2, []snapshot.Rule{rule("acme", "orders", 7), rule("*", "*", 3)}) {
				s.upsert(withRV(cm, 20+i))
			}
		}, reloads: 2, errs: 4, want: 7}, // shard 1 was gone: shard 0 alone is an incomplete layout
	}
	for _, st := range steps {
		st.apply()
		reloads, errs := rec.counts()
		if reloads != st.reloads || errs != st.errs || capacityOf(store, "acme", "orders") != st.want {
			t.Fatalf("%s: %d reloads, %d errors, acme/orders capacity %d; want %d, %d, %d\nerrors:\n%s",
				st.name, reloads, errs, capacityOf(store, "acme", "orders"), st.reloads, st.errs, st.want, rec.errors())
		}
		if st.want == 1 && store.Current() != first {
			t.Fatalf("%s: the snapshot was swapped", st.name)
		}
	}
	msgs := rec.errors()
	for _, want := range []string{"snapshot ConfigMap ns/snap-0-of-2 rejected, its last good content (version 1) stays in use",
		"snapshot ConfigMap ns/snap-1-of-2 rejected", "version 1 stays in force"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("errors do not contain %q:\n%s", want, msgs)
		}
	}
}

func TestConfigMapSourceLayoutSwitch(t *testing.T) {
	var rules []snapshot.Rule
	for i := range 40 {
		rules = append(rules, rule(fmt.Sprintf("tenant-%d", i), "*", int64(i+1)))
	}
	store := NewStore(defaultRule)
	var rec cmRecorder
	s := NewConfigMapSource(nil, store, rec.options("ns", "snap"))
	old := shardConfigMaps(t, "ns", "snap", 1, 1, rules)[0]
	s.upsert(withRV(old, 1))
	s.listDone()

	check := func(step string) {
		t.Helper()
		for i := range 40 {
			if got := capacityOf(store, fmt.Sprintf("tenant-%d", i), "x"); got != int64(i+1) {
				t.Fatalf("%s: tenant-%d has capacity %d", step, i, got)
			}
		}
	}
	check("1 shard")
	for i, cm := range shardConfigMaps(t, "ns", "snap", 2, 2, rules) {
		s.upsert(withRV(cm, 10+i))
		check(fmt.Sprintf("2-shard layout, shard %d created", i))
	}
	s.remove(old)
	check("old layout deleted")
	if store.Current().Count() != 2 || store.Version() != 2 {
		t.Errorf("layout %d shards, version %d", store.Current().Count(), store.Version())
	}
	if _, errs := rec.counts(); errs != 0 {
		t.Errorf("errors during the switch:\n%s", rec.errors())
	}

	// Deleting everything keeps the last rules in force.
	for i, cm := range shardConfigMaps(t, "ns", "snap", 2, 2, rules) {
		s.remove(withRV(cm, 10+i))
	}
	check("all deleted")
	if _, errs := rec.counts(); errs != 2 || !strings.Contains(rec.errors(), "no snapshot shards found") {
		t.Errorf("errors:\n%s", rec.errors())
	}
}

func TestConfigMapSourceEmptyList(t *testing.T) {
	store := NewStore(defaultRule)
	var rec cmRecorder
	s := NewConfigMapSource(nil, store, rec.options("ns", "snap"))
	s.listDone()
	if !s.HasSynced() || store.Loaded() {
		t.Errorf("synced %v, loaded %v", s.HasSynced(), store.Loaded())
	}
	if !strings.Contains(rec.errors(), "no snapshot shards found; no rules are loaded yet") {
		t.Errorf("errors:\n%s", rec.errors())
	}
}
