package controllers

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// ControllerName is the GatewayClass spec.controllerName that tollgate's
// controller owns.
const ControllerName = "tollgate.dev/gateway-controller"

// gwGroup is the Gateway API group.
const gwGroup = "gateway.networking.k8s.io"

// gwInput is everything one Gateway API pass compiles.
type gwInput struct {
	classes    []gwv1.GatewayClass
	gateways   []gwv1.Gateway
	routes     []gwv1.HTTPRoute
	services   []corev1.Service
	slices     []discoveryv1.EndpointSlice
	grants     []gwv1.ReferenceGrant
	namespaces map[string]labels.Set // namespace -> labels
	// port is the listener port the gateway Service serves HTTP on,
	// tlsPort the one it serves HTTPS on (0: none).
	port, tlsPort int32
	// certs are the certificate Secrets HTTPS listeners of our Gateways
	// reference, read and checked (gatewayapi_tls.go).
	certs map[types.NamespacedName]*certInfo
	// bundle is the current content of the TLS Secret the gateways read:
	// the last good certificates.
	bundle map[string][]byte
}

// listenerState is one listener of one of our Gateways.
type listenerState struct {
	gw    *gwv1.Gateway
	l     *gwv1.Listener
	valid bool // accepted and not conflicted: routes may attach
	tls   bool // an HTTPS listener
	// certs are the certificate Secrets ("namespace/name") an HTTPS
	// listener serves: valid ones, and invalid ones whose last good
	// certificate is in the TLS Secret.
	certs    []string
	kinds    []gwv1.RouteGroupKind
	attached int32
	conds    []metav1.Condition
}

// routeVerdict is what compiling decided for one HTTPRoute.
type routeVerdict struct {
	parents []gwv1.RouteParentStatus // ours only
}

// gwOutput is the result of a pass.
type gwOutput struct {
	table     *routetable.Table
	classOK   map[string]bool // our GatewayClasses
	listeners map[types.NamespacedName][]*listenerState
	// gwAccepted: the Gateway's Accepted condition (Programmed is decided
	// after publishing).
	gwAccepted map[types.NamespacedName]metav1.Condition
	routes     map[types.NamespacedName]*routeVerdict
	// certs are the certificate Secrets of accepted HTTPS listeners, for
	// the TLS Secret.
	certs map[string]*certInfo
}

func nn(o metav1.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
}

func cond(t string, ok bool, reason, msg string, gen int64) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// compileGatewayAPI compiles the HTTPRoutes attached to the Gateways of our
// GatewayClasses into a route table, and decides every status.
func compileGatewayAPI(in *gwInput) *gwOutput {
	out := &gwOutput{
		classOK: map[string]bool{}, listeners: map[types.NamespacedName][]*listenerState{},
		gwAccepted: map[types.NamespacedName]metav1.Condition{}, routes: map[types.NamespacedName]*routeVerdict{},
		certs: map[string]*certInfo{},
	}
	for _, c := range in.classes {
		if c.Spec.ControllerName == ControllerName {
			out.classOK[c.Name] = true
		}
	}
	idx := newBackendIndex(in)
	gateways := out.compileGateways(in, idx)
	out.tlsConflicts(gateways)
	table := &routetable.Table{Format: routetable.Format, TLS: out.tlsListeners(in)}
	routes := append([]gwv1.HTTPRoute(nil), in.routes...)
	sort.Slice(routes, func(i, j int) bool { return nn(&routes[i]).String() < nn(&routes[j]).String() })
	for i := range routes {
		rt := &routes[i]
		rules, resolved, unsupported := compileRules(rt, idx)
		v, byProtocol := out.attachRoute(rt, gateways, in.namespaces, resolved, unsupported)
		out.routes[nn(rt)] = v
		// One copy of the rules per kind of listener (HTTP, HTTPS) the
		// route is attached to, each with its own hostnames.
		for _, tls := range []bool{false, true} {
			hostnames, attached := byProtocol[tls]
			if !attached {
				continue
			}
			for _, r := range rules {
				r.Hostnames, r.TLS = hostnames, tls
				table.Rules = append(table.Rules, r)
			}
		}
	}
	out.table = table
	return out
}

