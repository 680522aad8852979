package identity

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestFailureLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewFailureLimiter(FailureOptions{Burst: 3, PerSecond: 1, MaxAddresses: 2, Clock: func() time.Time { return now }})
	const a, b = "192.0.2.1:1000", "192.0.2.2:1000"
	if _, blocked := l.Blocked(a); blocked {
		t.Fatal("blocked before any failure")
	}
	for i := range 3 {
		if _, ok := l.Fail(a); !ok {
			t.Fatalf("failure %d refused, burst is 3", i+1)
		}
	}
	if wait, blocked := l.Blocked("192.0.2.1:2000"); !blocked || wait != time.Second {
		t.Fatalf("after 3 failures (another port of the same IP): blocked=%v wait=%v, want true 1s", blocked, wait)
	}
	if _, ok := l.Fail(a); ok {
		t.Fatal("a 4th failure was allowed")
	}
	if _, blocked := l.Blocked(b); blocked {
		t.Fatal("another address is blocked")
	}
	now = now.Add(time.Second)
	if _, blocked := l.Blocked(a); blocked {
		t.Fatal("still blocked after a refill of one token")
	}
	// Full again after 3s: forgotten.
	now = now.Add(3 * time.Second)
	if _, blocked := l.Blocked(a); blocked || l.Len() != 0 {
		t.Fatalf("blocked=%v, %d tracked after a full refill, want 0", blocked, l.Len())
	}

	// IPv6 hosts share their /64; IPv4-mapped addresses are IPv4.
	for _, addr := range []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:2", "[2001:db8:1:2::3]:3"} {
		l.Fail(addr)
	}
	if _, blocked := l.Blocked("[2001:db8:1:2::77]:4"); !blocked {
		t.Error("another host of the same /64 is not blocked")
	}
	if _, blocked := l.Blocked("[2001:db8:1:3::1]:4"); blocked {
		t.Error("another /64 is blocked")
	}
	if a, _ := ClientAddr("[::ffff:192.0.2.9]:80"); a.String() != "192.0.2.9" {
		t.Errorf("IPv4-mapped address keyed as %v", a)
	}
}

// TestFailureLimiterBounded: failures from ten times more addresses than
// MaxAddresses, each of its own /24, fill both tables to MaxAddresses and
// no further; once full, a failure allocates nothing, so memory stays
// bounded however long it goes on. A table whose buckets are all full again
// releases its memory.
func TestFailureLimiterBounded(t *testing.T) {
	const max = 1000
	now := time.Unix(1000, 0)
	l := NewFailureLimiter(FailureOptions{Burst: 2, PerSecond: 0.001, MaxAddresses: max, Clock: func() time.Time { return now }})
	addrs := make([]string, 12*max)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.1:1", i/256, i%256)
	}
	addr := func(i int) string { return addrs[i] }
	for i := range 10 * max {
		l.Fail(addr(i))
	}
	if l.addrs.len() != max || l.prefixes.len() != max || len(l.addrs.entries) != max || len(l.prefixes.entries) != max {
		t.Fatalf("%d addresses (%d slots), %d prefixes (%d slots), want %d each",
			l.addrs.len(), len(l.addrs.entries), l.prefixes.len(), len(l.prefixes.entries), max)
	}
	i := 10 * max
	if n := testing.AllocsPerRun(1000, func() { l.Fail(addr(i)); i++ }); n != 0 {
		t.Errorf("a failure at capacity allocates %v times", n)
	}
	if l.addrs.len() != max || l.prefixes.len() != max {
		t.Fatalf("%d addresses, %d prefixes after 1,000 more, want %d each", l.addrs.len(), l.prefixes.len(), max)
	}
	// 2,000 s later every bucket is full again: forgotten, memory released.
	now = now.Add(2000 * time.Second)
	if _, blocked := l.Blocked(addr(0)); blocked || l.Len() != 0 || l.prefixes.len() != 0 || l.addrs.entries != nil || l.prefixes.index != nil {
		t.Fatalf("after a full refill: blocked=%v, %d addresses, %d prefixes tracked", blocked, l.Len(), l.prefixes.len())
	}
	if NewFailureLimiter(FailureOptions{}) != nil {
		t.Fatal("burst 0 does not disable the limiter")
	}
	var off *FailureLimiter
	if _, ok := off.Fail("x"); !ok {
		t.Fatal("a nil limiter refused a failure")
	}
}

