package rules

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// defaultRule is the gateway's built-in default: bursts of 20, 10 per second.
var defaultRule = snapshot.Rule{Tenant: "*", Route: "*", Capacity: 20, RefillTokens: 10, RefillPeriodMs: 1000}

// rule builds a valid rule; capacity tells rules apart in tests.
func rule(tenant, route string, capacity int64) snapshot.Rule {
	return snapshot.Rule{Tenant: tenant, Route: route, Capacity: capacity, RefillTokens: 1, RefillPeriodMs: 1000}
}

// shardedSet builds a set of count shards (Build would choose one shard for
// a handful of rules).
func shardedSet(t testing.TB, count int, version int64, rules []snapshot.Rule) *snapshot.Set {
	t.Helper()
	var shards []*snapshot.Shard
	for i, part := range snapshot.Partition(rules, count) {
		shards = append(shards, snapshot.NewShard(i, count, version, part))
	}
	set, err := snapshot.NewSet(shards)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestStoreLookupPrecedence(t *testing.T) {
	full := []snapshot.Rule{
		rule("acme", "orders", 1), // exact
		rule("acme", "*", 2),      // every route of acme
		rule("*", "reports", 3),   // every tenant on reports
		rule("*", "*", 4),         // catch-all
	}
	noCatchAll := full[:3]
	tests := []struct {
		name   string
		rules  []snapshot.Rule // nil: nothing loaded
		shards int             // 0: snapshot.Build chooses
		tenant string
		route  string
		want   int64 // capacity of the expected rule; 20 is the default
	}{
		{name: "nothing loaded", rules: nil, tenant: "acme", route: "orders", want: 20},
		{name: "exact", rules: full, tenant: "acme", route: "orders", want: 1},
		{name: "tenant wildcard route", rules: full, tenant: "acme", route: "other", want: 2},
		{name: "tenant+* beats *+route", rules: full, tenant: "acme", route: "reports", want: 2},
		{name: "wildcard tenant route", rules: full, tenant: "globex", route: "reports", want: 3},
		{name: "catch-all", rules: full, tenant: "globex", route: "other", want: 4},
		{name: "default when nothing matches", rules: noCatchAll, tenant: "globex", route: "other", want: 20},
		{name: "empty snapshot", rules: []snapshot.Rule{}, tenant: "acme", route: "orders", want: 20},
		{name: "exact across shards", rules: full, shards: 8, tenant: "acme", route: "orders", want: 1},
		{name: "wildcard across shards", rules: full, shards: 8, tenant: "globex", route: "reports", want: 3},
		{name: "default across shards", rules: noCatchAll, shards: 8, tenant: "globex", route: "x", want: 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(defaultRule)
			if tt.rules != nil {
				rules := append([]snapshot.Rule(nil), tt.rules...)
				if tt.shards > 0 {
					s.Replace(shardedSet(t, tt.shards, 1, rules))
				} else {
					s.Replace(snapshot.Build(rules, 1))
				}
			}
			got := s.Lookup(tt.tenant, tt.route)
			if got == nil {
				t.Fatal("Lookup returned nil")
			}
			if got.Capacity != tt.want {
				t.Errorf("Lookup(%q, %q) = %+v, want capacity %d", tt.tenant, tt.route, *got, tt.want)
			}
		})
	}
}

func TestStoreState(t *testing.T) {
	s := NewStore(defaultRule)
	if s.Loaded() || s.Current() != nil || s.Version() != 0 || !s.LoadedAt().IsZero() {
		t.Fatalf("new store: Loaded %v, Current %v, Version %d, LoadedAt %v", s.Loaded(), s.Current(), s.Version(), s.LoadedAt())
	}
	before := time.Now()
	set := snapshot.Build([]snapshot.Rule{rule("a", "b", 5)}, 7)
	s.Replace(set)
	if !s.Loaded() || s.Current() != set || s.Version() != 7 {
		t.Fatalf("after Replace: Loaded %v, Current %p (want %p), Version %d", s.Loaded(), s.Current(), set, s.Version())
	}
	if at := s.LoadedAt(); at.Before(before) || at.After(time.Now()) {
		t.Errorf("LoadedAt %v not between %v and now", at, before)
	}
	s.Replace(nil)
	if s.Loaded() || s.Current() != nil || s.Lookup("a", "b").Capacity != 20 {
		t.Errorf("Replace(nil) did not unload the store")
	}
}

// TestStoreConcurrentReplace checks, under -race, that lookups during
// replacements always see one whole snapshot or the other.
func TestStoreConcurrentReplace(t *testing.T) {
	s := NewStore(defaultRule)
	var sets [2]*snapshot.Set
	for i := range sets {
		c := int64(100 * (i + 1)) // every rule of set i has capacity c
		sets[i] = shardedSet(t, 4, int64(i+1), []snapshot.Rule{
			rule("acme", "orders", c), rule("*", "reports", c), rule("*", "*", c),
		})
	}
	s.Replace(sets[0])

	var stop atomic.Bool
	var lookups atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				tenant := fmt.Sprintf("t%d", i%50)
				r := s.Lookup(tenant, "reports")
				if r == nil || (r.Capacity != 100 && r.Capacity != 200) {
					errs <- fmt.Errorf("Lookup(%s, reports) = %+v", tenant, r)
					return
				}
				_ = s.Version()
				_ = s.LoadedAt()
				lookups.Add(1)
			}
		}()
	}
	// Swap until the readers have done plenty of lookups during the swaps.
	for i := 0; i < 2000 || lookups.Load() < 50_000; i++ {
		s.Replace(sets[i%2])
		if i%64 == 0 {
			runtime.Gosched()
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStoreLookupDoesNotAllocate(t *testing.T) {
	s := NewStore(defaultRule)
	s.Replace(shardedSet(t, 4, 1, []snapshot.Rule{rule("acme", "orders", 1), rule("*", "reports", 3)}))
	for _, q := range [][2]string{{"acme", "orders"}, {"globex", "reports"}, {"globex", "other"}} {
		if n := testing.AllocsPerRun(1000, func() { s.Lookup(q[0], q[1]) }); n != 0 {
			t.Errorf("Lookup(%s, %s) allocates %v times", q[0], q[1], n)
		}
	}
}

// BenchmarkStoreLookup measures a lookup in a 100,000-rule snapshot; run
// with -benchmem to see that it does not allocate.
func BenchmarkStoreLookup(b *testing.B) {
	var rules []snapshot.Rule
	for i := 0; i < 100_000; i++ {
		rules = append(rules, rule(fmt.Sprintf("tenant-%d", i/10), fmt.Sprintf("route-%d", i%10), 1))
	}
	rules = append(rules, rule("*", "*", 2))
	s := NewStore(defaultRule)
	s.Replace(snapshot.Build(rules, 1))
	queries := [][2]string{{"tenant-42", "route-3"}, {"tenant-42", "other"}, {"nobody", "route-1"}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		q := queries[i%len(queries)]
		if s.Lookup(q[0], q[1]) == nil {
			b.Fatal("nil rule")
		}
	}
}
