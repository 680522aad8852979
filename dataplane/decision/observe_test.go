package decision_test

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// TestObserveHearsEveryDecision: Options.Observe hears each decision of
// Decide with its tenant and route, refused or not; a Shadow rule's
// would-be refusal passed, so it is heard as allowed, and a sharded rule
// is heard once per request, not per shard tried.
func TestObserveHearsEveryDecision(t *testing.T) {
	type heard struct {
		tenant, route string
		allowed       bool
	}
	for _, c := range []struct {
		name string
		rule snapshot.Rule
		want []bool // allowed, for four requests
	}{
		{"enforced", snapshot.Rule{Tenant: "*", Route: "*", Capacity: 2, RefillTokens: 1, RefillPeriodMs: 3_600_000}, []bool{true, true, false, false}},
		{"shadow", snapshot.Rule{Tenant: "*", Route: "*", Capacity: 2, RefillTokens: 1, RefillPeriodMs: 3_600_000, Shadow: true}, []bool{true, true, true, true}},
		{"sharded", snapshot.Rule{Tenant: "*", Route: "*", Capacity: 2, RefillTokens: 1, RefillPeriodMs: 3_600_000, Shards: 2}, []bool{true, true, false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []heard
			e := decision.New(decision.Options{
				Rules: &oneRule{c.rule}, Limiter: limiter.NewLocal(limiter.LocalOptions{}),
				Observe: func(tenant, route string, allowed bool) { got = append(got, heard{tenant, route, allowed}) },
			})
			for range c.want {
				if _, _, err := e.Decide(context.Background(), "shop-a", "orders", 1); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("heard %d decisions, want %d: %v", len(got), len(c.want), got)
			}
			for i, h := range got {
				if h != (heard{"shop-a", "orders", c.want[i]}) {
					t.Errorf("decision %d: heard %+v, want allowed %v", i, h, c.want[i])
				}
			}
		})
	}
}
