package top

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a clock the test moves.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time         { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration)    { c.ns.Add(int64(d)) }
func (c *clock) tracker(k int) *Tracker { return New(Options{K: k, Clock: c.now}) }
func keyOf(i uint64) Key                { return Key{Tenant: fmt.Sprintf("tenant-%d", i), Route: routes[i%3]} }
func (c *clock) tracker6(k int) *Tracker {
	return New(Options{K: k, Window: time.Minute, Slots: 6, Clock: c.now})
}

var routes = []string{"create-order", "list-orders", "export"}

// zipfLoad sends n rejections drawn from a Zipf distribution over keys
// (s = 1.1: a few tenants take most rejections, thousands take a few each)
// and one admission per fourth rejection, spread over 50 s of the clock
// (every slot of the window), to the trackers in turn at random; it returns
// the true rejection counts.
func zipfLoad(c *clock, trackers []*Tracker, n, keys int, seed uint64) map[Key]int64 {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	z := rand.NewZipf(rng, 1.1, 1, uint64(keys-1))
	truth := map[Key]int64{}
	step := 50 * time.Second / time.Duration(n)
	for i := range n {
		k := keyOf(z.Uint64())
		tr := trackers[rng.IntN(len(trackers))]
		tr.Observe(k.Tenant, k.Route, false)
		truth[k]++
		if i%4 == 0 {
			tr.Observe(k.Tenant, k.Route, true)
		}
		c.add(step)
	}
	return truth
}

// checkBound checks the documented bound of r against the true counts:
// every listed pair's true count is in [Rejections - Error, Rejections],
// Error <= Floor <= R/K, and every pair refused more than Floor times is
// listed. It returns the largest error of the ten pairs refused most.
func checkBound(t *testing.T, r Report, truth map[Key]int64, slots int) float64 {
	t.Helper()
	var total int64
	for _, n := range truth {
		total += n
	}
	if r.Rejections != total {
		t.Fatalf("Rejections = %d, want %d (exact)", r.Rejections, total)
	}
	if bound := float64(total) / float64(r.K); float64(r.Floor) > bound {
		t.Errorf("Floor %d above R/K = %.0f", r.Floor, bound)
	}
	listed := map[Key]bool{}
	worst := 0.0
	for i, e := range r.Entries {
		listed[e.Key] = true
		n := truth[e.Key]
		if n > e.Rejections || n < e.Rejections-e.Error {
			t.Errorf("%v: true %d outside [%d, %d]", e.Key, n, e.Rejections-e.Error, e.Rejections)
		}
		if e.Error > r.Floor {
			t.Errorf("%v: error %d above the floor %d", e.Key, e.Error, r.Floor)
		}
		if i < 10 {
			worst = max(worst, float64(e.Rejections-n)/float64(n))
		}
	}
	for k, n := range truth {
		if n > r.Floor && !listed[k] {
			t.Errorf("%v was refused %d times, more than the floor %d, but is not listed", k, n, r.Floor)
		}
	}
	return worst
}

// TestTopZipf: the top-K's accuracy against the true counts under a Zipf
// load, on one gateway and merged over three.
func TestTopZipf(t *testing.T) {
	const n, keys, k = 300_000, 20_000, 64
	for _, gateways := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d gateways", gateways), func(t *testing.T) {
			c := newClock()
			var trs []*Tracker
			var reports []Report
			for range gateways {
				trs = append(trs, c.tracker6(k))
			}
			truth := zipfLoad(c, trs, n, keys, uint64(gateways))
			for _, tr := range trs {
				reports = append(reports, tr.Report(0))
			}
			r, err := Merge(reports, 0)
			if err != nil {
				t.Fatal(err)
			}
			worst := checkBound(t, r, truth, 6)
			top := r.Entries[0]
			t.Logf("%d rejections over %d pairs (Zipf s=1.1), K=%d x 6 slots, %d gateway(s): floor %d (R/K = %d), %d pairs listed, top pair %v: %d (true %d), worst overestimate of the top 10: %.2f%%",
				n, len(truth), k, gateways, r.Floor, n/k, len(r.Entries), top.Key, top.Rejections, truth[top.Key], 100*worst)
			if r.Admissions != n/4 {
				t.Errorf("Admissions = %d, want %d", r.Admissions, n/4)
			}
			if top.Admissions == 0 || top.Admissions > truth[top.Key] {
				t.Errorf("the top pair's admissions %d: want a lower bound of its %d", top.Admissions, truth[top.Key]/4+1)
			}
			if math.Abs(r.RefusedTenants-float64(len(truth)))/float64(len(truth)) > 0.05 {
				t.Errorf("refused pairs' tenants: estimate %.0f, true %d", r.RefusedTenants, len(truth))
			}
		})
	}
}

// TestTopLimit: a report cut to its first entries raises the floor to
// cover the pairs cut off.
func TestTopLimit(t *testing.T) {
	c := newClock()
	tr := c.tracker(16)
	truth := zipfLoad(c, []*Tracker{tr}, 20_000, 500, 7)
	full, short := tr.Report(0), tr.Report(5)
	if len(short.Entries) != 5 || short.Entries[4] != full.Entries[4] {
		t.Fatalf("the first 5 of %d: %v", len(full.Entries), short.Entries)
	}
	if short.Floor < full.Entries[5].Rejections {
		t.Errorf("floor %d below the 6th pair's %d", short.Floor, full.Entries[5].Rejections)
	}
	checkBound(t, short, truth, 6)
}

