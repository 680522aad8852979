package gatewayapi

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// Attaching routes to listeners, for both kinds of route: each parentRef
// that names one of our Gateways finds its listeners (candidates); then an
// HTTPRoute and a GRPCRoute that would share a hostname on one listener
// are resolved (kindConflicts: the Gateway API lets one of them attach
// there, the older, then the first by namespace/name); then each route's
// parent statuses, attached-route counts and hostnames follow (finish).

// Route kinds.
const (
	kindHTTPRoute = "HTTPRoute"
	kindGRPCRoute = "GRPCRoute"
)

// routeView is what attaching needs of an HTTPRoute or a GRPCRoute, with
// its compiled rules.
type routeView struct {
	kind      string
	meta      *metav1.ObjectMeta
	hostnames []gwv1.Hostname
	parentRef []gwv1.ParentReference
	// rules, resolved and unsupported are what compiling the route's
	// rules said (compileRules, compileGRPCRules).
	rules       []routetable.Rule
	resolved    metav1.Condition
	unsupported string
	parents     []*parentAttach
}

// parentAttach is one parentRef of a route to one of our Gateways: the
// listeners it attaches to, or why none (refused).
type parentAttach struct {
	ref     gwv1.ParentReference
	refused *metav1.Condition
	on      []*listenerAttach
}

// listenerAttach is a route on one listener, with its effective
// hostnames; lost is set when a route of the other kind keeps them.
type listenerAttach struct {
	ls    *listenerState
	hosts []string
	lost  *routeView
}

// routeViews compiles every HTTPRoute, then every GRPCRoute, each kind in
// "namespace/name" order (the table's order).
func routeViews(in *Input, idx *backendIndex) []*routeView {
	var views []*routeView
	for i := range in.Routes {
		rt := &in.Routes[i]
		v := &routeView{kind: kindHTTPRoute, meta: &rt.ObjectMeta, hostnames: rt.Spec.Hostnames, parentRef: rt.Spec.ParentRefs}
		v.rules, v.resolved, v.unsupported = compileRules(rt, idx)
		views = append(views, v)
	}
	for i := range in.GRPCRoutes {
		rt := &in.GRPCRoutes[i]
		v := &routeView{kind: kindGRPCRoute, meta: &rt.ObjectMeta, hostnames: rt.Spec.Hostnames, parentRef: rt.Spec.ParentRefs}
		v.rules, v.resolved, v.unsupported = compileGRPCRules(rt, idx)
		views = append(views, v)
	}
	sort.SliceStable(views, func(i, j int) bool {
		if views[i].kind != views[j].kind {
			return views[i].kind == kindHTTPRoute
		}
		return nn(views[i].meta).String() < nn(views[j].meta).String()
	})
	return views
}

// candidates finds, for each parentRef of v that names one of our
// Gateways, the listeners v attaches to and its hostnames there.
func (out *Output) candidates(v *routeView, gateways map[types.NamespacedName]*gwv1.Gateway, nsLabels map[string]labels.Set) {
	for _, ref := range v.parentRef {
		if ref.Group != nil && *ref.Group != gwGroup || ref.Kind != nil && *ref.Kind != "Gateway" {
			continue
		}
		ns := v.meta.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		gw := gateways[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]
		if gw == nil {
			continue // not ours, or not there: not ours to report
		}
		v.parents = append(v.parents, v.attach(ref, out.listeners[nn(gw)], nsLabels))
	}
}

// attach finds the listeners that v attaches to through ref.
func (v *routeView) attach(ref gwv1.ParentReference, listeners []*listenerState, nsLabels map[string]labels.Set) *parentAttach {
	p := &parentAttach{ref: ref}
	g := v.meta.Generation
	refuse := func(reason gwv1.RouteConditionReason, msg string) *parentAttach {
		c := cond(string(gwv1.RouteConditionAccepted), false, string(reason), msg, g)
		p.refused = &c
		return p
	}
	var candidates []*listenerState
	for _, ls := range listeners {
		if ref.SectionName != nil && *ref.SectionName != ls.l.Name || ref.Port != nil && *ref.Port != ls.l.Port {
			continue
		}
		candidates = append(candidates, ls)
	}
	if len(candidates) == 0 {
		return refuse(gwv1.RouteReasonNoMatchingParent, "no listener of the Gateway matches the parentRef's sectionName and port")
	}
	var allowed []*listenerState
	takesKind := false
	for _, ls := range candidates {
		if ls.valid && ls.takes(v.kind) {
			takesKind = true
			if allowsNamespace(ls, v.meta.Namespace, nsLabels) {
				allowed = append(allowed, ls)
			}
		}
	}
	switch {
	case !takesKind:
		return refuse(gwv1.RouteReasonNotAllowedByListeners, "no valid listener of the Gateway takes "+v.kind+"s (see its listeners' supportedKinds)")
	case len(allowed) == 0:
		return refuse(gwv1.RouteReasonNotAllowedByListeners, "no valid listener of the Gateway allows "+v.kind+"s from namespace "+v.meta.Namespace)
	}
	for _, ls := range allowed {
		if hs := intersect(ls.l.Hostname, v.hostnames); hs != nil {
			p.on = append(p.on, &listenerAttach{ls: ls, hosts: hs})
		}
	}
	if len(p.on) == 0 {
		return refuse(gwv1.RouteReasonNoMatchingListenerHostname, "no hostname of the route matches a hostname of the allowed listeners")
	}
	return p
}

