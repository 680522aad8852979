package gatewayapi

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// backendIndex resolves backendRefs.
type backendIndex struct {
	services map[types.NamespacedName]*corev1.Service
	slices   map[types.NamespacedName][]*discoveryv1.EndpointSlice
	grants   map[string][]*gwv1.ReferenceGrant // by namespace
}

func newBackendIndex(in *Input) *backendIndex {
	b := &backendIndex{services: map[types.NamespacedName]*corev1.Service{},
		slices: map[types.NamespacedName][]*discoveryv1.EndpointSlice{}, grants: map[string][]*gwv1.ReferenceGrant{}}
	for i := range in.Services {
		b.services[nn(&in.Services[i])] = &in.Services[i]
	}
	for i := range in.Slices {
		s := &in.Slices[i]
		if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
			k := types.NamespacedName{Namespace: s.Namespace, Name: svc}
			b.slices[k] = append(b.slices[k], s)
		}
	}
	b.grants = grantsByNamespace(in.Grants)
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

// resolve resolves one backendRef of a route of kind fromKind (HTTPRoute,
// GRPCRoute) in namespace ns; reason is empty when it resolved.
func (b *backendIndex) resolve(fromKind, ns string, ref *gwv1.BackendRef) (be routetable.Backend, reason, msg string) {
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
	if svcNS != ns && !b.permitted(fromKind, ns, svcNS, "Service", string(ref.Name)) {
		return fail(string(gwv1.RouteReasonRefNotPermitted),
			fmt.Sprintf("backendRef %s/%s: no ReferenceGrant in namespace %s allows %ss from %s to reference it", svcNS, ref.Name, svcNS, fromKind, ns))
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
	protocol, ok := backendProtocol(fromKind, sp.AppProtocol)
	if !ok {
		return fail(string(gwv1.RouteReasonUnsupportedProtocol),
			fmt.Sprintf("Service %s/%s port %d: appProtocol %s is not one the gateway speaks to a %s's backend (HTTP/1.1, or HTTP/2 without TLS: kubernetes.io/h2c; no TLS to backends)",
				svcNS, ref.Name, port, *sp.AppProtocol, fromKind))
	}
	be.Protocol = protocol
	be.Endpoints = b.readyEndpoints(svc, sp)
	return be, "", ""
}

// backendProtocol is how the gateway speaks to a Service port of
// appProtocol for a route of kind: h2c to every GRPCRoute backend (gRPC is
// HTTP/2) and to the appProtocols that say HTTP/2 without TLS
// (kubernetes.io/h2c, and h2c, http2 and grpc as other meshes name it),
// HTTP/1.1 otherwise. ok is false for one it cannot speak: TLS
// (kubernetes.io/wss, https), or WebSocket for a GRPCRoute.
func backendProtocol(kind string, appProtocol *string) (string, bool) {
	p := ""
	if appProtocol != nil {
		p = strings.ToLower(*appProtocol)
	}
	switch p {
	case "kubernetes.io/wss", "https", "kubernetes.io/https":
		return "", false
	case "kubernetes.io/h2c", "h2c", "http2", "grpc":
		return routetable.ProtocolH2C, true
	case "kubernetes.io/ws":
		return "", kind != kindGRPCRoute
	}
	if kind == kindGRPCRoute {
		return routetable.ProtocolH2C, true
	}
	return "", true
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
