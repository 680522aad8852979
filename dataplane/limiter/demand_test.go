package limiter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
)

// TestScriptRecordsDemand: a call of a bucket with Demand set adds what it
// admitted and refused (cost included) to the region's ring in the same
// call, with the share in force; the Cache's own refusals ride on the next
// call; a bucket without Demand writes no ring.
func TestScriptRecordsDemand(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	key := RegionKey("shop-a", "orders", "eu")
	ring := DemandKey(key, "ns/r", "eu")
	// A long window: every call of the test falls in one (or, at an edge,
	// two: the test adds the windows up).
	b := Bucket{Key: key, Capacity: 5, RefillTokens: 1, RefillPeriodMs: 3600_000,
		Demand: Demand{Key: ring, WindowMs: 3600_000, Slots: 4, Percent: 50}}
	r := NewRedis(rc)
	// Loads the script (NOSCRIPT, then EVAL), before the count.
	if _, err := r.Take(ctx, Bucket{Key: Key("warm", "up"), Capacity: 1, RefillTokens: 1, RefillPeriodMs: 1000}, 1, 1); err != nil {
		t.Fatal(err)
	}
	before := redistest.ScriptCalls(t, rc)
	for i := 0; i < 3; i++ {
		if _, err := r.Take(ctx, b, 2, 2); err != nil { // 2 + 2 admitted, then 2 refused (1 left)
			t.Fatal(err)
		}
	}
	if n := redistest.ScriptCalls(t, rc) - before; n != 3 {
		t.Fatalf("%d script calls for 3 takes, want 3 (no extra round trip)", n)
	}
	b.Demand.Refused = 7 // refused by a gateway's cache since
	b.Demand.Percent = 30
	if _, err := r.Take(ctx, b, 1, 1); err != nil { // admitted: the last token
		t.Fatal(err)
	}
	adm, ref, share := ringTotals(t, rc, ring)
	if adm != 5 || ref != 2+7 || share != 50 {
		t.Fatalf("ring: admitted %v refused %v share %d, want 5, 9, 50 (the window's largest)", adm, ref, share)
	}
	if ttl := rc.PTTL(ctx, ring).Val(); ttl <= 0 || ttl > 2*4*time.Hour {
		t.Errorf("ring TTL %v, want up to twice the ring", ttl)
	}
	plain := Bucket{Key: RegionKey("shop-b", "orders", "eu"), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 1000}
	if _, err := r.Take(ctx, plain, 1, 1); err != nil {
		t.Fatal(err)
	}
	if keys := rc.Keys(ctx, regionshares.KeyPrefix+"shop-b*").Val(); len(keys) != 0 {
		t.Errorf("a bucket without Demand wrote %v", keys)
	}
}

// ringTotals adds up a ring's windows.
func ringTotals(t *testing.T, rc *redis.Client, key string) (admitted, refused float64, share int32) {
	t.Helper()
	fields, err := rc.HGetAll(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := regionshares.ParseRing(fields)
	if err != nil {
		t.Fatalf("%v: %v", fields, err)
	}
	for _, w := range ring.Windows {
		admitted += w.Admitted
		refused += w.Refused
		share = max(share, w.Share)
	}
	return admitted, refused, share
}

// TestShrunkShareClampsTokens: a bucket whose share shrinks holds at most
// its new capacity at once, whatever it stored under the old one.
func TestShrunkShareClampsTokens(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	b := Bucket{Key: RegionKey("shop-a", "orders", "eu"), Capacity: 50, RefillTokens: 5, RefillPeriodMs: 1000}
	r := NewRedis(rc)
	if res, err := r.Take(ctx, b, 1, 1); err != nil || res.Remaining != 49 {
		t.Fatalf("at 50 %%: %+v %v", res, err)
	}
	b.Capacity, b.RefillTokens, b.RefillPeriodMs = 10, 1, 1000 // share 50 % → 10 %
	res, err := r.Take(ctx, b, 1, 1)
	if err != nil || res.Remaining != 9 {
		t.Fatalf("after the share shrank: %+v %v, want 9 left (10 - 1)", res, err)
	}
	// A batch asks for everything: the new capacity is all there is.
	res, err = r.Take(ctx, b, 1, 1000)
	if err != nil || res.Granted > 10 {
		t.Fatalf("a batch after the share shrank got %d tokens, want at most 10", res.Granted)
	}
}

// TestChainCountsEveryRequestOnce: through the whole chain (the Cache
// answering refusals itself, concurrent requests sharing calls), every
// request's token is counted once in the ring, admitted or refused.
func TestChainCountsEveryRequestOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestChain(t, srv)
	key := RegionKey("shop-a", "orders", "us")
	ring := DemandKey(key, "ns/r", "us")
	b := Bucket{Key: key, Capacity: 3, RefillTokens: 3, RefillPeriodMs: 1000,
		Demand: Demand{Key: ring, WindowMs: 3600_000, Slots: 2, Percent: 30}}
	ctx := context.Background()
	const n = 400
	admitted := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() {
			if d := c.Decide(ctx, b, 1); d.Allowed {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
		if i%20 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	wg.Wait()
	// One more call carries the last cached refusals.
	time.Sleep(400 * time.Millisecond)
	c.Decide(ctx, b, 1)
	adm, ref, _ := ringTotals(t, srv.Client(t), ring)
	if adm+ref != n+1 || int(adm) < admitted {
		t.Fatalf("ring: %v admitted + %v refused, want %d requests in all (%d admitted)", adm, ref, n+1, admitted)
	}
}