// TestFailureLimiterMemory: with both tables full at the default 65,536
// buckets each, the limiter holds at most 128 bytes per bucket (the doc
// comment and the docs say about 90, 12 MB in all), measured as the heap
// freed when it goes.
func TestFailureLimiterMemory(t *testing.T) {
	const max = 65536
	addrs := make([]string, 2*max)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("%d.%d.%d.1:1", 10+i/max, i/256%256, i%256) // each its own /24
	}
	l := NewFailureLimiter(FailureOptions{Burst: 2, PerSecond: 0.001, MaxAddresses: max})
	for _, a := range addrs {
		l.Fail(a)
	}
	if l.addrs.len() != max || l.prefixes.len() != max {
		t.Fatalf("%d addresses, %d prefixes, want %d each", l.addrs.len(), l.prefixes.len(), max)
	}
	var full, gone runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&full)
	runtime.KeepAlive(l)
	l = nil
	runtime.GC()
	runtime.ReadMemStats(&gone)
	perBucket := float64(full.HeapAlloc-gone.HeapAlloc) / (2 * max)
	t.Logf("%.0f bytes per bucket, %.1f MB for both tables", perBucket, float64(full.HeapAlloc-gone.HeapAlloc)/1e6)
	if perBucket > 128 {
		t.Errorf("%.0f bytes per bucket, want at most 128", perBucket)
	}
	runtime.KeepAlive(addrs)
}

// TestFailureLimiterConcurrent: Fail and Blocked from many goroutines on a
// small table (evictions all the time) keep both tables within bounds (run
// with -race).
func TestFailureLimiterConcurrent(t *testing.T) {
	l := NewFailureLimiter(FailureOptions{Burst: 3, PerSecond: 1, MaxAddresses: 8})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				addr := fmt.Sprintf("10.%d.%d.1:1", g, i%50)
				if _, blocked := l.Blocked(addr); !blocked {
					l.Fail(addr)
				}
			}
		})
	}
	wg.Wait()
	if l.Len() > 8 || l.prefixes.len() > 8 {
		t.Fatalf("%d addresses, %d prefixes, want at most 8 each", l.Len(), l.prefixes.len())
	}
}

func TestFailureLimiterNoAllocsWhenIdle(t *testing.T) {
	l := NewFailureLimiter(FailureOptions{Burst: 3, PerSecond: 1, MaxAddresses: 10})
	if n := testing.AllocsPerRun(100, func() { l.Blocked("192.0.2.1:1000") }); n != 0 {
		t.Errorf("Blocked allocates %v times", n)
	}
	l.Fail("192.0.2.1:1000")
	if n := testing.AllocsPerRun(100, func() { l.Blocked("192.0.2.7:1000") }); n != 0 {
		t.Errorf("Blocked with a tracked address allocates %v times", n)
	}
}

// TestFailureLimiterFullTable: once the address table is full, a client is
// refused only for its own failures, or for those of its prefix (IPv4 /24,
// IPv6 /56) in the prefix table where evicted addresses leave them, and
// only when the prefix has spent its burst; an address from a prefix
// without failures is never refused. Burst 2, one failure back per second;
// the clock moves 1 ms per failure, then by advance.
func TestFailureLimiterFullTable(t *testing.T) {
	const a, b, c = "192.0.2.1:1", "198.51.100.1:1", "203.0.113.1:1"
	const freshV4, freshV6 = "100.64.0.1:1", "[2001:db8:99::1]:1"
	cases := []struct {
		name     string
		max      int           // MaxAddresses
		burst    int           // 2 unless set
		failures []string      // in order
		advance  time.Duration // after the failures
		refused  []string      // Blocked must refuse these
		admitted []string      // and admit these
	}{
		{
			name: "full of spent addresses: fresh addresses pass", max: 2,
			failures: times(a, 2, b, 2, c, 3),
			refused:  []string{a, b, c},
			admitted: []string{freshV4, freshV6, "203.0.113.9:1" /* c's /24, c still tracked */},
		},
		{
			name: "not full: another address of the same /24 passes", max: 4,
			failures: times(a, 2),
			refused:  []string{a, "192.0.2.1:2" /* another port */},
			admitted: []string{"192.0.2.2:1", freshV4},
		},
		{
			name: "an evicted address's failures stay with its /24", max: 1,
			failures: times(a, 2, b, 1),
			refused:  []string{a, "192.0.2.200:1"},
			admitted: []string{b, freshV4, freshV6},
		},
		{
			name: "a prefix below its burst refuses nobody", max: 1, burst: 3,
			failures: times(a, 1, b, 1),
			admitted: []string{a, "192.0.2.7:1", b},
		},
		{
			name: "the least recent failure leaves the table first", max: 2,
			failures: times(a, 1, b, 1, a, 1, c, 1),
			refused:  []string{a},
			admitted: []string{"192.0.2.7:1" /* a stayed */, "198.51.100.7:1" /* b left one failure */, b, c},
		},
		{
			name: "IPv6: aggregated by /56", max: 1,
			failures: times("[2001:db8:1:100::1]:1", 2, "[2001:db8:2::1]:1", 1),
			refused:  []string{"[2001:db8:1:100::1]:1", "[2001:db8:1:1ff::5]:1"},
			admitted: []string{"[2001:db8:1:200::1]:1" /* next /56 */, "[2001:db8:2::1]:1", freshV4},
		},
		{
			name: "refilled: address and prefix forgotten", max: 1,
			failures: times(a, 2, b, 2), advance: 2 * time.Second,
			admitted: []string{a, "192.0.2.200:1", b},
		},
		{
			name: "one failure earned back per second", max: 2,
			failures: times(a, 2), advance: time.Second,
			admitted: []string{a},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			burst := tc.burst
			if burst == 0 {
				burst = 2
			}
			l := NewFailureLimiter(FailureOptions{Burst: burst, PerSecond: 1, MaxAddresses: tc.max, Clock: func() time.Time { return now }})
			for _, addr := range tc.failures {
				l.Fail(addr)
				now = now.Add(time.Millisecond)
			}
			now = now.Add(tc.advance)
			for _, addr := range tc.refused {
				if wait, blocked := l.Blocked(addr); !blocked || wait <= 0 {
					t.Errorf("%s: blocked=%v wait=%v, want refused", addr, blocked, wait)
				}
			}
			for _, addr := range tc.admitted {
				if _, blocked := l.Blocked(addr); blocked {
					t.Errorf("%s refused, want admitted", addr)
				}
			}
		})
	}
}

