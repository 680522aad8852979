package controllers

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// targetObjects are the objects a spec.targetRef may name, by namespace
// and name; nil outside Gateway API mode.
type targetObjects struct {
	routes   map[types.NamespacedName]*gwv1.HTTPRoute
	gateways map[types.NamespacedName]*gwv1.Gateway
}

// Attachment levels, least specific first: a rule on a Gateway (or one
// listener), on an HTTPRoute, on one rule of an HTTPRoute. For the route
// ids several levels target, of one tenant and kind, only the most
// specific applies (GEP-713: the more specific policy wins).
const (
	levelGateway = iota
	levelListener
	levelRoute
	levelRouteRule
)

// expandTargets replaces every RateLimitRule with a spec.targetRef by one
// copy per HTTPRoute rule it limits, with spec.route set to that rule's
// route id (routetable.RuleID), so the snapshot holds one rule per (tenant,
// HTTPRoute rule); the copies keep the object's name, so that a rule not
// keyed by route (spec.by) has one bucket across them. A rule on a
// Gateway limits every HTTPRoute rule attached to it (or to its listener
// sectionName). A more specific target takes precedence over a less
// specific one of the same tenant and kind (spec.by) on the route ids both
// target: the latter is not expanded there. Rules whose target does not
// exist get a TargetNotFound verdict instead.
func expandTargets(items []v1alpha1.RateLimitRule, targets *targetObjects) ([]v1alpha1.RateLimitRule, map[types.UID]verdict) {
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
	type key struct{ kind, tenant, route string }
	best := map[key]int{}
	ids := make(map[int][]string, n)
	levels := make(map[int]int, n)
	for i := range items {
		obj := &items[i]
		if obj.Spec.TargetRef == nil {
			continue
		}
		got, level, msg := targets.ids(obj)
		if msg != "" {
			notFound[obj.UID] = verdict{Generation: obj.Generation, Reason: v1alpha1.ReasonTargetNotFound, Message: msg}
			continue
		}
		ids[i], levels[i] = got, level
		kind := specKind(&obj.Spec)
		for _, id := range got {
			k := key{kind, obj.Spec.Tenant, id}
			if l, ok := best[k]; !ok || level > l {
				best[k] = level
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
		kind := specKind(&obj.Spec)
		for _, id := range ids[i] {
			if best[key{kind, obj.Spec.Tenant, id}] > levels[i] {
				continue
			}
			c := *obj // shallow: only Spec.Route and Spec.TargetRef change
			c.Spec.Route, c.Spec.TargetRef = id, nil
			out = append(out, c)
		}
	}
	return out, notFound
}

// specKind is the kind (snapshot.Rule.Kind) of a spec, "" when it does not
// compile (Compile reports that).
func specKind(spec *v1alpha1.RateLimitRuleSpec) string {
	c := *spec
	c.Route, c.TargetRef = v1alpha1.Wildcard, nil
	r, err := snapshot.FromSpec(&c, "")
	if err != nil {
		return ""
	}
	return r.Kind()
}

// ids are the route ids of the HTTPRoute rules obj's targetRef names, and
// its level, or why there are none.
func (t *targetObjects) ids(obj *v1alpha1.RateLimitRule) ([]string, int, string) {
	ref := obj.Spec.TargetRef
	if t == nil {
		return nil, 0, "spec.targetRef names a " + ref.Kind + ", but the controller does not run in Gateway API mode (--gateway-api)"
	}
	if ref.Kind == "Gateway" {
		return t.gatewayIDs(obj)
	}
	ids, msg := routeIDs(obj, t.routes)
	if ref.SectionName != "" {
		return ids, levelRouteRule, msg
	}
	return ids, levelRoute, msg
}

// gatewayIDs are the route ids of every HTTPRoute rule attached to the
// Gateway obj's targetRef names (by the routes' parentRefs: the Gateway,
// and with sectionName that listener or every listener).
func (t *targetObjects) gatewayIDs(obj *v1alpha1.RateLimitRule) ([]string, int, string) {
	ref := obj.Spec.TargetRef
	gw := t.gateways[types.NamespacedName{Namespace: obj.Namespace, Name: ref.Name}]
	if gw == nil {
		return nil, 0, fmt.Sprintf("Gateway %s/%s (spec.targetRef) does not exist", obj.Namespace, ref.Name)
	}
	level := levelGateway
	if ref.SectionName != "" {
		level = levelListener
		if !hasListener(gw, ref.SectionName) {
			return nil, 0, fmt.Sprintf("Gateway %s/%s has no listener named %q (spec.targetRef.sectionName)", obj.Namespace, ref.Name, ref.SectionName)
		}
	}
	var ids []string
	for _, rt := range t.routes {
		if attaches(rt, gw, ref.SectionName) {
			for j, r := range rt.Spec.Rules {
				section := ""
				if r.Name != nil {
					section = string(*r.Name)
				}
				ids = append(ids, routetable.RuleID(rt.Namespace, rt.Name, section, j))
			}
		}
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return nil, 0, fmt.Sprintf("no HTTPRoute is attached to Gateway %s/%s%s", obj.Namespace, ref.Name, listenerNote(ref.SectionName))
	}
	return ids, level, ""
}

func listenerNote(section string) string {
	if section == "" {
		return ""
	}
	return fmt.Sprintf(" (listener %q)", section)
}

func hasListener(gw *gwv1.Gateway, name string) bool {
	for _, l := range gw.Spec.Listeners {
		if string(l.Name) == name {
			return true
		}
	}
	return false
}

// attaches reports whether rt names gw in a parentRef, for listener
// section (every listener when ""; a parentRef without sectionName
// attaches to every listener).
func attaches(rt *gwv1.HTTPRoute, gw *gwv1.Gateway, section string) bool {
	for _, p := range rt.Spec.ParentRefs {
		ns := rt.Namespace
		if p.Namespace != nil {
			ns = string(*p.Namespace)
		}
		switch {
		case p.Group != nil && *p.Group != gwv1.GroupName, p.Kind != nil && *p.Kind != "Gateway":
		case ns != gw.Namespace || string(p.Name) != gw.Name:
		case section == "" || p.SectionName == nil || string(*p.SectionName) == section:
			return true
		}
	}
	return false
}

// routeIDs are the route ids of the HTTPRoute rules obj's targetRef names,
// or why there are none.
func routeIDs(obj *v1alpha1.RateLimitRule, routes map[types.NamespacedName]*gwv1.HTTPRoute) ([]string, string) {
	t := obj.Spec.TargetRef
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
