package decision_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// redisState is every bucket's tokens (rounded: a slow refill adds a
// fraction between two reads) and every quota count in Redis, by key.
func redisState(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	state := map[string]int64{}
	for _, hash := range c.Keys(ctx, "rl:*").Val() {
		for _, field := range c.HKeys(ctx, hash).Val() {
			key := hash
			if field != "s" {
				key = hash + ":" + field // rl:{tenant}:route[@region]
			}
			st, err := limiter.Peek(ctx, c, key)
			if err != nil {
				t.Fatal(err)
			}
			state[key] = int64(math.Round(st.Tokens))
		}
	}
	for _, key := range c.Keys(ctx, "rq:*").Val() {
		n, err := c.Get(ctx, key).Float64()
		if err != nil {
			t.Fatal(err)
		}
		state[key] = int64(math.Round(n))
	}
	return state
}

// sameState compares two redisStates; a key missing from one is a full
// bucket (full tokens) or a quota count of 0, as the script reads it.
func sameState(a, b map[string]int64, full int64) bool {
	value := func(m map[string]int64, k string) int64 {
		if v, ok := m[k]; ok {
			return v
		}
		if strings.HasPrefix(k, "rl:") {
			return full
		}
		return 0
	}
	for _, m := range []map[string]int64{a, b} {
		for k := range m {
			if value(a, k) != value(b, k) {
				return false
			}
		}
	}
	return true
}

// TestRefundGivesBackToTheBucketCharged: a decision then its refund leave
// Redis as the decision found it, for every kind of bucket the engine
// derives (the whole rule, a region's share, one shard of four, a cost
// spread over shards, prefetched tokens) with a quota: the tokens go back
// to the key that was charged and the quota count to its period. A
// refunded prefetched token goes back to this gateway's prefetch, not to
// Redis.
func TestRefundGivesBackToTheBucketCharged(t *testing.T) {
	base := func(r snapshot.Rule) snapshot.Rule {
		r.Tenant, r.Route, r.RefillTokens, r.RefillPeriodMs = "*", "*", 1, 3600_000
		r.QuotaLimit, r.QuotaPeriod, r.QuotaZone = 50, snapshot.QuotaDay, "UTC"
		return r
	}
	cases := []struct {
		name   string
		rule   snapshot.Rule
		region string
		cost   int64
		full   int64 // a bucket's capacity (a shard's, a region's share)
	}{
		{"whole rule", base(snapshot.Rule{Capacity: 20}), "", 3, 20},
		{"region share", base(snapshot.Rule{Capacity: 20, Regions: []snapshot.RegionShare{{Name: "eu", Percent: 70}, {Name: "us", Percent: 30}}}), "us", 2, 6},
		{"one of 4 shards", base(snapshot.Rule{Capacity: 40, Shards: 4}), "", 3, 10},
		{"spread over shards", base(snapshot.Rule{Capacity: 40, Shards: 4}), "", 15, 10},
		{"prefetched", base(snapshot.Rule{Capacity: 20, Prefetch: snapshot.PrefetchFixed, Batch: 5}), "", 1, 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client(t)
			ch := limiter.NewChain(limiter.ChainOptions{Client: c, Coalesce: true, EmptyBucketCache: true, Timeout: 30 * time.Second, MaxWait: 30 * time.Second})
			t.Cleanup(func() { _ = ch.Close() })
			rule := &oneRule{tc.rule}
			e := decision.New(decision.Options{Rules: rule, Limiter: ch, Region: tc.region, Pick: func(int) int { return 2 }})
			ctx := context.Background()
			// A first decision makes the keys (and fills the prefetch).
			if d, _, _ := e.Decide(ctx, "t", "r", tc.cost); !d.Allowed {
				t.Fatalf("first decision refused: %+v", d)
			}
			before := redisState(t, c)
			b := limiter.BucketFor("t", "r", &rule.r)
			prefetched := ch.Held(ctx, b).Prefetched
			d, _, err := e.Decide(ctx, "t", "r", tc.cost)
			if err != nil || !d.Allowed {
				t.Fatalf("second decision: %+v, %v", d, err)
			}
			if !strings.HasPrefix(tc.name, "prefetched") && sameState(before, redisState(t, c), tc.full) {
				t.Fatalf("the decision changed nothing in Redis: %v", before)
			}
			refunded, err := e.Refund(ctx, "t", "r", &rule.r, d)
			if err != nil {
				t.Fatal(err)
			}
			if refunded.Remaining != min(d.Limit, d.Remaining+tc.cost) || refunded.Quota.Remaining != d.Quota.Remaining+tc.cost {
				t.Fatalf("refunded decision %+v, want the cost %d left again in %+v", refunded, tc.cost, d)
			}
			if after := redisState(t, c); !sameState(before, after, tc.full) {
				t.Fatalf("after the refund Redis holds\n%v\nwant it as before the decision\n%v", after, before)
			}
			if got := ch.Held(ctx, b).Prefetched; got != prefetched {
				t.Fatalf("prefetched tokens %d after the refund, want %d as before", got, prefetched)
			}
		})
	}
}
