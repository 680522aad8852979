package controllers

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// verdict is what compiling decided about one RateLimitRule.
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

// ReasonInvalid marks a rule the controller cannot compile. The schema
// refuses such specs, so this only happens for objects stored before a schema
// change.
const ReasonInvalid = "Invalid"

// compile turns RateLimitRules into snapshot rules. Where several rules name
// the same tenant+route, the oldest wins (creation time, then namespace/name
// so the outcome is deterministic) and the others lose with reason Conflict,
// like a UNIQUE constraint that shows its losers.
func compile(items []v1alpha1.RateLimitRule) compiled {
	order := make([]*v1alpha1.RateLimitRule, len(items))
	for i := range items {
		order[i] = &items[i]
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})

	out := compiled{
		Verdicts: make(map[types.UID]verdict, len(items)),
		Objects:  make(map[types.UID]*v1alpha1.RateLimitRule, len(items)),
		Rules:    make([]snapshot.Rule, 0, len(items)),
	}
	type pair struct{ tenant, route string }
	winners := make(map[pair]string, len(items))
	for _, obj := range order {
		out.Objects[obj.UID] = obj
		source := obj.Namespace + "/" + obj.Name
		v := verdict{Generation: obj.Generation}
		rule, err := snapshot.FromSpec(&obj.Spec, source)
		if err != nil {
			v.Reason, v.Message = ReasonInvalid, err.Error()
			out.Verdicts[obj.UID] = v
			continue
		}
		v.Rate = v1alpha1.FormatRate(rule.RefillTokens, rule.Period())
		key := pair{rule.Tenant, rule.Route}
		if winner, taken := winners[key]; taken {
			v.Reason = v1alpha1.ReasonConflict
			v.Message = fmt.Sprintf("tenant %q route %q is already limited by the older RateLimitRule %s", rule.Tenant, rule.Route, winner)
			out.Verdicts[obj.UID] = v
			continue
		}
		winners[key] = source
		v.Accepted, v.tenant = true, rule.Tenant
		out.Verdicts[obj.UID] = v
		out.Rules = append(out.Rules, rule)
	}
	return out
}
