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
	type key struct{ tenant, route string }
	sectioned := map[key]bool{}
	targets := make(map[int][]string, n)
	for i := range items {
		obj := &items[i]
		if obj.Spec.TargetRef == nil {
			continue
		}
		ids, msg := targetIDs(obj, routes)
		if msg != "" {
			notFound[obj.UID] = verdict{Generation: obj.Generation, Reason: v1alpha1.ReasonTargetNotFound, Message: msg}
			continue
		}
		targets[i] = ids
		if obj.Spec.TargetRef.SectionName != "" {
			for _, id := range ids {
				sectioned[key{obj.Spec.Tenant, id}] = true
			}
		}
	}
	out := make([]v1alpha1.RateLimitRule, 0, len(items))
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

// targetIDs are the route ids of the HTTPRoute rules obj's targetRef names,
// or why there are none.
func targetIDs(obj *v1alpha1.RateLimitRule, routes map[types.NamespacedName]*gwv1.HTTPRoute) ([]string, string) {
	t := obj.Spec.TargetRef
	if routes == nil {
		return nil, "spec.targetRef names an HTTPRoute, but the controller does not run in Gateway API mode (--gateway-api)"
	}
	rt := routes[types.NamespacedName{Namespace: obj.Namespace, Name: t.Name}]
	if rt == nil {
		return nil, fmt.Sprintf("HTTPRoute %s/%s (spec.targetRef) does not exist", obj.Namespace, t.Name)
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
	switch {
	case len(ids) > 0:
		return ids, ""
	case t.SectionName != "":
		return nil, fmt.Sprintf("HTTPRoute %s/%s has no rule named %q (spec.targetRef.sectionName)", obj.Namespace, t.Name, t.SectionName)
	}
	return nil, fmt.Sprintf("HTTPRoute %s/%s has no rules", obj.Namespace, t.Name)
}
