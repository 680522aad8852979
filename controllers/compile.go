package controllers

import (
	"fmt"
	"time"

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
	// tenant and route place an accepted rule in its shard.
	tenant, route string
}

// compiled is the result of compiling every rule.
type compiled struct {
	// Rules are the winners, one per tenant+route.
	Rules []snapshot.Rule
	// Verdicts has one entry per RateLimitRule.
	Verdicts map[types.UID]verdict
	// Objects maps UIDs to the compiled objects, for status work and events.
	Objects map[types.UID]*v1alpha1.RateLimitRule
	// NextExpiry is the earliest spec.expiresAt still to come (zero: none),
	// when the snapshot must be compiled again.
	NextExpiry time.Time
}

// compile refuses the items that policy does not allow, compiles the others
// with snapshot.Compile and indexes the verdicts by UID. A refused rule takes
// no part in conflicts: it cannot displace an allowed one.
//
// Rules with a spec.targetRef are expanded first (expandTargets; targets is
// nil outside Gateway API mode): one rule with n route rules compiles as
// n snapshot rules, and its verdict is Accepted when any of them is.
//
// Rules whose spec.expiresAt is at or before now take no part
// (snapshot.CompileAt): their verdict is Expired (or ExpiryInPast).
func compile(items []v1alpha1.RateLimitRule, policy *tenantPolicy, targets *targetObjects, now time.Time) compiled {
	out := compiled{
		Verdicts: make(map[types.UID]verdict, len(items)),
		Objects:  make(map[types.UID]*v1alpha1.RateLimitRule, len(items)),
	}
	originals := items
	items, notFound := expandTargets(items, targets)
	for i := range originals {
		if v, ok := notFound[originals[i].UID]; ok {
			out.Verdicts[originals[i].UID] = v
			out.Objects[originals[i].UID] = &originals[i]
		}
	}
	allowed := items
	refused := map[int]bool{}
	for i := range items {
		obj := &items[i]
		if msg := policy.check(obj.Namespace, obj.Spec.Tenant); msg != "" {
			v := verdict{Generation: obj.Generation, Reason: v1alpha1.ReasonTenantNotAllowed, Message: msg}
			if rule, err := snapshot.FromSpec(&obj.Spec, ""); err == nil {
				v.Rate = v1alpha1.FormatRate(rule.RefillTokens, rule.Period())
			}
			out.Verdicts[obj.UID] = v
			out.Objects[obj.UID] = obj
			refused[i] = true
		}
	}
	if len(refused) > 0 {
		allowed = make([]v1alpha1.RateLimitRule, 0, len(items)-len(refused))
		for i := range items {
			if !refused[i] {
				// A shallow copy: the cache's objects are only read.
				allowed = append(allowed, items[i])
			}
		}
	}
	rules, verdicts, next := snapshot.CompileAt(allowed, now)
	out.Rules, out.NextExpiry = rules, next
	for i := range allowed {
		obj, v := &allowed[i], verdicts[i]
		cv := verdict{Generation: obj.Generation, Accepted: v.Accepted, Reason: v.Reason, Message: v.Message, Rate: v.Rate}
		if v.Rule != nil {
			cv.tenant, cv.route = v.Rule.Tenant, v.Rule.Route
		}
		if prev, ok := out.Verdicts[obj.UID]; ok && (prev.Accepted || !cv.Accepted) {
			continue // an expanded targetRef rule: the first accepted copy speaks
		}
		out.Verdicts[obj.UID] = cv
		out.Objects[obj.UID] = obj
	}
	out.addShadowedTargets(originals)
	return out
}

// addShadowedTargets gives a verdict to the targetRef rules that expanded to
// nothing: every route they target is limited for their tenant by rules of
// the same kind on a more specific target (a rule of the HTTPRoute, the
// HTTPRoute itself over its Gateway), which take precedence.
func (out *compiled) addShadowedTargets(originals []v1alpha1.RateLimitRule) {
	for i := range originals {
		obj := &originals[i]
		if _, ok := out.Verdicts[obj.UID]; !ok && obj.Spec.TargetRef != nil {
			out.Verdicts[obj.UID] = verdict{Generation: obj.Generation, Reason: v1alpha1.ReasonConflict,
				Message: fmt.Sprintf("every route %s %s serves is limited for tenant %q by RateLimitRules of the same kind on a more specific target (an HTTPRoute over its Gateway, a rule of an HTTPRoute over the HTTPRoute), which take precedence",
					obj.Spec.TargetRef.Kind, obj.Spec.TargetRef.Name, obj.Spec.Tenant)}
			out.Objects[obj.UID] = obj
		}
	}
}
