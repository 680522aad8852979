package snapshot

import (
	"fmt"
	"sort"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// ReasonInvalid marks a rule that cannot be compiled. The API server's schema
// refuses such specs, so in a cluster this only happens for objects stored
// before a schema change; rule files read by a standalone gateway are not
// checked by any API server.
const ReasonInvalid = "Invalid"

// Verdict is what compiling decided about one RateLimitRule.
type Verdict struct {
	// Accepted is true for the rule in force for its tenant+route.
	Accepted bool
	// Reason (v1alpha1.ReasonConflict or ReasonInvalid) and Message explain
	// a rule that is not accepted.
	Reason  string
	Message string
	// Rate is the refill rate in short form ("100/s"), for status.rate.
	Rate string
	// Rule is the compiled rule; set when Accepted.
	Rule *Rule
}

// Compile turns RateLimitRules into snapshot rules, one per tenant+route
// (and claims, spec.match.claims, and kind, spec.by). Where several rules
// name the same tenant+route with the same claims and kind, the oldest wins (creation
// time, then namespace/name, so the outcome is deterministic) and the others
// lose with reason Conflict, like a UNIQUE constraint that shows its losers.
// A loser's message names the winner only when both are in the same
// namespace; otherwise it says "in another namespace".
// verdicts[i] is the verdict on items[i]; rules holds the winners.
func Compile(items []v1alpha1.RateLimitRule) (rules []Rule, verdicts []Verdict) {
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := &items[order[i]], &items[order[j]]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})

	verdicts = make([]Verdict, len(items))
	rules = make([]Rule, 0, len(items))
	type pair struct{ kind, tenant, route, claims string }
	type owner struct{ namespace, source string }
	winners := make(map[pair]owner, len(items))
	for _, i := range order {
		obj := &items[i]
		source := obj.Namespace + "/" + obj.Name
		rule, err := FromSpec(&obj.Spec, source)
		if err != nil {
			verdicts[i] = Verdict{Reason: ReasonInvalid, Message: err.Error()}
			continue
		}
		rule.InForce(obj.Status.Regions)
		v := Verdict{Rate: v1alpha1.FormatRate(rule.RefillTokens, rule.Period())}
		key := pair{rule.Kind(), rule.Tenant, rule.Route, rule.ClaimsKey()}
		if winner, taken := winners[key]; taken {
			v.Reason = v1alpha1.ReasonConflict
			// The winner is named only within the same namespace: another
			// namespace's object names are not this namespace's business.
			by := "an older RateLimitRule in another namespace"
			if winner.namespace == obj.Namespace {
				by = "the older RateLimitRule " + winner.source
			}
			v.Message = fmt.Sprintf("tenant %q route %q%s%s is already limited by %s", rule.Tenant, rule.Route, claimsNote(&rule), kindNote(&rule), by)
			verdicts[i] = v
			continue
		}
		winners[key] = owner{obj.Namespace, source}
		// rules has capacity for every item, so this append never moves it
		// and the pointer stays valid.
		rules = append(rules, rule)
		v.Accepted, v.Rule = true, &rules[len(rules)-1]
		verdicts[i] = v
	}
	return rules, verdicts
}

// Build partitions rules into a Set of the right shard count, all shards at
// version. It is what a reader of rule files uses; the controller writes
// shards to ConfigMaps instead.
func Build(rules []Rule, version int64) *Set {
	count := ShardCount(len(rules), 0)
	shards := make([]*Shard, count)
	for i, part := range Partition(rules, count) {
		shards[i] = NewShard(i, count, version, part)
	}
	set, _ := NewSet(shards) // complete by construction
	return set
}