// TestTopWindowSlides: rejections leave the report once their slot is out
// of the window, and a slot is reused without its old counts.
func TestTopWindowSlides(t *testing.T) {
	c := newClock()
	tr := c.tracker6(8)
	for range 5 {
		tr.Observe("early", "r", false)
	}
	c.add(30 * time.Second)
	for range 3 {
		tr.Observe("late", "r", false)
	}
	tr.Observe("late", "r", true)
	r := tr.Report(0)
	if r.Rejections != 8 || r.Admissions != 1 || len(r.Entries) != 2 || r.Entries[0].Tenant != "early" || r.Entries[0].Rejections != 5 {
		t.Fatalf("after 30s: %+v", r)
	}
	if r.WindowSeconds < 50 || r.WindowSeconds >= 60 {
		t.Errorf("window %vs, want [50, 60)", r.WindowSeconds)
	}
	c.add(40 * time.Second) // "early" is 70s old, "late" 40s
	r = tr.Report(0)
	if r.Rejections != 3 || len(r.Entries) != 1 || r.Entries[0] != (Entry{Key: Key{"late", "r"}, Rejections: 3, Admissions: 1}) {
		t.Fatalf("after 70s: %+v", r)
	}
	if math.Round(r.RefusedTenants) != 1 {
		t.Errorf("refused tenants %v, want 1", r.RefusedTenants)
	}
	c.add(time.Minute)
	tr.Observe("new", "r", false)
	if r = tr.Report(0); r.Rejections != 1 || len(r.Entries) != 1 || r.Entries[0].Tenant != "new" {
		t.Fatalf("after 130s: %+v", r)
	}
}

// TestHLLAccuracy: the distinct count of refused tenants within 4% (2.5
// standard errors) from 10 to 200,000 tenants, alone and merged.
func TestHLLAccuracy(t *testing.T) {
	for _, n := range []int{10, 100, 1000, 10_000, 200_000} {
		var a, b hll
		for i := range n {
			name := fmt.Sprintf("tenant-%d", i)
			a.add(name)
			if i%2 == 0 {
				b.add(name) // half of them seen by a second gateway too
			}
		}
		b.add("only-on-b")
		got := a.estimate()
		if e := math.Abs(got-float64(n)) / float64(n); e > 0.04 {
			t.Errorf("%d tenants: estimate %.0f (%.1f%% off)", n, got, 100*e)
		}
		a.merge(&b)
		if m := a.estimate(); math.Abs(m-float64(n+1))/float64(n+1) > 0.04 {
			t.Errorf("%d tenants merged: estimate %.0f", n+1, m)
		}
		t.Logf("%d tenants: estimate %.0f (%+.2f%%)", n, got, 100*(got-float64(n))/float64(n))
	}
}

func TestMergeRefusesBadReports(t *testing.T) {
	good := newClock().tracker(4).Report(0)
	for _, c := range []struct {
		name string
		r    Report
	}{
		{"sketch not base64", Report{RefusedTenantsSketch: "%%%"}},
		{"sketch too short", Report{RefusedTenantsSketch: "AAAA"}},
		{"error above the count", Report{Entries: []Entry{{Key: Key{"a", "b"}, Rejections: 1, Error: 2}}}},
		{"negative admissions", Report{Entries: []Entry{{Key: Key{"a", "b"}, Admissions: -1}}}},
	} {
		if _, err := Merge([]Report{good, c.r}, 0); err == nil {
			t.Errorf("%s: merged", c.name)
		}
	}
	var h hll
	h[7] = 60
	bad := Report{RefusedTenantsSketch: h.encode()}
	if _, err := Merge([]Report{bad}, 0); err == nil {
		t.Error("a register above 53 merged")
	}
}

// TestTrackerConcurrent runs Observe and Report from several goroutines
// (for the race detector) and checks the exact totals.
func TestTrackerConcurrent(t *testing.T) {
	tr := New(Options{K: 8})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				tr.Observe(fmt.Sprintf("t-%d", i%20), "r", (i+g)%3 == 0)
				if i%500 == 0 {
					tr.Report(3)
				}
			}
		})
	}
	wg.Wait()
	if r := tr.Report(0); r.Rejections+r.Admissions != 8000 {
		t.Errorf("counted %d decisions, want 8000", r.Rejections+r.Admissions)
	}
}

// BenchmarkObserve: the cost a decision adds to the gateway's hot path.
func BenchmarkObserve(b *testing.B) {
	tr := New(Options{})
	keys := make([]Key, 1000)
	for i := range keys {
		keys[i] = keyOf(uint64(i))
	}
	b.Run("admitted", func(b *testing.B) {
		i := 0
		for b.Loop() {
			k := keys[i%len(keys)]
			tr.Observe(k.Tenant, k.Route, true)
			i++
		}
	})
	b.Run("rejected", func(b *testing.B) {
		i := 0
		for b.Loop() {
			k := keys[i%len(keys)]
			tr.Observe(k.Tenant, k.Route, false)
			i++
		}
	})
}