// times lists each address of pairs (address, count) count times.
func times(pairs ...any) []string {
	var out []string
	for i := 0; i < len(pairs); i += 2 {
		for range pairs[i+1].(int) {
			out = append(out, pairs[i].(string))
		}
	}
	return out
}

// TestFailureLimiterFloodFromOnePrefix: 65,536 failures per second from
// the 65,536 /64s of one IPv6 /48 (each fails once a second, within its
// own budget) for four seconds keep the table of 4,096 addresses full. A
// fresh IPv4 address and fresh IPv6 addresses of another /48 are not
// refused (a valid key from them passes: Blocked is asked before the key),
// the table holds at most MaxAddresses, and the flood itself is refused
// once its /56s have spent their burst: of the last three seconds' requests
// all are refused but those of the /64s still in the table (4,096 a
// second) and about one a second per /56 that the prefixes earn back.
func TestFailureLimiterFloodFromOnePrefix(t *testing.T) {
	const max = 4096
	now := time.Unix(1000, 0)
	l := NewFailureLimiter(FailureOptions{Burst: 20, PerSecond: 1, MaxAddresses: max, Clock: func() time.Time { return now }})
	flood := func(i int) string { return fmt.Sprintf("[2001:db8:aaaa:%x::1]:443", i%65536) }
	refused := 0
	for i := range 4 * 65536 {
		// As the handler does: Blocked first, Fail only if not refused.
		if _, blocked := l.Blocked(flood(i)); blocked {
			if i >= 65536 { // the last three seconds
				refused++
			}
		} else {
			l.Fail(flood(i))
		}
		now = now.Add(time.Second / 65536)
	}
	if n := l.Len(); n > max {
		t.Fatalf("%d addresses tracked, want at most %d", n, max)
	}
	for _, fresh := range []string{"192.0.2.10:5000", "[2001:db8:bbbb::1]:5000", "[2001:db8:bbbb:1::2]:5000"} {
		if wait, blocked := l.Blocked(fresh); blocked {
			t.Errorf("%s (never failed) refused for %v during the flood", fresh, wait)
		}
	}
	if want := 3 * (65536 - max - 2*256); refused < want {
		t.Errorf("%d of the flood's last 3×65,536 requests refused, want at least %d", refused, want)
	}
	t.Logf("%d of the flood's last 3×65,536 requests refused", refused)
}

// BenchmarkFailureLimiter: the cost of one failure (Fail) and of the check
// before each request (Blocked) at 65,536 failures per second of the
// injected clock: one address failing again and again, and distinct /64s
// of one /48 with a full table of 16,384 addresses (Blocked: of an address
// from elsewhere, the clock stopped).
//
//	go test -run '^$' -bench FailureLimiter -benchmem ./dataplane/identity/
func BenchmarkFailureLimiter(b *testing.B) {
	addrs := make([]string, 65536)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("[2001:db8:aaaa:%x::1]:443", i)
	}
	// step is how far the clock moves at each reading.
	newLimiter := func(step time.Duration) *FailureLimiter {
		now := time.Unix(1000, 0)
		return NewFailureLimiter(FailureOptions{Burst: 20, PerSecond: 1, MaxAddresses: 16384, Clock: func() time.Time {
			now = now.Add(step)
			return now
		}})
	}
	b.Run("Fail/one address", func(b *testing.B) {
		l := newLimiter(time.Second / 65536)
		b.ReportAllocs()
		for b.Loop() {
			l.Fail(addrs[0])
		}
	})
	b.Run("Fail/flood", func(b *testing.B) {
		l := newLimiter(time.Second / 65536)
		for _, a := range addrs {
			l.Fail(a)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Fail(addrs[i%len(addrs)])
			i++
		}
	})
	b.Run("Blocked/flood", func(b *testing.B) {
		l := newLimiter(time.Second / 65536)
		for _, a := range addrs {
			l.Fail(a)
		}
		l.opts.Clock = func() time.Time { return time.Unix(1001, 0) } // the table stays full
		b.ReportAllocs()
		for b.Loop() {
			l.Blocked("192.0.2.10:5000")
		}
	})
}
