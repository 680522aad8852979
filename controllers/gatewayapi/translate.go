package gatewayapi

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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

// Input is everything one Gateway API pass translates: the objects the
// controller lists from its cache, and what it read from the API server
// (the certificate Secrets and the TLS Secret's current content).
type Input struct {
	Classes    []gwv1.GatewayClass
	Gateways   []gwv1.Gateway
	Routes     []gwv1.HTTPRoute
	GRPCRoutes []gwv1.GRPCRoute
	Services   []corev1.Service
	Slices     []discoveryv1.EndpointSlice
	Grants     []gwv1.ReferenceGrant
	Namespaces map[string]labels.Set // namespace -> labels
	// Port is the listener port the gateway Service serves HTTP on,
	// TLSPort the one it serves HTTPS on (0: none).
	Port, TLSPort int32
	// H2C: the gateways serve HTTP/2 without TLS on Port (their --h2c), so
	// that HTTP listeners take GRPCRoutes; HTTPS listeners always do.
	H2C bool
	// Certs are the certificate Secrets HTTPS listeners of our Gateways
	// reference (CertRefs), read and checked (CheckCertSecret).
	Certs map[types.NamespacedName]*Cert
	// Bundle is the current content of the TLS Secret the gateways read:
	// the last good certificates.
	Bundle map[string][]byte
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

// routeVerdict is what compiling decided for one HTTPRoute or GRPCRoute.
type routeVerdict struct {
	parents []gwv1.RouteParentStatus // ours only
}

// Output is the result of a pass: the route table to publish, and what the
// statuses of the GatewayClasses, Gateways, HTTPRoutes and GRPCRoutes
// should say (ClassStatus, GatewayStatus, RouteParents, GRPCRouteParents).
type Output struct {
	// Table is the route table the gateways load.
	Table     *routetable.Table
	classOK   map[string]bool // our GatewayClasses
	listeners map[types.NamespacedName][]*listenerState
	// gwAccepted: the Gateway's Accepted condition (Programmed is decided
	// after publishing).
	gwAccepted map[types.NamespacedName]metav1.Condition
	routes     map[types.NamespacedName]*routeVerdict // HTTPRoutes
	grpcRoutes map[types.NamespacedName]*routeVerdict
	// certs are the certificate Secrets of accepted HTTPS listeners, for
	// the TLS Secret.
	certs map[string]*Cert
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

// Translate compiles the HTTPRoutes and GRPCRoutes attached to the
// Gateways of our GatewayClasses into a route table, and decides every
// status.
func Translate(in *Input) *Output {
	out := &Output{
		classOK: map[string]bool{}, listeners: map[types.NamespacedName][]*listenerState{},
		gwAccepted: map[types.NamespacedName]metav1.Condition{}, routes: map[types.NamespacedName]*routeVerdict{},
		grpcRoutes: map[types.NamespacedName]*routeVerdict{}, certs: map[string]*Cert{},
	}
	for _, c := range in.Classes {
		if c.Spec.ControllerName == ControllerName {
			out.classOK[c.Name] = true
		}
	}
	idx := newBackendIndex(in)
	gateways := out.compileGateways(in, idx)
	out.tlsConflicts(gateways)
	table := &routetable.Table{Format: routetable.Format, TLS: out.tlsListeners(in)}
	views := routeViews(in, idx)
	for _, v := range views {
		out.candidates(v, gateways, in.Namespaces)
	}
	kindConflicts(views)
	for _, v := range views {
		verdict, byProtocol := v.finish()
		if v.kind == kindGRPCRoute {
			out.grpcRoutes[nn(v.meta)] = verdict
		} else {
			out.routes[nn(v.meta)] = verdict
		}
		// One copy of the rules per kind of listener (HTTP, HTTPS) the
		// route is attached to, each with its own hostnames.
		for _, tls := range []bool{false, true} {
			hostnames, attached := byProtocol[tls]
			if !attached {
				continue
			}
			for _, r := range v.rules {
				r.Hostnames, r.TLS = hostnames, tls
				table.Rules = append(table.Rules, r)
			}
		}
	}
	out.Table = table
	return out
}

// compileGateways decides the listeners and the Accepted condition of every
// Gateway of our classes, and returns those Gateways.
func (out *Output) compileGateways(in *Input, idx *backendIndex) map[types.NamespacedName]*gwv1.Gateway {
	gateways := map[types.NamespacedName]*gwv1.Gateway{}
	for i := range in.Gateways {
		gw := &in.Gateways[i]
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
