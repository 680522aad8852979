package gatewayapi

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// compileListeners decides each listener's conditions; certs collects the
// certificate Secrets of accepted HTTPS listeners.
func compileListeners(gw *gwv1.Gateway, in *Input, idx *backendIndex, certs map[string]*Cert) []*listenerState {
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
		ls.kinds, resolvedKinds = routeKinds(l, in.H2C, g)
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
func listenerAccepted(l *gwv1.Listener, in *Input, g int64) metav1.Condition {
	unsupported := func(msg string) metav1.Condition {
		return cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedProtocol), msg, g)
	}
	unavailable := func(proto string, port int32, flag string) metav1.Condition {
		return cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonPortUnavailable),
			fmt.Sprintf("the tollgate gateway Service serves %s on port %d only (the controller's %s), not %d", proto, port, flag, l.Port), g)
	}
	switch {
	case l.Protocol == gwv1.HTTPSProtocolType && in.TLSPort == 0:
		return unsupported("protocol HTTPS is not served: the controller runs with --gateway-tls-port=0")
	case l.Protocol == gwv1.HTTPSProtocolType && l.TLS != nil && l.TLS.Mode != nil && *l.TLS.Mode != gwv1.TLSModeTerminate:
		return unsupported(fmt.Sprintf("tls.mode %s is not supported: the tollgate gateway terminates TLS (mode Terminate)", *l.TLS.Mode))
	case l.Protocol == gwv1.HTTPSProtocolType && l.TLS != nil && len(l.TLS.Options) > 0:
		return cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedValue),
			"tls.options are not supported: tollgate takes no implementation-specific TLS options", g)
	case l.Protocol == gwv1.HTTPSProtocolType && l.Port != in.TLSPort:
		return unavailable("HTTPS", in.TLSPort, "--gateway-tls-port")
	case l.Protocol == gwv1.HTTPSProtocolType:
	case l.Protocol != gwv1.HTTPProtocolType:
		return unsupported(fmt.Sprintf("protocol %s is not supported: the tollgate gateway serves HTTP and HTTPS listeners only (no TLS passthrough, no TLSRoute)", l.Protocol))
	case l.Port != in.Port:
		return unavailable("HTTP", in.Port, "--gateway-port")
	}
	return cond(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "", g)
}

// routeKinds are the route kinds a listener supports (HTTPRoute; and
// GRPCRoute on HTTPS, and on HTTP when the gateways serve h2c: gRPC needs
// HTTP/2), and a ResolvedRefs condition when it asks for others.
func routeKinds(l *gwv1.Listener, h2c bool, g int64) ([]gwv1.RouteGroupKind, *metav1.Condition) {
	supported := []gwv1.RouteGroupKind{{Group: ptrTo(gwv1.Group(gwGroup)), Kind: kindHTTPRoute}}
	grpcOK := l.Protocol == gwv1.HTTPSProtocolType || h2c
	if grpcOK {
		supported = append(supported, gwv1.RouteGroupKind{Group: ptrTo(gwv1.Group(gwGroup)), Kind: kindGRPCRoute})
	}
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return supported, nil
	}
	var kinds []gwv1.RouteGroupKind
	var bad []string
	for _, k := range l.AllowedRoutes.Kinds {
		if k.Group == nil || *k.Group == gwGroup {
			if i := slices.IndexFunc(supported, func(s gwv1.RouteGroupKind) bool { return s.Kind == k.Kind }); i >= 0 {
				kinds = append(kinds, supported[i])
				continue
			}
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
	msg := "route kinds not supported (HTTPRoute and GRPCRoute only): " + strings.Join(bad, ", ")
	if !grpcOK {
		msg = "route kinds not supported (HTTPRoute; GRPCRoute on HTTP listeners needs HTTP/2 without TLS: the controller's --gateway-h2c with the gateways' --h2c): " + strings.Join(bad, ", ")
	}
	c := cond(string(gwv1.ListenerConditionResolvedRefs), false, string(gwv1.ListenerReasonInvalidRouteKinds), msg, g)
	return kinds, &c
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
