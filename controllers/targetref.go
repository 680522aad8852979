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
	grpc     map[types.NamespacedName]*gwv1.GRPCRoute
	gateways map[types.NamespacedName]*gwv1.Gateway
}

// Attachment levels, least specific first: a rule on a Gateway (or one
// listener), on a route (HTTPRoute, GRPCRoute), on one rule of a route. For the route
// ids several levels target, of one tenant and kind, only the most
// specific applies (GEP-713: the more specific policy wins).
const (
	levelGateway = iota
	levelListener
	levelRoute
	levelRouteRule
)

// expandTargets replaces every RateLimitRule with a spec.targetRef by one
// copy per HTTPRoute or GRPCRoute rule it limits, with spec.route set to
// that rule's route id (routetable.RuleID, GRPCRuleID), so the snapshot
// holds one rule per (tenant, route rule); the copies keep the object's
// name, so that a rule not keyed by route (spec.by) has one bucket across
// them. A rule on a Gateway limits every route rule attached to it (or to
// its listener sectionName). A more specific target takes precedence over a less
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
	ids, msg := t.routeIDs(obj)
	if ref.SectionName != "" {
		return ids, levelRouteRule, msg
	}
	return ids, levelRoute, msg
}

// gatewayIDs are the route ids of every route rule attached to the
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
		if attaches(rt.Namespace, rt.Spec.ParentRefs, gw, ref.SectionName) {
			for j, r := range rt.Spec.Rules {
				ids = append(ids, routetable.RuleID(rt.Namespace, rt.Name, sectionOf(r.Name), j))
			}
		}
	}
	for _, rt := range t.grpc {
		if attaches(rt.Namespace, rt.Spec.ParentRefs, gw, ref.SectionName) {
			for j, r := range rt.Spec.Rules {
				ids = append(ids, routetable.GRPCRuleID(rt.Namespace, rt.Name, sectionOf(r.Name), j))
			}
		}
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return nil, 0, fmt.Sprintf("no HTTPRoute or GRPCRoute is attached to Gateway %s/%s%s", obj.Namespace, ref.Name, listenerNote(ref.SectionName))
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

// attaches reports whether the parentRefs of a route in namespace ns
// name gw, for listener section (every listener when ""; a parentRef
// without sectionName attaches to every listener).
func attaches(routeNS string, parents []gwv1.ParentReference, gw *gwv1.Gateway, section string) bool {
	for _, p := range parents {
		ns := routeNS
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

// routeIDs are the route ids of the HTTPRoute or GRPCRoute rules obj's
// targetRef names, or why there are none.
func (t *targetObjects) routeIDs(obj *v1alpha1.RateLimitRule) ([]string, string) {
	ref := obj.Spec.TargetRef
	key := types.NamespacedName{Namespace: obj.Namespace, Name: ref.Name}
	var sections []string
	ruleID := routetable.RuleID
	switch ref.Kind {
	case "GRPCRoute":
		rt := t.grpc[key]
		if rt == nil {
			return nil, fmt.Sprintf("GRPCRoute %s (spec.targetRef) does not exist", key)
		}
		for _, r := range rt.Spec.Rules {
			sections = append(sections, sectionOf(r.Name))
		}
		ruleID = routetable.GRPCRuleID
	default:
		rt := t.routes[key]
		if rt == nil {
			return nil, fmt.Sprintf("HTTPRoute %s (spec.targetRef) does not exist", key)
		}
		for _, r := range rt.Spec.Rules {
			sections = append(sections, sectionOf(r.Name))
		}
	}
	var ids []string
	for j, section := range sections {
		if ref.SectionName == "" || section == ref.SectionName {
			ids = append(ids, ruleID(key.Namespace, key.Name, section, j))
		}
	}
	switch {
	case len(ids) > 0:
		return ids, ""
	case ref.SectionName != "":
		return nil, fmt.Sprintf("%s %s has no rule named %q (spec.targetRef.sectionName)", ref.Kind, key, ref.SectionName)
	}
	return nil, fmt.Sprintf("%s %s has no rules", ref.Kind, key)
}

// sectionOf is a route rule's name, "" for none.
func sectionOf(name *gwv1.SectionName) string {
	if name == nil {
		return ""
	}
	return string(*name)
}