// compileGateways decides the listeners and the Accepted condition of every
// Gateway of our classes, and returns those Gateways.
func (out *gwOutput) compileGateways(in *gwInput, idx *backendIndex) map[types.NamespacedName]*gwv1.Gateway {
	gateways := map[types.NamespacedName]*gwv1.Gateway{}
	for i := range in.gateways {
		gw := &in.gateways[i]
		if !out.classOK[string(gw.Spec.GatewayClassName)] {
			continue
		}
		gateways[nn(gw)] = gw
		out.listeners[nn(gw)] = compileListeners(gw, in, idx, out.certs)
		valid := 0
		for _, ls := range out.listeners[nn(gw)] {
			if ls.valid {
				valid++
			}
		}
		switch {
		case gw.Spec.TLS != nil:
			out.gwAccepted[nn(gw)] = cond(string(gwv1.GatewayConditionAccepted), false, "UnsupportedValue",
				"spec.tls is not supported: tollgate validates no client certificates and presents none to backends", gw.Generation)
		case len(gw.Spec.Addresses) > 0:
			out.gwAccepted[nn(gw)] = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonUnsupportedAddress),
				"spec.addresses is not supported: the Gateway's address is the tollgate gateway Service's", gw.Generation)
		case valid == len(gw.Spec.Listeners):
			out.gwAccepted[nn(gw)] = cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonAccepted), "served by the tollgate gateway pods", gw.Generation)
		case valid > 0:
			out.gwAccepted[nn(gw)] = cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonListenersNotValid),
				fmt.Sprintf("%d of %d listeners are not valid; see status.listeners", len(gw.Spec.Listeners)-valid, len(gw.Spec.Listeners)), gw.Generation)
		default:
			out.gwAccepted[nn(gw)] = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonListenersNotValid),
				"no listener is valid; see status.listeners", gw.Generation)
		}
		if out.gwAccepted[nn(gw)].Status != metav1.ConditionTrue {
			// A Gateway that is not accepted serves nothing.
			for _, ls := range out.listeners[nn(gw)] {
				ls.valid = false
				ls.conds[3] = cond(string(gwv1.ListenerConditionProgrammed), false, string(gwv1.ListenerReasonInvalid), "the Gateway is not accepted", gw.Generation)
			}
		}
	}
	return gateways
}

// hostKey is a hostname ("": every host) a route serves over HTTP or, with
// tls, over HTTPS.
type hostKey struct {
	tls  bool
	host string
}

