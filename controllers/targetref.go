package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// expandTargets replaces every RateLimitRule with a spec.targetRef by one
// copy per HTTPRoute rule it limits, with spec.route set to that rule's
// route id (routetable.RuleID), so the snapshot holds one rule per (tenant,
// HTTPRoute rule). A rule naming one HTTPRoute rule (sectionName) takes
// precedence over a rule of the same tenant for the whole HTTPRoute: the
// latter is not expanded onto that rule. Rules whose target does not exist
// get a TargetNotFound verdict instead. routes is nil when the controller
// does not run in Gateway API mode.
func expandTargets(items []v1alpha1.RateLimitRule, routes map[types.NamespacedName]*gwv1.HTTPRoute) ([]v1alpha1.RateLimitRule, map[types.UID]verdict) {
	n := 0
	for i := range items {
		if items[i].Spec.TargetRef != nil {
			n++
		}
	}
	if n == 0 {
		return items, nil
	}
	notFound := map[types.UID]verdict{}
	out := make([]v1alpha1.RateLimitRule, 0, len(items))
	type key struct{ tenant, route string }
	sectioned := map[key]bool{}
	targets := make(map[int][]string, n)
	for i := range items {
		obj := &items[i]
		t := obj.Spec.TargetRef
		if t == nil {
			continue
		}
		fail := func(msg string) {
			notFound[obj.UID] = verdict{Generation: obj.Generation, Reason: v1alpha1.ReasonTargetNotFound, Message: msg}
		}
		if routes == nil {
			fail("spec.targetRef names an HTTPRoute, but the controller does not run in Gateway API mode (--gateway-api)")
			continue
		}
		rt := routes[types.NamespacedName{Namespace: obj.Namespace, Name: t.Name}]
		if rt == nil {
			fail(fmt.Sprintf("HTTPRoute %s/%s (spec.targetRef) does not exist", obj.Namespace, t.Name))
			continue
		}
		var ids []string
		for j, r := range rt.Spec.Rules {
			section := ""
			if r.Name != nil {
				section = string(*r.Name)
			}
			if t.SectionName == "" || section == t.SectionName {
				ids = append(ids, routetable.RuleID(rt.Namespace, rt.Name, section, j))
			}
		}
		if len(ids) == 0 {
			if t.SectionName != "" {
				fail(fmt.Sprintf("HTTPRoute %s/%s has no rule named %q (spec.targetRef.sectionName)", obj.Namespace, t.Name, t.SectionName))
			} else {
				fail(fmt.Sprintf("HTTPRoute %s/%s has no rules", obj.Namespace, t.Name))
			}
			continue
		}
		targets[i] = ids
		if t.SectionName != "" {
			for _, id := range ids {
				sectioned[key{obj.Spec.Tenant, id}] = true
			}
		}
	}
	for i := range items {
		obj := &items[i]
		if obj.Spec.TargetRef == nil {
			out = append(out, *obj)
			continue
		}
		for _, id := range targets[i] {
			if obj.Spec.TargetRef.SectionName == "" && sectioned[key{obj.Spec.Tenant, id}] {
				continue
			}
			c := *obj // shallow: only Spec.Route and Spec.TargetRef change
			c.Spec.Route, c.Spec.TargetRef = id, nil
			out = append(out, c)
		}
	}
	return out, notFound
}
