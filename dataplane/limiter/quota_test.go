package limiter

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// The quota's calendar is the gateway's (periods in the rule's zone); the
// period a call counts in is chosen by Redis's time. These tests move both
// by the same shift (Quota.ShiftMs, tests only) so that Redis's real clock
// lands where a test wants it, just before or after a month boundary.

// quotaAt is the quota the engine would pass at the gateway time at.
func quotaAt(t *testing.T, key string, limit int64, p snapshot.QuotaPeriod, zone string, at time.Time, shift time.Duration) Quota {
	t.Helper()
	loc, err := snapshot.LoadZone(zone)
	if err != nil {
		t.Fatal(err)
	}
	start, end := snapshot.PeriodAt(p, loc, at.Add(-QuotaSkew))
	_, next := snapshot.PeriodAt(p, loc, end)
	return Quota{Key: key, Limit: limit, Whole: limit, Start: start.UnixMilli(), Switch: end.UnixMilli(), End: next.UnixMilli(), ShiftMs: shift.Milliseconds()}
}

// run sends one script call and returns its result and Redis's time.
func run(t *testing.T, c redis.Scripter, b *Bucket, cost, want int64) (TakeResult, int64) {
	t.Helper()
	keys, args := ScriptCall(b, cost, want, 0, LayoutPacked)
	r, now, err := parseReply(tokenBucket.Run(context.Background(), c, keys, args...))
	if err != nil {
		t.Fatal(err)
	}
	return r, now
}

// counter reads a period's count in Redis (0 when the key is missing).
func counter(t *testing.T, c *redis.Client, key string, start time.Time) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), key+":"+strconv.FormatInt(start.UnixMilli(), 10)).Int64()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

// TestQuotaMonthBoundaryInRedisTime: a monthly quota of 3 in two zones, for
// a month with a daylight saving change, with Redis's time (shifted) ten
// seconds before the local month boundary, then ten seconds after it, then
// within milliseconds of it: the count starts over exactly at the boundary
// in Redis's time, a refused call waits exactly until it, and each period
// counts under its own key.
func TestQuotaMonthBoundaryInRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	cases := []struct {
		zone              string
		month, next, then string // starts of the month before the boundary, after it, and the one after
	}{
		{"Europe/Paris", "2027-03-01T00:00:00+01:00", "2027-04-01T00:00:00+02:00", "2027-05-01T00:00:00+02:00"},
		{"America/New_York", "2026-11-01T00:00:00-04:00", "2026-12-01T00:00:00-05:00", "2027-01-01T00:00:00-05:00"},
	}
	for _, tc := range cases {
		t.Run(tc.zone, func(t *testing.T) {
			month, boundary, then := mustParse(t, tc.month), mustParse(t, tc.next), mustParse(t, tc.then)
			key := QuotaKey("tz-"+tc.zone[:6], "r", "")
			b := Bucket{Key: Key("tz-"+tc.zone[:6], "r"), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 3600_000}
			at := func(offset time.Duration) time.Duration {
				shift := boundary.Add(offset).Sub(redisTime(t, c))
				b.Quota = quotaAt(t, key, 3, snapshot.QuotaMonth, tc.zone, time.Now().Add(shift), shift)
				return shift
			}
			shift := at(-10 * time.Second)
			for i := range 3 {
				r, now := run(t, c, &b, 1, 1)
				qnow := now + shift.Milliseconds()
				if r.Granted != 1 || r.Quota.Remaining != int64(2-i) || qnow+r.Quota.ResetMs != boundary.UnixMilli() {
					t.Fatalf("March call %d: %+v at %d, want granted with reset at the boundary %d", i, r, qnow, boundary.UnixMilli())
				}
			}
			r, now := run(t, c, &b, 1, 1)
			if qnow := now + shift.Milliseconds(); r.Granted != 0 || !r.Quota.Short || r.WaitMs != boundary.UnixMilli()-qnow || r.Remaining != 97 {
				t.Fatalf("4th call: %+v, want refused until the boundary (%d ms), the bucket untouched", r, boundary.UnixMilli()-qnow)
			}
			shift = at(10 * time.Second)
			for i := range 4 {
				r, now := run(t, c, &b, 1, 1)
				qnow := now + shift.Milliseconds()
				if (r.Granted == 1) != (i < 3) || qnow+r.Quota.ResetMs != then.UnixMilli() {
					t.Fatalf("after the boundary, call %d: %+v, want %v with reset at %v", i, r, i < 3, then)
				}
			}
			if m, n := counter(t, c, key, month), counter(t, c, key, boundary); m != 3 || n != 3 {
				t.Fatalf("counters: %d in the old month, %d in the new, want 3 and 3", m, n)
			}
			boundaryExact(t, c, b, key, tc.zone, boundary, then)
		})
	}
}