// attachRoute attaches rt through each of its parentRefs that names one of
// our Gateways. It returns the route's parent statuses and, per kind of
// listener it attached to (tls: HTTPS), the hostnames its rules serve there
// (nil: every host).
func (out *gwOutput) attachRoute(rt *gwv1.HTTPRoute, gateways map[types.NamespacedName]*gwv1.Gateway, nsLabels map[string]labels.Set,
	resolved metav1.Condition, unsupported string) (*routeVerdict, map[bool][]string) {
	v := &routeVerdict{}
	hosts := map[hostKey]bool{}
	for _, ref := range rt.Spec.ParentRefs {
		if ref.Group != nil && *ref.Group != gwGroup || ref.Kind != nil && *ref.Kind != "Gateway" {
			continue
		}
		ns := rt.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		gw := gateways[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]
		if gw == nil {
			continue // not ours, or not there: not ours to report
		}
		accepted := attach(rt, ref, out.listeners[nn(gw)], nsLabels, hosts, unsupported == "")
		if unsupported != "" {
			accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), unsupported, rt.Generation)
		}
		resolved.ObservedGeneration = rt.Generation
		v.parents = append(v.parents, gwv1.RouteParentStatus{ParentRef: ref, ControllerName: ControllerName,
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
	return v, byProtocol
}

// compileListeners decides each listener's conditions; certs collects the
// certificate Secrets of accepted HTTPS listeners.
func compileListeners(gw *gwv1.Gateway, in *gwInput, idx *backendIndex, certs map[string]*certInfo) []*listenerState {
	var out []*listenerState
	seen := map[string]bool{} // port and hostname of accepted listeners
	g := gw.Generation
	for i := range gw.Spec.Listeners {
		l := &gw.Spec.Listeners[i]
		ls := &listenerState{gw: gw, l: l, tls: l.Protocol == gwv1.HTTPSProtocolType}
		out = append(out, ls)
		accepted := listenerAccepted(l, in, g)
		conflicted := cond(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "", g)
		resolved := cond(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "", g)
		var resolvedKinds *metav1.Condition
		ls.kinds, resolvedKinds = routeKinds(l, g)
		if resolvedKinds != nil {
			resolved = *resolvedKinds
		}
		if accepted.Status == metav1.ConditionTrue {
			host := ""
			if l.Hostname != nil {
				host = strings.ToLower(string(*l.Hostname))
			}
			if key := fmt.Sprintf("%d %s", l.Port, host); seen[key] {
				conflicted = cond(string(gwv1.ListenerConditionConflicted), true, string(gwv1.ListenerReasonHostnameConflict),
					fmt.Sprintf("an earlier listener on port %d has the same hostname %q", l.Port, host), g)
				accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonHostnameConflict), conflicted.Message, g)
			} else {
				seen[key] = true
			}
		}
		ls.valid = accepted.Status == metav1.ConditionTrue && len(ls.kinds) > 0
		certsResolved := true
		if ls.tls && accepted.Status == metav1.ConditionTrue {
			if c := ls.resolveCerts(in, idx, certs); c != nil {
				resolved, certsResolved = *c, false
			}
		}
		programmed := cond(string(gwv1.ListenerConditionProgrammed), ls.valid, string(gwv1.ListenerReasonProgrammed), "", g)
		switch {
		case !ls.valid:
			programmed = cond(string(gwv1.ListenerConditionProgrammed), false, string(gwv1.ListenerReasonInvalid), "the listener is not accepted or supports no route kind", g)
		case !certsResolved:
			programmed = cond(string(gwv1.ListenerConditionProgrammed), false, string(gwv1.ListenerReasonInvalid), "a certificate reference is not resolved; see ResolvedRefs", g)
		}
		ls.conds = []metav1.Condition{accepted, conflicted, resolved, programmed}
	}
	return out
}

// listenerAccepted is a listener's Accepted condition before conflicts: HTTP
// on the gateway Service's HTTP port, HTTPS (TLS terminated) on its HTTPS
// port.
func listenerAccepted(l *gwv1.Listener, in *gwInput, g int64) metav1.Condition {
	unsupported := func(msg string) metav1.Condition {
		return cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedProtocol), msg, g)
	}
	unavailable := func(proto string, port int32, flag string) metav1.Condition {
		return cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonPortUnavailable),
			fmt.Sprintf("the tollgate gateway Service serves %s on port %d only (the controller's %s), not %d", proto, port, flag, l.Port), g)
	}
	switch {
	case l.Protocol == gwv1.HTTPSProtocolType && in.tlsPort == 0:
		return unsupported("protocol HTTPS is not served: the controller runs with --gateway-tls-port=0")
	case l.Protocol == gwv1.HTTPSProtocolType && l.TLS != nil && l.TLS.Mode != nil && *l.TLS.Mode != gwv1.TLSModeTerminate:
		return unsupported(fmt.Sprintf("tls.mode %s is not supported: the tollgate gateway terminates TLS (mode Terminate)", *l.TLS.Mode))
	case l.Protocol == gwv1.HTTPSProtocolType && l.TLS != nil && len(l.TLS.Options) > 0:
		return cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedValue),
			"tls.options are not supported: tollgate takes no implementation-specific TLS options", g)
	case l.Protocol == gwv1.HTTPSProtocolType && l.Port != in.tlsPort:
		return unavailable("HTTPS", in.tlsPort, "--gateway-tls-port")
	case l.Protocol == gwv1.HTTPSProtocolType:
	case l.Protocol != gwv1.HTTPProtocolType:
		return unsupported(fmt.Sprintf("protocol %s is not supported: the tollgate gateway serves HTTP and HTTPS listeners only (no TLS passthrough, no TLSRoute)", l.Protocol))
	case l.Port != in.port:
		return unavailable("HTTP", in.port, "--gateway-port")
	}
	return cond(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "", g)
}

