package decision_test

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// TestLocalFloorsDoNotMultiply: the local fallback's "at least one token"
// applies to the rule's share on this replica, not to each shard: a rule of
// 64 in 64 shards with 10 replicas admits about 64/10 per replica locally,
// not 64.
func TestLocalFloorsDoNotMultiply(t *testing.T) {
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: 64, RefillTokens: 1, RefillPeriodMs: 3600_000, Shards: 64}}
	local := limiter.NewLocal(limiter.LocalOptions{Replicas: func() int { return 10 }})
	e := decision.New(decision.Options{Rules: rule, Limiter: local, Replicas: func() int { return 10 }})
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
	if admitted > 7 {
		t.Fatalf("one replica of ten admitted %d locally on a rule of 64, want at most 7", admitted)
	}
}
