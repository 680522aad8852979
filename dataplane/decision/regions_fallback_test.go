package decision_test

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// TestRegionFallbackUsesTheShareInForce: a rule split 50/50 in spec whose
// shares follow the traffic, moved by the rebalancer to eu 80 / us 20 (its
// status, applied to the compiled rule by InForce): with its Redis down, a
// region's local fallback enforces the share in force / N, not spec's
// split (capacity 100, N = 2: eu admits 40, us 10).
func TestRegionFallbackUsesTheShareInForce(t *testing.T) {
	r := snapshot.Rule{Tenant: "*", Route: "*", Capacity: 100, RefillTokens: 1, RefillPeriodMs: 3600_000,
		Regions: []snapshot.RegionShare{{Name: "eu", Percent: 50}, {Name: "us", Percent: 50}}}
	if !r.InForce([]v1alpha1.RegionInForce{{Name: "eu", Percent: 80}, {Name: "us", Percent: 20}}) {
		t.Fatal("the shares in force were not applied")
	}
	for region, want := range map[string]int{"eu": 40, "us": 10} {
		replicas := func() int { return 2 }
		local := limiter.NewLocal(limiter.LocalOptions{Replicas: replicas})
		e := decision.New(decision.Options{Rules: &oneRule{r}, Limiter: local, Region: region, Replicas: replicas})
		admitted := 0
		for range 200 {
			d, _, err := e.Decide(context.Background(), "t", "r", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != want {
			t.Fatalf("%s's local fallback admitted %d of capacity 100 at a share in force of %s with N=2, want %d", region, admitted, map[string]string{"eu": "80%", "us": "20%"}[region], want)
		}
	}
}