// routeKinds are the route kinds a listener supports (HTTPRoute only), and
// a ResolvedRefs condition when it asks for others.
func routeKinds(l *gwv1.Listener, g int64) ([]gwv1.RouteGroupKind, *metav1.Condition) {
	httpRoute := gwv1.RouteGroupKind{Group: ptrTo(gwv1.Group(gwGroup)), Kind: "HTTPRoute"}
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return []gwv1.RouteGroupKind{httpRoute}, nil
	}
	var kinds []gwv1.RouteGroupKind
	var bad []string
	for _, k := range l.AllowedRoutes.Kinds {
		if (k.Group == nil || *k.Group == gwGroup) && k.Kind == "HTTPRoute" {
			kinds = append(kinds, httpRoute)
			continue
		}
		grp := gwGroup
		if k.Group != nil {
			grp = string(*k.Group)
		}
		bad = append(bad, grp+"/"+string(k.Kind))
	}
	if len(bad) == 0 {
		return kinds, nil
	}
	c := cond(string(gwv1.ListenerConditionResolvedRefs), false, string(gwv1.ListenerReasonInvalidRouteKinds),
		"route kinds not supported (HTTPRoute only): "+strings.Join(bad, ", "), g)
	return kinds, &c
}

// attach attaches rt through one parentRef to the matching listeners and
// returns the Accepted condition. Attached listeners count the route, and the
// effective hostnames are added to hosts, when count is set.
func attach(rt *gwv1.HTTPRoute, ref gwv1.ParentReference, listeners []*listenerState, nsLabels map[string]labels.Set, hosts map[hostKey]bool, count bool) metav1.Condition {
	g := rt.Generation
	var candidates []*listenerState
	for _, ls := range listeners {
		if ref.SectionName != nil && *ref.SectionName != ls.l.Name || ref.Port != nil && *ref.Port != ls.l.Port {
			continue
		}
		candidates = append(candidates, ls)
	}
	if len(candidates) == 0 {
		return cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNoMatchingParent),
			"no listener of the Gateway matches the parentRef's sectionName and port", g)
	}
	var allowed []*listenerState
	for _, ls := range candidates {
		if ls.valid && allowsNamespace(ls, rt.Namespace, nsLabels) {
			allowed = append(allowed, ls)
		}
	}
	if len(allowed) == 0 {
		return cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNotAllowedByListeners),
			"no valid listener of the Gateway allows HTTPRoutes from namespace "+rt.Namespace, g)
	}
	attached := 0
	for _, ls := range allowed {
		hs := intersect(ls.l.Hostname, rt.Spec.Hostnames)
		if hs == nil {
			continue
		}
		attached++
		if count {
			ls.attached++
			for _, h := range hs {
				hosts[hostKey{ls.tls, h}] = true
			}
		}
	}
	if attached == 0 {
		return cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNoMatchingListenerHostname),
			"no hostname of the route matches a hostname of the allowed listeners", g)
	}
	return cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", g)
}

func allowsNamespace(ls *listenerState, ns string, nsLabels map[string]labels.Set) bool {
	from := gwv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if ar := ls.l.AllowedRoutes; ar != nil && ar.Namespaces != nil {
		if ar.Namespaces.From != nil {
			from = *ar.Namespaces.From
		}
		sel = ar.Namespaces.Selector
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSame:
		return ns == ls.gw.Namespace
	case gwv1.NamespacesFromSelector:
		if sel == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && s.Matches(nsLabels[ns])
	}
	return false
}

// intersect returns the effective hostnames of a route under a listener:
// "" for every host, nil when they do not intersect.
func intersect(listener *gwv1.Hostname, route []gwv1.Hostname) []string {
	l := ""
	if listener != nil {
		l = strings.ToLower(string(*listener))
	}
	if len(route) == 0 {
		return []string{l}
	}
	var out []string
	for _, rh := range route {
		r := strings.ToLower(string(rh))
		switch {
		case l == "":
			out = append(out, r)
		case hostMatches(l, r):
			out = append(out, r) // r is the more specific (or equal)
		case hostMatches(r, l):
			out = append(out, l)
		}
	}
	return out
}

