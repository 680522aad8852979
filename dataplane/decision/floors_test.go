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

// TestLocalEngineSpreadsAndRefunds: an engine that decides with local
// buckets alone serves a cost above one shard from the rule's one local
// bucket, and a refund gives its tokens back there, as a local-only chain
// does.
func TestLocalEngineSpreadsAndRefunds(t *testing.T) {
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: 40, RefillTokens: 1, RefillPeriodMs: 3600_000, Shards: 4}}
	for name, l := range map[string]decision.Limiter{
		"local buckets":    limiter.NewLocal(limiter.LocalOptions{}),
		"local-only chain": limiter.NewChain(limiter.ChainOptions{}),
	} {
		t.Run(name, func(t *testing.T) {
			e := decision.New(decision.Options{Rules: rule, Limiter: l})
			ctx := context.Background()
			d, _, err := e.Decide(ctx, "t", "r", 15) // a shard holds 10
			if err != nil || !d.Allowed || d.Source != limiter.SourceLocal || d.Remaining != 25 {
				t.Fatalf("a cost of 15 on 4 shards of 10: %+v %v, want admitted by the local bucket of 40", d, err)
			}
			refunded, err := e.Refund(ctx, "t", "r", &rule.r, d)
			if err != nil || refunded.Remaining != 40 {
				t.Fatalf("refunded %+v %v, want 40 left again", refunded, err)
			}
			if d, _, _ := e.Decide(ctx, "t", "r", 40); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("the whole bucket after the refund: %+v, want admitted", d)
			}
		})
	}
}
