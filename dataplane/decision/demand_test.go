package decision_test

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// TestDemandOnlyForRulesThatFollowTraffic: the engine records demand for a
// rule split between regions whose shares follow the traffic, in its
// region's ring: the rule's one ring outside a Cluster, else one in each
// bucket's slot (a sharded rule's in each shard's); a Fixed rule, a region
// the rule does not list and a gateway with recording off write no ring.
func TestDemandOnlyForRulesThatFollowTraffic(t *testing.T) {
	split := snapshot.Rule{Tenant: "*", Route: "*", Capacity: 100, RefillTokens: 10, RefillPeriodMs: 1000, Source: "ns/r",
		Regions: []snapshot.RegionShare{{Name: "eu", Percent: 70}, {Name: "us", Percent: 30}}}
	fixed, sharded := split, split
	fixed.RegionsFixed = true
	sharded.Shards = 2
	on := decision.DemandOptions{WindowMs: 60_000}
	cases := []struct {
		name   string
		rule   snapshot.Rule
		region string
		demand decision.DemandOptions
		rings  []string
	}{
		{"follows the traffic", split, "eu", on, []string{regionshares.DemandKey("t", "ns/r", "eu")}},
		{"sharded", sharded, "eu", on, []string{limiter.DemandKey(limiter.ShardKey("t", "r", "eu", 0), "ns/r", "eu"), limiter.DemandKey(limiter.ShardKey("t", "r", "eu", 1), "ns/r", "eu")}},
		{"one ring per rule (not a Cluster)", sharded, "eu", decision.DemandOptions{WindowMs: 60_000, PerRule: true}, []string{regionshares.DemandKey("ns/r", "ns/r", "eu")}},
		{"fixed", fixed, "eu", on, nil},
		{"region not listed", split, "ap", on, nil},
		{"recording off", split, "eu", decision.DemandOptions{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rc := srv.Client(t)
			e := decision.New(decision.Options{Rules: &oneRule{c.rule}, Limiter: chain(t, rc), Region: c.region, Demand: c.demand,
				Pick: func(int) int { return 0 }})
			// Enough to empty the first shard and reach the second.
			for range 60 {
				if _, _, err := e.Decide(context.Background(), "t", "r", 1); err != nil {
					t.Fatal(err)
				}
			}
			keys := rc.Keys(context.Background(), regionshares.KeyPrefix+"*").Val()
			if len(keys) != len(c.rings) {
				t.Fatalf("rings %v, want %v", keys, c.rings)
			}
			for _, want := range c.rings {
				if rc.Exists(context.Background(), want).Val() != 1 {
					t.Errorf("no ring %s (have %v)", want, keys)
				}
			}
		})
	}
}