// hostMatches reports whether pattern (exact or "*.suffix") covers h (exact
// or wildcard).
func hostMatches(pattern, h string) bool {
	if !strings.HasPrefix(pattern, "*.") {
		return pattern == h
	}
	suffix := pattern[1:] // ".example.com"
	if strings.HasPrefix(h, "*.") {
		return strings.HasSuffix(h[1:], suffix)
	}
	return strings.HasSuffix(h, suffix) && len(h) > len(suffix)
}

// backendIndex resolves backendRefs.
type backendIndex struct {
	services map[types.NamespacedName]*corev1.Service
	slices   map[types.NamespacedName][]*discoveryv1.EndpointSlice
	grants   map[string][]*gwv1.ReferenceGrant // by namespace
}

func newBackendIndex(in *gwInput) *backendIndex {
	b := &backendIndex{services: map[types.NamespacedName]*corev1.Service{},
		slices: map[types.NamespacedName][]*discoveryv1.EndpointSlice{}, grants: map[string][]*gwv1.ReferenceGrant{}}
	for i := range in.services {
		b.services[nn(&in.services[i])] = &in.services[i]
	}
	for i := range in.slices {
		s := &in.slices[i]
		if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
			k := types.NamespacedName{Namespace: s.Namespace, Name: svc}
			b.slices[k] = append(b.slices[k], s)
		}
	}
	b.grants = grantsByNamespace(in.grants)
	return b
}

func grantsByNamespace(grants []gwv1.ReferenceGrant) map[string][]*gwv1.ReferenceGrant {
	out := map[string][]*gwv1.ReferenceGrant{}
	for i := range grants {
		out[grants[i].Namespace] = append(out[grants[i].Namespace], &grants[i])
	}
	return out
}

// permitted reports whether a ReferenceGrant in ns lets objects of kind
// fromKind (of the Gateway API group) in namespace from reference the core
// object toKind name (an HTTPRoute a Service, a Gateway a Secret).
func (b *backendIndex) permitted(fromKind, from, ns, toKind, name string) bool {
	for _, g := range b.grants[ns] {
		okFrom := false
		for _, f := range g.Spec.From {
			if f.Group == gwGroup && string(f.Kind) == fromKind && string(f.Namespace) == from {
				okFrom = true
			}
		}
		if !okFrom {
			continue
		}
		for _, t := range g.Spec.To {
			if t.Group == "" && string(t.Kind) == toKind && (t.Name == nil || string(*t.Name) == name) {
				return true
			}
		}
	}
	return false
}