// boundaryExact sends calls with Redis's time a few milliseconds around the
// boundary: each counts in the period that holds its Redis time.
func boundaryExact(t *testing.T, c *redis.Client, b Bucket, key, zone string, boundary, then time.Time) {
	t.Helper()
	key += "-edge"
	month := mustParse(t, "2000-01-01T00:00:00Z")
	for i := range 40 {
		shift := boundary.Add(time.Duration(i%8-4) * time.Millisecond).Sub(redisTime(t, c))
		b.Quota = quotaAt(t, key, 1000, snapshot.QuotaMonth, zone, time.Now().Add(shift), shift)
		month = time.UnixMilli(b.Quota.Start)
		r, now := run(t, c, &b, 1, 1)
		qnow := now + shift.Milliseconds()
		want := boundary.UnixMilli()
		if qnow >= boundary.UnixMilli() {
			want = then.UnixMilli()
		}
		if r.Granted != 1 || qnow+r.Quota.ResetMs != want {
			t.Fatalf("call at %d (boundary %d): %+v, want its period to end at %d", qnow, boundary.UnixMilli(), r, want)
		}
	}
	if got := counter(t, c, key, month) + counter(t, c, key, boundary); got != 40 {
		t.Fatalf("the two periods counted %d calls, want 40", got)
	}
}

