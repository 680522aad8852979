package limiter

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// quotaAround is a quota of limit whose two periods are [now-1h, now+1h)
// and [now+1h, now+2h) in Redis's time now (ms).
func quotaAround(key string, limit, now int64) Quota {
	const hour = 3600_000
	return Quota{Key: key, Limit: limit, Whole: limit, Start: now - hour, Switch: now + hour, End: now + 2*hour}
}

// count is the quota count of the period starting at start.
func count(t *testing.T, c redis.Cmdable, q Quota, start int64) float64 {
	t.Helper()
	v, err := c.Get(context.Background(), q.Key+":"+strconv.FormatInt(start, 10)).Float64()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

func tokensIn(t *testing.T, c redis.Cmdable, key string) float64 {
	t.Helper()
	st, err := Peek(context.Background(), c, key)
	if err != nil || !st.Found {
		t.Fatalf("bucket %s: %+v, %v", key, st, err)
	}
	return st.Tokens
}

// TestRefundNeverAboveCapacity: a refund after the bucket refilled (here:
// its state and its quota count gone, a full bucket and an empty count)
// leaves the bucket at its capacity and the count at zero, never above or
// below.
func TestRefundNeverAboveCapacity(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	f := newTestChain(t, srv)
	ctx := context.Background()
	now := c.Time(ctx).Val().UnixMilli()
	b := Bucket{Key: Key("t", "r"), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 3600_000, Quota: quotaAround(QuotaKey("t", "r", ""), 10, now)}
	d := f.Decide(ctx, b, 2)
	if !d.Allowed || d.Source != SourceRedis {
		t.Fatalf("decision %+v", d)
	}
	if err := c.Del(ctx, "rl:{t}", b.Quota.Key+":"+strconv.FormatInt(b.Quota.Start, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Refund(ctx, b, d); err != nil {
		t.Fatal(err)
	}
	if got := tokensIn(t, c, b.Key); got != 5 {
		t.Fatalf("a full bucket after a refund of 2: %v tokens, want its capacity 5", got)
	}
	if got := count(t, c, b.Quota, b.Quota.Start); got != 0 {
		t.Fatalf("an empty quota count after a refund of 2: %v, want 0", got)
	}
}

// TestRefundCountsInTheChargedPeriod: a take counted in one quota period
// and refunded once the gateway's calendar (and Redis's) moved to the next
// gives the count back to the period it was counted in; the new period's
// count is untouched.
func TestRefundCountsInTheChargedPeriod(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	f := newTestChain(t, srv)
	ctx := context.Background()
	now := c.Time(ctx).Val().UnixMilli()
	const hour = 3600_000
	b := Bucket{Key: Key("t", "r"), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 3600_000, Quota: quotaAround(QuotaKey("t", "r", ""), 10, now)}
	first, second := b.Quota.Start, b.Quota.Switch
	d := f.Decide(ctx, b, 2)
	if !d.Allowed || d.taken.quotaStart != first {
		t.Fatalf("decision %+v, want it counted in the period starting %d", d, first)
	}
	// The calendar moves on by an hour and a half: the next period holds
	// Redis's time, and the engine passes it and the one after it.
	later := b
	later.Quota.ShiftMs = hour + hour/2
	later.Quota.Start, later.Quota.Switch, later.Quota.End = second, second+hour, second+2*hour
	if d := f.Decide(ctx, later, 3); !d.Allowed || d.taken.quotaStart != second {
		t.Fatalf("decision in the next period %+v, want it counted in the period starting %d", d, second)
	}
	if err := f.Refund(ctx, later, d); err != nil {
		t.Fatal(err)
	}
	if a, b := count(t, c, b.Quota, first), count(t, c, b.Quota, second); a != 0 || b != 3 {
		t.Fatalf("counts %v and %v after the refund of the first period's 2, want 0 and 3", a, b)
	}
	if got := math.Round(tokensIn(t, c, b.Key)); got != 97 {
		t.Fatalf("%v tokens, want 97", got)
	}
}

// TestRefundLocal: with Redis gone, a refund gives the tokens back to the
// local bucket and takes them off what its quota owes Redis; once Redis's
// answer has overwritten the local bucket, the refund leaves it alone (the
// take is not in that answer).
func TestRefundLocal(t *testing.T) {
	srv := redistest.Start(t)
	f := newTestChain(t, srv) // 2 replicas
	srv.Kill()
	ctx := context.Background()
	b := Bucket{Key: Key("t", "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000,
		Quota: Quota{Key: QuotaKey("t", "r", ""), Limit: 100, Whole: 100, Start: 1, Switch: math.MaxInt64 - 1, End: math.MaxInt64}}
	d := f.Decide(ctx, b, 2)
	if !d.Allowed || d.Source != SourceLocal || d.Remaining != 3 {
		t.Fatalf("local decision %+v, want 3 of the share of 5 left", d)
	}
	if err := f.Refund(ctx, b, d); err != nil {
		t.Fatal(err)
	}
	if h := f.LocalHeld(b); math.Floor(h.Tokens) != 5 {
		t.Fatalf("local bucket %+v after the refund, want 5 tokens", h)
	}
	if owed, _ := f.local.TakeOwed(b); owed != 0 {
		t.Fatalf("the quota owes Redis %d after the refund, want 0", owed)
	}
	d = f.Decide(ctx, b, 2)
	f.local.Observe(b, 4) // Redis's answer: 4 left, 2 for this replica
	if err := f.Refund(ctx, b, d); err != nil {
		t.Fatal(err)
	}
	if h := f.LocalHeld(b); math.Floor(h.Tokens) != 2 {
		t.Fatalf("local bucket %+v after a refund of a take Redis's answer replaced, want Redis's 2", h)
	}
}
