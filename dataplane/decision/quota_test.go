package decision_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// concurrentAdmitted sends n concurrent decisions of cost over engines and
// counts the admitted ones.
func concurrentAdmitted(t *testing.T, engines []*decision.Engine, n int, cost int64) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, _, err := engines[i%len(engines)].Decide(context.Background(), "t", "r", cost)
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				admitted.Add(cost)
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}

// TestQuotaWithShardsHotKeysAndRegions: the quota stays exact when the
// bucket is sharded (each shard holds its part of the quota, parts adding up
// to the limit), also for costs spread over several shards; a prefetching
// rule admits no more than its quota; a region enforces its share.
func TestQuotaWithShardsHotKeysAndRegions(t *testing.T) {
	quota := func(r snapshot.Rule) snapshot.Rule {
		r.Tenant, r.Route, r.RefillTokens, r.RefillPeriodMs = "*", "*", 1, 3600_000
		r.QuotaLimit, r.QuotaPeriod, r.QuotaZone = 37, snapshot.QuotaMonth, "Australia/Sydney"
		return r
	}
	cases := []struct {
		name    string
		rule    snapshot.Rule
		region  string
		cost    int64
		lo, hi  int64
		retries bool
	}{
		{"4 shards", quota(snapshot.Rule{Capacity: 400, Shards: 4}), "", 1, 37, 37, true},
		// Prefetched tokens count against the quota when taken: never more.
		{"prefetch Fixed 10", quota(snapshot.Rule{Capacity: 400, Prefetch: snapshot.PrefetchFixed, Batch: 10}), "", 1, 7, 37, false},
		{"a region's 30%", quota(snapshot.Rule{Capacity: 400, Regions: []snapshot.RegionShare{{Name: "eu", Percent: 70}, {Name: "us", Percent: 30}}}), "us", 1, 11, 11, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.rule.Validate(); err != nil {
				t.Fatal(err)
			}
			srv := redistest.Start(t)
			var engines []*decision.Engine
			for range 3 {
				engines = append(engines, decision.New(decision.Options{Rules: &oneRule{tc.rule}, Limiter: chain(t, srv.Client(t)), Region: tc.region}))
			}
			got := concurrentAdmitted(t, engines, 300, tc.cost)
			if got < tc.lo || got > tc.hi {
				t.Fatalf("admitted %d tokens of a quota of 37, want %d to %d", got, tc.lo, tc.hi)
			}
			d, _, _ := engines[0].Decide(context.Background(), "t", "r", tc.cost)
			// Refused by the quota until the month ends, also when the
			// answer comes from the empty-bucket cache (limiter
			// TestCachedQuotaRefusalSaysQuota).
			if tc.retries && (d.Allowed || !d.Quota.Refused || (d.RetryAfter-d.Quota.ResetAfter).Abs() > time.Second || d.RetryAfter <= 0) {
				t.Fatalf("after the quota: %+v, want refused by the quota until the month ends", d)
			}
		})
	}
}

// TestQuotaSpreadOverShards: a cost larger than one shard holds is taken
// from several shards, from their buckets and their parts of the quota
// together: a cost above the whole quota never passes; with 5 in the quota
// a cost of 3 passes once, the next one is refused by the quota (what was
// taken for it is given back) until the period ends, and the 2 left pass
// as requests of cost 1.
func TestQuotaSpreadOverShards(t *testing.T) {
	srv := redistest.Start(t)
	rule := snapshot.Rule{Tenant: "*", Route: "*", Capacity: 8, RefillTokens: 1, RefillPeriodMs: 3600_000, Shards: 4,
		QuotaLimit: 5, QuotaPeriod: snapshot.QuotaWeek, QuotaZone: "America/New_York"}
	e := decision.New(decision.Options{Rules: &oneRule{rule}, Limiter: chain(t, srv.Client(t)), Pick: func(int) int { return 0 }})
	ctx := context.Background()
	if d, _, _ := e.Decide(ctx, "t", "r", 6); d.Allowed || d.RetryAfter != -1 || !d.Quota.Refused {
		t.Fatalf("cost 6 above the whole quota of 5: %+v, want never (-1)", d)
	}
	if d, _, _ := e.Decide(ctx, "t", "r", 3); !d.Allowed {
		t.Fatalf("cost 3 with 5 in the quota: %+v", d)
	}
	d, _, _ := e.Decide(ctx, "t", "r", 3)
	if d.Allowed || !d.Quota.Refused || d.RetryAfter <= time.Second || d.RetryAfter != d.Quota.ResetAfter || d.Quota.Remaining != 2 {
		t.Fatalf("cost 3 with 2 left in the quota: %+v, want refused by the quota until the week ends", d)
	}
	for i := range 3 {
		if d, _, _ := e.Decide(ctx, "t", "r", 1); d.Allowed != (i < 2) {
			t.Fatalf("cost 1, request %d: %+v, want the 2 left (given back by the refused request) and no more", i, d)
		}
	}
}