// takes reports whether the listener supports routes of kind.
func (ls *listenerState) takes(kind string) bool {
	for _, k := range ls.kinds {
		if string(k.Kind) == kind {
			return true
		}
	}
	return false
}

// kindConflicts lets, on each listener, routes of one kind only serve a
// hostname: in order of age, then of "namespace/name", each route's
// attachment to a listener is lost when a route of the other kind, already
// attached there, serves an overlapping hostname. Routes that are not
// accepted (an unsupported field) take no hostname.
func kindConflicts(views []*routeView) {
	order := append([]*routeView(nil), views...)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i].meta, order[j].meta
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return nn(a).String() < nn(b).String()
	})
	type claim struct {
		v     *routeView
		hosts []string
	}
	claims := map[*listenerState][]claim{}
	for _, v := range order {
		if v.unsupported != "" {
			continue
		}
		for _, p := range v.parents {
			for _, la := range p.on {
				for _, c := range claims[la.ls] {
					if c.v.kind != v.kind && hostsOverlap(c.hosts, la.hosts) {
						la.lost = c.v
						break
					}
				}
				if la.lost == nil {
					claims[la.ls] = append(claims[la.ls], claim{v, la.hosts})
				}
			}
		}
	}
}

// hostsOverlap reports whether a request could be for a hostname of a and
// one of b ("" is every host).
func hostsOverlap(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == "" || y == "" || x == y || hostMatches(x, y) || hostMatches(y, x) {
				return true
			}
		}
	}
	return false
}

// hostKey is a hostname ("": every host) a route serves over HTTP or, with
// tls, over HTTPS.
type hostKey struct {
	tls  bool
	host string
}

// finish decides v's parent statuses and counts it on the listeners it
// attached to. It returns, per kind of listener it attached to (tls:
// HTTPS), the hostnames its rules serve there (nil: every host).
func (v *routeView) finish() (*routeVerdict, map[bool][]string) {
	verdict := &routeVerdict{}
	hosts := map[hostKey]bool{}
	g := v.meta.Generation
	for _, p := range v.parents {
		accepted := cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", g)
		if p.refused != nil {
			accepted = *p.refused
		} else if lost := p.attached(v.unsupported == "", hosts); lost != nil {
			accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNotAllowedByListeners),
				fmt.Sprintf("%s %s already serves these hostnames on the listeners: an HTTPRoute and a GRPCRoute cannot share a hostname on a listener (the older route keeps it)",
					lost.kind, nn(lost.meta)), g)
		}
		if v.unsupported != "" {
			accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), v.unsupported, g)
		}
		resolved := v.resolved
		resolved.ObservedGeneration = g
		verdict.parents = append(verdict.parents, gwv1.RouteParentStatus{ParentRef: p.ref, ControllerName: ControllerName,
			Conditions: []metav1.Condition{accepted, resolved}})
	}
	byProtocol := map[bool][]string{}
	for h := range hosts {
		if !hosts[hostKey{tls: h.tls}] {
			byProtocol[h.tls] = append(byProtocol[h.tls], h.host)
		} else {
			byProtocol[h.tls] = nil // every host
		}
	}
	for _, hs := range byProtocol {
		sort.Strings(hs)
	}
	return verdict, byProtocol
}

// attached counts the listeners p kept (with count) and adds their
// hostnames to hosts; it returns the route that took them all, or nil.
func (p *parentAttach) attached(count bool, hosts map[hostKey]bool) *routeView {
	var lost *routeView
	kept := 0
	for _, la := range p.on {
		if la.lost != nil {
			lost = la.lost
			continue
		}
		kept++
		if count {
			la.ls.attached++
			for _, h := range la.hosts {
				hosts[hostKey{la.ls.tls, h}] = true
			}
		}
	}
	if kept > 0 {
		return nil
	}
	return lost
}
