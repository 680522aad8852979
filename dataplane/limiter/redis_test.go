package limiter

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// redisTime reads the server's clock, the one the script uses.
func redisTime(t *testing.T, c redis.Cmdable) time.Time {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// hammer sends n concurrent requests for one token each through limiters
// (round robin) and returns how many were allowed. Every error fails the test.
func hammer(t *testing.T, limiters []Limiter, b Bucket, n int) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := limiters[i%len(limiters)].Allow(context.Background(), b, 1)
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return allowed.Load()
}

func TestConcurrentRequestsAdmitExactlyCapacity(t *testing.T) {
	srv := redistest.Start(t)
	// One token per hour: nothing refills during the test.
	b := Bucket{Key: Key("shop-a", "create-order"), Capacity: 37, RefillTokens: 1, RefillPeriodMs: 3600_000}
	for _, instances := range []int{1, 4} {
		t.Run(strconv.Itoa(instances)+" instances", func(t *testing.T) {
			if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			var ls []Limiter
			for range instances {
				ls = append(ls, allow(NewRedis(srv.Client(t))))
			}
			if got := hammer(t, ls, b, 1000); got != int64(b.Capacity) {
				t.Fatalf("1000 concurrent requests through %d instances admitted %d, want exactly %d", instances, got, int64(b.Capacity))
			}
		})
	}
}

func TestRefillOverRealTime(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := allow(NewRedis(c))
	// The capacity holds a second of refill: a loop that stalls (a loaded
	// machine) for less than that loses no token to a full bucket.
	const capacity, perSecond = 40, 40
	b := Bucket{Key: Key("t", "refill"), Capacity: capacity, RefillTokens: perSecond, RefillPeriodMs: 1000}

	// Take tokens as fast as one client can for about a second. Tokens are
	// conserved: what was admitted plus what the bucket holds at the end
	// is the capacity plus the refill since the bucket was made (the first
	// call), bracketed by Redis's clock. The bucket never fills up while
	// the loop runs (a second of refill fits), so no token is lost to it,
	// however slowly a loaded machine runs the loop; and the loop must have
	// taken tokens as they came (at least the refill of the last half of
	// the run).
	before := redisTime(t, c)
	var allowed int64
	var first time.Time
	for time.Since(before) < 1200*time.Millisecond {
		d, err := l.Allow(context.Background(), b, 1)
		if err != nil {
			t.Fatal(err)
		}
		if first.IsZero() {
			first = redisTime(t, c)
		}
		if d.Allowed {
			allowed++
		}
	}
	last := redisTime(t, c)
	st, err := Peek(context.Background(), c, b.Key)
	if err != nil || !st.Found {
		t.Fatalf("bucket state: %+v %v", st, err)
	}
	held := min(capacity, st.Tokens+perSecond*float64(last.UnixMilli()-st.UpdatedMs)/1000)
	got := float64(allowed) + held
	lo := float64(capacity) + perSecond*last.Sub(first).Seconds() - 1 // ms clock granularity
	hi := float64(capacity) + perSecond*last.Sub(before).Seconds() + 1
	if got < lo || got > hi {
		t.Fatalf("admitted %d + %.1f held at the end = %.1f over %v, want capacity + rate x elapsed: [%.1f, %.1f]",
			allowed, held, got, last.Sub(before), lo, hi)
	}
	if float64(allowed) < float64(capacity)+perSecond*0.5 {
		t.Fatalf("admitted %d, want at least the capacity and half the refill of the run: tokens were not taken as they came", allowed)
	}
}

