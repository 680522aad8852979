package limiter

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ now atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func takeN(l *Local, b Bucket, n int) (allowed int) {
	for range n {
		if l.Decide(b, 1).Allowed {
			allowed++
		}
	}
	return allowed
}

func TestLocalBucket(t *testing.T) {
	b := Bucket{Key: "k", Capacity: 100, RefillTokens: 50, RefillPeriodMs: 1000}
	cases := []struct {
		name     string
		replicas int
		steps    func(l *Local, c *fakeClock) int // returns admitted count
		want     int
	}{
		{"burst is the capacity", 1, func(l *Local, _ *fakeClock) int { return takeN(l, b, 500) }, 100},
		{"burst is capacity/N", 4, func(l *Local, _ *fakeClock) int { return takeN(l, b, 500) }, 25},
		{"at least one token of capacity", 1000, func(l *Local, _ *fakeClock) int { return takeN(l, b, 10) }, 1},
		{"refills at rate/N", 5, func(l *Local, c *fakeClock) int {
			takeN(l, b, 100) // drain 20
			c.Advance(2 * time.Second)
			return takeN(l, b, 100) // 2s x 10/s
		}, 20},
		{"refill never exceeds capacity", 1, func(l *Local, c *fakeClock) int {
			takeN(l, b, 100)
			c.Advance(time.Hour)
			return takeN(l, b, 1000)
		}, 100},
		{"a clock that goes back refills nothing", 1, func(l *Local, c *fakeClock) int {
			takeN(l, b, 100)
			c.Advance(-time.Minute)
			return takeN(l, b, 10)
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClock()
			l := NewLocal(LocalOptions{Clock: c.Now, Replicas: func() int { return tc.replicas }})
			if got := tc.steps(l, c); got != tc.want {
				t.Fatalf("admitted %d, want %d", got, tc.want)
			}
		})
	}
}

func TestLocalDecisionFields(t *testing.T) {
	c := newFakeClock()
	l := NewLocal(LocalOptions{Clock: c.Now, Replicas: func() int { return 2 }})
	b := Bucket{Key: "k", Capacity: 10, RefillTokens: 2, RefillPeriodMs: 1000} // 5 tokens, 1/s locally
	d := l.Decide(b, 1)
	if !d.Allowed || d.Remaining != 4 || d.Source != SourceLocal || d.ResetAfter != time.Second {
		t.Fatalf("first decision %+v", d)
	}
	takeN(l, b, 4)
	d = l.Decide(b, 1)
	if d.Allowed || d.RetryAfter != time.Second || d.Remaining != 0 {
		t.Fatalf("empty bucket decision %+v, want rejected with RetryAfter 1s", d)
	}
	c.Advance(400 * time.Millisecond)
	if d = l.Decide(b, 1); d.Allowed || d.RetryAfter != 600*time.Millisecond {
		t.Fatalf("after 400ms: %+v, want RetryAfter 600ms", d)
	}
	if d = l.Decide(b, 6); d.Allowed || d.RetryAfter >= 0 {
		t.Fatalf("cost above local capacity: %+v, want a negative RetryAfter", d)
	}
}

func TestLocalResizesWhenReplicasChange(t *testing.T) {
	c := newFakeClock()
	var n atomic.Int64
	n.Store(2)
	l := NewLocal(LocalOptions{Clock: c.Now, Replicas: func() int { return int(n.Load()) }})
	b := Bucket{Key: "k", Capacity: 100, RefillTokens: 100, RefillPeriodMs: 1000}
	if got := takeN(l, b, 25); got != 25 { // half of the 50 local tokens
		t.Fatalf("took %d", got)
	}
	n.Store(5) // capacity 20: half of it is left
	if got := takeN(l, b, 100); got != 10 {
		t.Fatalf("after N 2->5 admitted %d, want 10 (half of the new capacity 20)", got)
	}
	c.Advance(time.Second) // refills at 100/5 = 20/s, up to 20
	n.Store(1)             // capacity 100, full
	if got := takeN(l, b, 1000); got != 100 {
		t.Fatalf("after N 5->1 admitted %d, want 100", got)
	}
}

func TestLocalMemoryIsBounded(t *testing.T) {
	c := newFakeClock()
	l := NewLocal(LocalOptions{Clock: c.Now, MaxBuckets: 640})
	for i := range 100_000 {
		l.Decide(Bucket{Key: fmt.Sprintf("tenant-%d", i), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 1000}, 1)
		if i%1000 == 0 {
			c.Advance(time.Millisecond)
		}
	}
	if n := l.Len(); n > 640 {
		t.Fatalf("%d buckets held, want at most 640", n)
	}
	// A recently used, drained bucket survives a wave of idle full ones.
	hot := Bucket{Key: "hot", Capacity: 3, RefillTokens: 1, RefillPeriodMs: 3600_000}
	takeN(l, hot, 3)
	c.Advance(time.Hour * 2)
	for i := range 5000 {
		l.Decide(Bucket{Key: fmt.Sprintf("other-%d", i), Capacity: 1, RefillTokens: 1000, RefillPeriodMs: 1000}, 1)
		c.Advance(time.Millisecond) // each one is full again by the next insert
	}
	// Two of three tokens have refilled; an evicted bucket would be back full.
	if d := l.Decide(hot, 1); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("hot bucket after the wave: %+v; want allowed with 1 remaining (it must not be evicted)", d)
	}
}

func BenchmarkLocalDecide(b *testing.B) {
	l := NewLocal(LocalOptions{Replicas: func() int { return 3 }})
	bk := Bucket{Key: "rl:{shop-a}:create-order", Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000}
	b.ReportAllocs()
	for b.Loop() {
		l.Decide(bk, 1)
	}
}

// TestUnsureEmptiesAMirroredBucket: a bucket Redis last reported with 9
// tokens, then a call for it went unanswered: the other replicas may be
// draining it in Redis, so the local bucket starts empty (refilling at
// rate/N), not at 9/N. A later answer from Redis mirrors it again.
func TestUnsureEmptiesAMirroredBucket(t *testing.T) {
	clock := newFakeClock()
	l := NewLocal(LocalOptions{Replicas: func() int { return 1 }, Clock: clock.Now})
	b := Bucket{Key: Key("t", "unsure"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
	l.Observe(b, 9)
	l.Unsure(b)
	if got := takeN(l, b, 5); got != 0 {
		t.Fatalf("admitted %d after an unanswered call, want 0", got)
	}
	l.Observe(b, 4)
	if got := takeN(l, b, 10); got != 4 {
		t.Fatalf("admitted %d after Redis answered 4 remaining, want 4", got)
	}
}
