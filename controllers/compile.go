package controllers

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// verdict is what compiling decided about one RateLimitRule, as the status
// reconciler needs it.
type verdict struct {
	// Generation is the metadata.generation that was compiled.
	Generation int64
	// Accepted is true for the rule in force for its tenant+route.
	Accepted bool
	// Reason and Message explain a rule that is not accepted.
	Reason  string
	Message string
	// Rate is the refill rate in short form, for status.rate.
	Rate string
	// tenant places an accepted rule in its shard.
	tenant string
}

// compiled is the result of compiling every rule.
type compiled struct {
	// Rules are the winners, one per tenant+route.
	Rules []snapshot.Rule
	// Verdicts has one entry per RateLimitRule.
	Verdicts map[types.UID]verdict
	// Objects maps UIDs to the compiled objects, for status work and events.
	Objects map[types.UID]*v1alpha1.RateLimitRule
}

// compile compiles items with snapshot.Compile and indexes the verdicts by UID.
func compile(items []v1alpha1.RateLimitRule) compiled {
	rules, verdicts := snapshot.Compile(items)
	out := compiled{
		Rules:    rules,
		Verdicts: make(map[types.UID]verdict, len(items)),
		Objects:  make(map[types.UID]*v1alpha1.RateLimitRule, len(items)),
	}
	for i := range items {
		obj, v := &items[i], verdicts[i]
		cv := verdict{Generation: obj.Generation, Accepted: v.Accepted, Reason: v.Reason, Message: v.Message, Rate: v.Rate}
		if v.Rule != nil {
			cv.tenant = v.Rule.Tenant
		}
		out.Verdicts[obj.UID] = cv
		out.Objects[obj.UID] = obj
	}
	return out
}