// resolve resolves one backendRef of route namespace ns; reason is empty
// when it resolved.
func (b *backendIndex) resolve(ns string, ref *gwv1.HTTPBackendRef) (be routetable.Backend, reason, msg string) {
	be.Weight = 1
	if ref.Weight != nil {
		be.Weight = *ref.Weight
	}
	svcNS := ns
	if ref.Namespace != nil {
		svcNS = string(*ref.Namespace)
	}
	port := int32(0)
	if ref.Port != nil {
		port = *ref.Port
	}
	be.Name = fmt.Sprintf("%s/%s:%d", svcNS, ref.Name, port)
	fail := func(reason, msg string) (routetable.Backend, string, string) {
		be.Error = msg
		return be, reason, msg
	}
	if ref.Group != nil && *ref.Group != "" || ref.Kind != nil && *ref.Kind != "Service" {
		return fail(string(gwv1.RouteReasonInvalidKind), fmt.Sprintf("backendRef %s: only core Services are supported", ref.Name))
	}
	if svcNS != ns && !b.permitted("HTTPRoute", ns, svcNS, "Service", string(ref.Name)) {
		return fail(string(gwv1.RouteReasonRefNotPermitted),
			fmt.Sprintf("backendRef %s/%s: no ReferenceGrant in namespace %s allows HTTPRoutes from %s to reference it", svcNS, ref.Name, svcNS, ns))
	}
	svc := b.services[types.NamespacedName{Namespace: svcNS, Name: string(ref.Name)}]
	if svc == nil {
		return fail(string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("Service %s/%s not found", svcNS, ref.Name))
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == port {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return fail(string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("Service %s/%s has no port %d", svcNS, ref.Name, port))
	}
	be.Endpoints = b.readyEndpoints(svc, sp)
	return be, "", ""
}

// readyEndpoints are the ready addresses of svc's EndpointSlices for the
// Service port sp, as "ip:port", sorted.
func (b *backendIndex) readyEndpoints(svc *corev1.Service, sp *corev1.ServicePort) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range b.slices[nn(svc)] {
		var epPort int32 = -1
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if name == sp.Name && p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
				epPort = *p.Port
			}
		}
		if epPort < 0 || s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				addr := net.JoinHostPort(a, strconv.Itoa(int(epPort)))
				if !seen[addr] {
					seen[addr] = true
					out = append(out, addr)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// compileRules compiles rt's rules. resolved is the route's ResolvedRefs
// condition; unsupported, when not empty, says which field uses a feature
// tollgate does not implement (the route is then not accepted).
func compileRules(rt *gwv1.HTTPRoute, idx *backendIndex) (rules []routetable.Rule, resolved metav1.Condition, unsupported string) {
	resolved = cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", rt.Generation)
	var problems []string
	for i := range rt.Spec.Rules {
		out, msg := compileRule(rt, i)
		if msg != "" {
			return nil, resolved, msg
		}
		r := &rt.Spec.Rules[i]
		for j := range r.BackendRefs {
			ref := &r.BackendRefs[j]
			if len(ref.Filters) > 0 {
				return nil, resolved, fmt.Sprintf("spec.rules[%d].backendRefs[%d].filters is not supported", i, j)
			}
			be, reason, msg := idx.resolve(rt.Namespace, ref)
			if reason != "" {
				if resolved.Status == metav1.ConditionTrue {
					resolved = cond(string(gwv1.RouteConditionResolvedRefs), false, reason, "", rt.Generation)
				}
				problems = append(problems, msg)
			}
			out.Backends = append(out.Backends, be)
		}
		rules = append(rules, out)
	}
	if len(problems) > 0 {
		resolved.Message = strings.Join(problems, "; ")
	}
	return rules, resolved, ""
}

// compileRule compiles rule i of rt without its backends; msg, when not
// empty, names a field tollgate does not support.
func compileRule(rt *gwv1.HTTPRoute, i int) (out routetable.Rule, msg string) {
	r := &rt.Spec.Rules[i]
	field := fmt.Sprintf("spec.rules[%d]", i)
	section := ""
	if r.Name != nil {
		section = string(*r.Name)
	}
	out = routetable.Rule{
		ID: routetable.RuleID(rt.Namespace, rt.Name, section, i), Route: rt.Namespace + "/" + rt.Name,
		Created: rt.CreationTimestamp.Unix(), Index: i,
	}
	switch {
	case r.Retry != nil:
		return out, field + ".retry is not supported"
	case r.SessionPersistence != nil:
		return out, field + ".sessionPersistence is not supported"
	}
	matches := r.Matches
	if len(matches) == 0 {
		matches = []gwv1.HTTPRouteMatch{{}}
	}
	for j, m := range matches {
		cm, msg := compileMatch(m, fmt.Sprintf("%s.matches[%d]", field, j))
		if msg != "" {
			return out, msg
		}
		out.Matches = append(out.Matches, cm)
	}
	for j, f := range r.Filters {
		cf, msg := compileFilter(f, fmt.Sprintf("%s.filters[%d]", field, j))
		if msg != "" {
			return out, msg
		}
		out.Filters = append(out.Filters, cf)
	}
	if t := r.Timeouts; t != nil {
		for _, d := range []struct {
			v    *gwv1.Duration
			name string
			dst  *int64
		}{{t.Request, "request", &out.RequestTimeoutMs}, {t.BackendRequest, "backendRequest", &out.BackendTimeoutMs}} {
			if d.v == nil {
				continue
			}
			dur, err := time.ParseDuration(string(*d.v))
			if err != nil || dur < 0 {
				return out, fmt.Sprintf("%s.timeouts.%s %q is not a valid duration", field, d.name, *d.v)
			}
			*d.dst = dur.Milliseconds()
		}
	}
	return out, ""
}

func compileMatch(m gwv1.HTTPRouteMatch, field string) (routetable.Match, string) {
	out := routetable.Match{PathType: routetable.PathPrefix, PathValue: "/"}
	if p := m.Path; p != nil {
		if p.Type != nil {
			switch *p.Type {
			case gwv1.PathMatchExact:
				out.PathType = routetable.PathExact
			case gwv1.PathMatchPathPrefix:
			default:
				return out, fmt.Sprintf("%s.path.type %s is not supported (Exact and PathPrefix are)", field, *p.Type)
			}
		}
		if p.Value != nil {
			out.PathValue = *p.Value
		}
		if out.PathType == routetable.PathPrefix && out.PathValue != "/" {
			out.PathValue = strings.TrimSuffix(out.PathValue, "/")
		}
	}
	if m.Method != nil {
		out.Method = string(*m.Method)
	}
	seen := map[string]bool{}
	for k, h := range m.Headers {
		if h.Type != nil && *h.Type != gwv1.HeaderMatchExact {
			return out, fmt.Sprintf("%s.headers[%d].type %s is not supported (Exact is)", field, k, *h.Type)
		}
		// Only the first match of a header name counts (HTTPRoute spec).
		if name := strings.ToLower(string(h.Name)); !seen[name] {
			seen[name] = true
			out.Headers = append(out.Headers, routetable.NameValue{Name: name, Value: h.Value})
		}
	}
	seen = map[string]bool{}
	for k, q := range m.QueryParams {
		if q.Type != nil && *q.Type != gwv1.QueryParamMatchExact {
			return out, fmt.Sprintf("%s.queryParams[%d].type %s is not supported (Exact is)", field, k, *q.Type)
		}
		if !seen[string(q.Name)] {
			seen[string(q.Name)] = true
			out.Query = append(out.Query, routetable.NameValue{Name: string(q.Name), Value: q.Value})
		}
	}
	return out, ""
}

func compileFilter(f gwv1.HTTPRouteFilter, field string) (routetable.Filter, string) {
	out := routetable.Filter{Type: string(f.Type)}
	nvs := func(hs []gwv1.HTTPHeader) []routetable.NameValue {
		var o []routetable.NameValue
		for _, h := range hs {
			o = append(o, routetable.NameValue{Name: string(h.Name), Value: h.Value})
		}
		return o
	}
	path := func(p *gwv1.HTTPPathModifier) {
		if p == nil {
			return
		}
		out.PathType = string(p.Type)
		if p.ReplaceFullPath != nil {
			out.PathValue = *p.ReplaceFullPath
		}
		if p.ReplacePrefixMatch != nil {
			out.PathValue = *p.ReplacePrefixMatch
		}
	}
	switch f.Type {
	case gwv1.HTTPRouteFilterRequestHeaderModifier:
		if m := f.RequestHeaderModifier; m != nil {
			out.Set, out.Add, out.Remove = nvs(m.Set), nvs(m.Add), m.Remove
		}
	case gwv1.HTTPRouteFilterRequestRedirect:
		if r := f.RequestRedirect; r != nil {
			if r.Scheme != nil {
				out.Scheme = *r.Scheme
			}
			if r.Hostname != nil {
				out.Hostname = string(*r.Hostname)
			}
			if r.Port != nil {
				out.Port = *r.Port
			}
			if r.StatusCode != nil {
				out.StatusCode = *r.StatusCode
			}
			path(r.Path)
		}
	case gwv1.HTTPRouteFilterURLRewrite:
		if r := f.URLRewrite; r != nil {
			if r.Hostname != nil {
				out.Hostname = string(*r.Hostname)
			}
			path(r.Path)
		}
	default:
		return out, fmt.Sprintf("%s.type %s is not supported (RequestHeaderModifier, RequestRedirect and URLRewrite are)", field, f.Type)
	}
	return out, ""
}

func ptrTo[T any](v T) *T { return &v }

// setConditions returns cur with want set (keeping lastTransitionTime of
// unchanged conditions).
func setConditions(cur, want []metav1.Condition) []metav1.Condition {
	out := append([]metav1.Condition(nil), cur...)
	for _, c := range want {
		meta.SetStatusCondition(&out, c)
	}
	return out
}