func mustParse(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestQuotaExactConcurrent: 1000 concurrent requests through four
// instances, direct calls and coalescing batchers, against a bucket of 500
// and a quota of 37: exactly 37 pass, and the count in Redis is 37.
func TestQuotaExactConcurrent(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, kind := range []string{"direct", "batcher"} {
		t.Run(kind, func(t *testing.T) {
			tenant := "exact-" + kind
			b := Bucket{Key: Key(tenant, "r"), Capacity: 500, RefillTokens: 1, RefillPeriodMs: 3600_000}
			b.Quota = quotaAt(t, QuotaKey(tenant, "r", ""), 37, snapshot.QuotaDay, "Europe/Paris", time.Now(), 0)
			var ls []Limiter
			for range 4 {
				if kind == "direct" {
					ls = append(ls, allow(NewRedis(srv.Client(t))))
				} else {
					bt := NewBatcher(srv.Client(t), BatcherOptions{})
					t.Cleanup(func() { _ = bt.Close() })
					ls = append(ls, allow(bt))
				}
			}
			if got := hammer(t, ls, b, 1000); got != 37 {
				t.Fatalf("admitted %d, want exactly the quota, 37", got)
			}
			start, _ := b.Quota.periodAt(time.Now().UnixMilli())
			if n := counter(t, c, b.Quota.Key, time.UnixMilli(start)); n != 37 {
				t.Fatalf("count in Redis %d, want 37", n)
			}
		})
	}
}

// TestQuotaPrefetchAndGiveBack: a batch call takes no more than the quota
// has; a give-back (negative cost) returns tokens to the quota too; a cost
// above the limit can never pass (wait -1).
func TestQuotaPrefetchAndGiveBack(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	b := Bucket{Key: Key("pf", "r"), Capacity: 500, RefillTokens: 1, RefillPeriodMs: 3600_000}
	b.Quota = quotaAt(t, QuotaKey("pf", "r", ""), 10, snapshot.QuotaWeek, "UTC", time.Now(), 0)
	if r, _ := run(t, c, &b, 1, 25); r.Granted != 10 || r.Quota.Remaining != 0 || !r.Quota.Short {
		t.Fatalf("batch of 25 against a quota of 10: %+v, want 10 granted", r)
	}
	if r, _ := run(t, c, &b, -4, -4); r.Quota.Remaining != 4 {
		t.Fatalf("give back 4: %+v, want 4 left in the quota", r)
	}
	if r, _ := run(t, c, &b, 5, 5); r.Granted != 0 || r.WaitMs <= 0 || r.WaitMs != r.Quota.ResetMs {
		t.Fatalf("cost 5 with 4 left: %+v, want refused until the week ends", r)
	}
	if r, _ := run(t, c, &b, 11, 11); r.Granted != 0 || r.WaitMs != -1 {
		t.Fatalf("cost 11 above the quota of 10: %+v, want never (-1)", r)
	}
	if r, _ := run(t, c, &b, 4, 4); r.Granted != 4 || r.Remaining != 490 || r.Quota.Remaining != 0 {
		t.Fatalf("cost 4: %+v, want granted (bucket 500-10+4-4 = 490), the quota spent", r)
	}
}

// TestQuotaOwedAddedToCount: tokens admitted locally during an outage ride
// on the next call and are added to the period's count first; owed tokens
// of another period are dropped.
func TestQuotaOwedAddedToCount(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	b := Bucket{Key: Key("owed", "r"), Capacity: 500, RefillTokens: 1, RefillPeriodMs: 3600_000}
	b.Quota = quotaAt(t, QuotaKey("owed", "r", ""), 100, snapshot.QuotaMonth, "UTC", time.Now(), 0)
	start, _ := b.Quota.periodAt(time.Now().UnixMilli())
	b.Quota.Owed, b.Quota.OwedStart = 30, start
	if r, _ := run(t, c, &b, 1, 1); r.Granted != 1 || r.Quota.Remaining != 69 {
		t.Fatalf("with 30 owed: %+v, want 69 left", r)
	}
	b.Quota.Owed, b.Quota.OwedStart = 50, start-86400_000*31
	if r, _ := run(t, c, &b, 1, 1); r.Quota.Remaining != 68 {
		t.Fatalf("owed for a past period: %+v, want it dropped (68 left)", r)
	}
}

// TestQuotaChainOutageReconciled: a quota of 20 on two replicas; 6 pass
// through Redis (14 left); Redis is frozen: this gateway admits its half of
// what Redis last said was left (7) on its own, then refuses with the time
// to the period's end; when Redis is back, the next call adds the 7 to the
// count in Redis.
func TestQuotaChainOutageReconciled(t *testing.T) {
	srv := redistest.Start(t)
	f := newTestChain(t, srv)
	ctx := context.Background()
	// The bucket refills fast: the local bucket of a call that went
	// unanswered starts empty, and the quota is what this test is about.
	b := Bucket{Key: Key("outage", "r"), Capacity: 1000, RefillTokens: 1000, RefillPeriodMs: 1000}
	b.Quota = quotaAt(t, QuotaKey("outage", "r", ""), 20, snapshot.QuotaMonth, "UTC", time.Now(), 0)
	for i := range 6 {
		if d := f.Decide(ctx, b, 1); !d.Allowed || d.Source != SourceRedis || d.Quota.Remaining != int64(19-i) {
			t.Fatalf("healthy %d: %+v", i, d)
		}
	}
	srv.Pause()
	for f.State() != "open" {
		if d := f.Decide(ctx, b, 1); d.Allowed {
			t.Fatalf("a failed call with the breaker closed must not admit: %+v", d)
		}
	}
	admitted := 0
	var last Outcome
	before := time.Now()
	for range 30 {
		time.Sleep(5 * time.Millisecond) // the local bucket refills at 500/s
		if last = f.Decide(ctx, b, 1); last.Allowed {
			admitted++
		}
	}
	_, end := b.Quota.periodAt(time.Now().UnixMilli())
	if admitted != 7 || !last.Quota.Refused || last.RetryAfter <= 0 || last.RetryAfter > time.UnixMilli(end).Sub(before) {
		t.Fatalf("local fallback: admitted %d, last %+v; want 7 (half of 14), then refused until the month ends", admitted, last)
	}
	time.Sleep(700 * time.Millisecond) // past the failed calls' deadlines
	srv.Resume()
	waitState(t, f, "closed")
	d := f.Decide(ctx, b, 1)
	if !d.Allowed || d.Source != SourceRedis || d.Quota.Remaining != 20-6-7-1 {
		t.Fatalf("after the outage: %+v, want a Redis decision with %d left (the 7 local admissions counted)", d, 20-6-7-1)
	}
	start, _ := b.Quota.periodAt(time.Now().UnixMilli())
	if n := counter(t, srv.Client(t), b.Quota.Key, time.UnixMilli(start)); n != 14 {
		t.Fatalf("count in Redis %d, want 14 (6 + 7 local + 1)", n)
	}
}

// TestQuotaInCluster: in Redis Cluster the quota's counters share the slot
// of the bucket (unsharded: the tenant's hash tag; a shard: its own key),
// so one script call reaches both.
func TestQuotaInCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cc := cluster.Client(t)
	l := allow(NewRedis(cc))
	for i := range 6 {
		tenant := "cl-" + strconv.Itoa(i)
		b := Bucket{Key: Key(tenant, "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
		b.Quota = quotaAt(t, QuotaKey(tenant, "r", ""), 2, snapshot.QuotaDay, "Asia/Tokyo", time.Now(), 0)
		if i%2 == 1 {
			b.Key = ShardKey(tenant, "r", "", i)
			b.Quota.Key = ShardQuotaKey(b.Key)
		}
		for j := range 3 {
			d, err := l.Allow(context.Background(), b, 1)
			if err != nil {
				t.Fatalf("%s: %v", b.Key, err)
			}
			if d.Allowed != (j < 2) {
				t.Fatalf("%s call %d: %+v", b.Key, j, d)
			}
		}
	}
}

// TestQuotaCountsResponseCharges: a response's cost charged after the fact
// (a Charge, into debt) counts against the quota too, past its limit if it
// must: the period's next requests are refused until it ends.
func TestQuotaCountsResponseCharges(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	b := Bucket{Key: Key("charged", "r"), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 3600_000}
	b.Quota = quotaAt(t, QuotaKey("charged", "r", ""), 50, snapshot.QuotaDay, "Europe/Paris", time.Now(), 0)
	if r, _ := run(t, c, &b, 1, 1); r.Granted != 1 || r.Quota.Remaining != 49 {
		t.Fatalf("request: %+v", r)
	}
	ch := b
	ch.Charge, ch.MaxDebt = true, 100
	if r, _ := run(t, c, &ch, 60, 60); r.Granted != 60 || r.Quota.Remaining != 0 || !r.Quota.Short {
		t.Fatalf("a charge of 60 with 49 left in the quota: %+v, want charged in full, the quota spent", r)
	}
	if r, _ := run(t, c, &b, 1, 1); r.Granted != 0 || !r.Quota.Short || r.WaitMs != r.Quota.ResetMs {
		t.Fatalf("next request: %+v, want refused by the quota until the day ends", r)
	}
	start, _ := b.Quota.periodAt(time.Now().UnixMilli())
	if n := counter(t, c, b.Quota.Key, time.UnixMilli(start)); n != 61 {
		t.Fatalf("count %d, want 61 (1 + the charge of 60)", n)
	}
}

// TestLocalQuotaShare: without Redis's answers a local quota is 1/N of the
// whole; after an answer 1/N of what Redis said was left; when N changes,
// the share follows (the same part of the whole); the next period starts
// again at 1/N of the whole. The local bucket never binds here.
func TestLocalQuotaShare(t *testing.T) {
	var n atomic.Int64
	n.Store(2)
	now := time.Date(2027, 3, 31, 23, 0, 0, 0, time.UTC)
	l := NewLocal(LocalOptions{Replicas: func() int { return int(n.Load()) }, Clock: func() time.Time { return now }})
	b := Bucket{Key: Key("share", "r"), Capacity: 1e6, RefillTokens: 1e6, RefillPeriodMs: 1000}
	b.Quota = quotaAt(t, QuotaKey("share", "r", ""), 100, snapshot.QuotaMonth, "UTC", now, 0)
	admit := func(max int) int {
		got := 0
		for range max {
			if l.Decide(b, 1).Allowed {
				got++
			}
		}
		return got
	}
	if got := admit(100); got != 50 {
		t.Fatalf("never observed, N=2: admitted %d, want 50", got)
	}
	l.ObserveQuota(b, QuotaResult{Set: true, Remaining: 40})
	n.Store(4)
	if got := admit(100); got != 10 {
		t.Fatalf("40 left, N now 4: admitted %d, want 10", got)
	}
	if owed, start := l.TakeOwed(b); owed != 60 || start != b.Quota.Start {
		t.Fatalf("owed %d for %d, want 60 for the month's start %d", owed, start, b.Quota.Start)
	}
	now = now.Add(2 * time.Hour) // April
	if got := admit(100); got != 25 {
		t.Fatalf("the next month, N=4: admitted %d, want 25", got)
	}
}
