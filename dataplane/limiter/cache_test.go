package limiter

import (
	"context"
	"testing"
	"time"
)

// scriptedTaker answers Takes with the replies it is given, in order, and
// keeps the Cache's late handler. It stands in for the Redis side where a
// test needs replies in an order a real Redis gives only by chance (two
// calls of one bucket whose replies are handled out of order).
type scriptedTaker struct {
	replies []TakeResult
	late    LateFunc
}

func (s *scriptedTaker) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	return s.TakeLate(ctx, b, cost, want, nil)
}

func (s *scriptedTaker) TakeLate(_ context.Context, _ Bucket, _, _ int64, late LateFunc) (TakeResult, error) {
	s.late = late
	r := s.replies[0]
	s.replies = s.replies[1:]
	return r, nil
}

// TestCachedQuotaRefusalSaysQuota: once the quota has refused a request,
// the Cache answers the next ones itself until the period ends; those
// answers say the quota refused them (what the headers and the rate limit
// service report), even when a grant Redis made before the quota ran out
// is handled after the refusal (a late reply, or a concurrent call's).
func TestCachedQuotaRefusalSaysQuota(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	const monthEndMs = 9 * 86_400_000
	refused := TakeResult{WaitMs: monthEndMs, ResetMs: 1000, Remaining: 40,
		Quota: QuotaResult{Set: true, Remaining: 0, ResetMs: monthEndMs, Short: true}}
	grantedBefore := TakeResult{Granted: 1, Remaining: 41, ResetMs: 900,
		Quota: QuotaResult{Set: true, Remaining: 0, ResetMs: monthEndMs}}
	next := &scriptedTaker{replies: []TakeResult{refused}}
	c := NewCache(next, CacheOptions{Clock: clock})
	b := Bucket{Key: "rl:{t}:r", Capacity: 50, RefillTokens: 1, RefillPeriodMs: 1000,
		Quota: Quota{Key: "q", Limit: 37, Whole: 37}}
	ctx := context.Background()

	r, err := c.Take(ctx, b, 1, 1)
	if err != nil || r.Granted != 0 || !r.outcome(1).Quota.Refused {
		t.Fatalf("the quota's refusal from Redis: %+v %v", r, err)
	}
	next.late(&b, grantedBefore)
	now = now.Add(time.Second)
	r, err = c.Take(ctx, b, 1, 1)
	if err != nil || !r.Cached || r.Granted != 0 {
		t.Fatalf("the next request: %+v %v, want refused by the Cache", r, err)
	}
	if r.Remaining != refused.Remaining {
		t.Fatalf("cached refusal: %d tokens in the bucket, want %d as Redis said with the refusal", r.Remaining, refused.Remaining)
	}
	o := r.outcome(1)
	if !o.Quota.Refused || o.Quota.Remaining != 0 || o.RetryAfter != o.Quota.ResetAfter || o.Quota.ResetAfter != monthEndMs*time.Millisecond-time.Second {
		t.Fatalf("cached refusal %+v, want refused by the quota until the month ends", o)
	}
}