func TestTTLAndIdleBucketComesBackFull(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := allow(NewRedis(c))
	ctx := context.Background()

	// Full refill takes 100 s: the TTL is twice that.
	slow := Bucket{Key: Key("t", "slow"), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 1000}
	if _, err := l.Allow(ctx, slow, 1); err != nil {
		t.Fatal(err)
	}
	hash, _ := Storage(slow.Key)
	ttl, err := c.PTTL(ctx, hash).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 190*time.Second || ttl > 200*time.Second {
		t.Fatalf("PTTL = %v, want about twice the full refill time (200s)", ttl)
	}

	// A fast bucket expires after the one-second minimum and comes back full.
	fast := Bucket{Key: Key("t", "fast"), Capacity: 3, RefillTokens: 1, RefillPeriodMs: 100_000}
	for range 3 {
		if d, err := l.Allow(ctx, fast, 1); err != nil || !d.Allowed {
			t.Fatalf("draining: %+v, %v", d, err)
		}
	}
	d, err := l.Allow(ctx, fast, 1)
	if err != nil || d.Allowed {
		t.Fatalf("empty bucket allowed a request: %+v, %v", d, err)
	}
	// Expire it by hand, as Redis would after the TTL (which here is 600 s:
	// the point is that a missing key means a full bucket).
	if err := c.Del(ctx, hash).Err(); err != nil {
		t.Fatal(err)
	}
	d, err = l.Allow(ctx, fast, 1)
	if err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after expiry: %+v, %v; want allowed with 2 remaining", d, err)
	}

	// And a real expiry: a tiny bucket's key (its tenant's only bucket) is
	// gone after its TTL.
	tiny := Bucket{Key: Key("other", "tiny"), Capacity: 1, RefillTokens: 10, RefillPeriodMs: 1000}
	tinyHash, _ := Storage(tiny.Key)
	if _, err := l.Allow(ctx, tiny, 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Exists(ctx, tinyHash).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("an idle bucket never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRetryAfterIsTheRealWait(t *testing.T) {
	srv := redistest.Start(t)
	l := allow(NewRedis(srv.Client(t)))
	ctx := context.Background()
	// One token every 1.5 s.
	b := Bucket{Key: Key("t", "retry"), Capacity: 1, RefillTokens: 2, RefillPeriodMs: 3000}
	if d, err := l.Allow(ctx, b, 1); err != nil || !d.Allowed {
		t.Fatalf("first request: %+v, %v", d, err)
	}
	d, err := l.Allow(ctx, b, 1)
	if err != nil || d.Allowed {
		t.Fatalf("second request: %+v, %v; want rejected", d, err)
	}
	if d.RetryAfter <= 1000*time.Millisecond || d.RetryAfter > 1500*time.Millisecond {
		t.Fatalf("RetryAfter = %v, want just under 1.5s", d.RetryAfter)
	}
	if d.Remaining != 0 {
		t.Fatalf("Remaining %d", d.Remaining)
	}
	time.Sleep(d.RetryAfter)
	if d, err := l.Allow(ctx, b, 1); err != nil || !d.Allowed {
		t.Fatalf("after waiting RetryAfter: %+v, %v; want allowed", d, err)
	}
}

func TestCostAboveCapacityNeverPasses(t *testing.T) {
	srv := redistest.Start(t)
	l := allow(NewRedis(srv.Client(t)))
	b := Bucket{Key: Key("t", "big"), Capacity: 5, RefillTokens: 5, RefillPeriodMs: 1000}
	d, err := l.Allow(context.Background(), b, 6)
	if err != nil || d.Allowed || d.RetryAfter >= 0 {
		t.Fatalf("%+v, %v; want rejected with a negative RetryAfter", d, err)
	}
}

func TestTakeGrantsBatches(t *testing.T) {
	srv := redistest.Start(t)
	l := allow(NewRedis(srv.Client(t)))
	ctx := context.Background()
	b := Bucket{Key: Key("t", "batch"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
	cases := []struct {
		cost, want    int64
		granted, left int64
	}{
		{1, 4, 4, 6},  // a batch of 4
		{1, 10, 6, 0}, // the rest, fewer than wanted
		{1, 1, 0, 0},  // nothing left
	}
	for _, c := range cases {
		r, err := l.Take(ctx, b, c.cost, c.want)
		if err != nil {
			t.Fatal(err)
		}
		if r.Granted != c.granted || r.Remaining != c.left {
			t.Fatalf("Take(%d, %d) = %+v, want granted %d remaining %d", c.cost, c.want, r, c.granted, c.left)
		}
	}
}

func TestScriptFlushMidRunRecovers(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := allow(NewRedis(c))
	b := Bucket{Key: Key("t", "flush"), Capacity: 300, RefillTokens: 1, RefillPeriodMs: 3600_000}
	stop := flushScripts(c)
	got := hammer(t, []Limiter{l, allow(NewRedis(srv.Client(t)))}, b, 1000)
	flushes := stop()
	if got != int64(b.Capacity) {
		t.Fatalf("admitted %d with SCRIPT FLUSH running, want exactly %d", got, int64(b.Capacity))
	}
	if flushes == 0 {
		t.Fatal("no SCRIPT FLUSH happened during the run")
	}
}

// flushScripts runs SCRIPT FLUSH on c about every millisecond until stop
// is called; stop returns how many flushes Redis carried out.
func flushScripts(c *redis.Client) (stop func() int64) {
	done := make(chan struct{})
	var flushes atomic.Int64
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := c.ScriptFlush(context.Background()).Err(); err == nil {
				flushes.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return func() int64 {
		close(done)
		<-exited
		return flushes.Load()
	}
}

func FuzzKeyIsUnambiguous(f *testing.F) {
	f.Add("a", "b:c", "a:b", "c")
	f.Add("shop-a", "x", "shop", "a-x")
	f.Fuzz(func(t *testing.T, t1, r1, t2, r2 string) {
		valid := func(s string) bool { return validID(s) }
		if !valid(t1) || !valid(r1) || !valid(t2) || !valid(r2) {
			return
		}
		if (Key(t1, r1) == Key(t2, r2)) != (t1 == t2 && r1 == r2) {
			t.Fatalf("Key(%q,%q)=%q and Key(%q,%q)=%q", t1, r1, Key(t1, r1), t2, r2, Key(t2, r2))
		}
	})
}

// TestReplyCarriesStoredState: every reply of the script carries the
// bucket's state as Redis stores it after the call, to the bit: the
// tokens a take left and its time, a refusal's unchanged state (not
// refilled: later calls refill from it), a charge into debt, a bucket
// Redis holds nothing of (full, as of the call).
func TestReplyCarriesStoredState(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	b := Bucket{Key: Key("state", "r"), Capacity: 7.5, RefillTokens: 3, RefillPeriodMs: 7000,
		Quota: Quota{Key: QuotaKey("state", "r", ""), Limit: 100, Whole: 100, Start: 0, Switch: 1 << 50, End: 1<<50 + 1}}
	charge := b
	charge.Charge, charge.MaxDebt = true, 10
	check := func(what string, r TakeResult, now int64) {
		t.Helper()
		st, err := Peek(ctx, rc, b.Key)
		if err != nil {
			t.Fatal(err)
		}
		want := bucketState{stored: st.Tokens, storedMs: st.UpdatedMs, nowMs: now}
		if !st.Found {
			want = bucketState{stored: b.Capacity, storedMs: now, nowMs: now}
		}
		if r.state != want {
			t.Errorf("%s: the reply says %+v, Redis stores %+v", what, r.state, want)
		}
	}
	r, now := run(t, rc, &b, 8, 8)
	check("a refusal of a bucket Redis holds nothing of", r, now)
	r, now = run(t, rc, &b, 5, 5)
	check("a take", r, now)
	r, now = run(t, rc, &b, 7, 7)
	check("a refusal", r, now)
	r, now = run(t, rc, &charge, 9, 9)
	check("a charge into debt", r, now)
	if r.state.stored >= 0 || !r.Quota.Set {
		t.Errorf("after the charge: %+v, want a debt and the quota's part", r)
	}
}
