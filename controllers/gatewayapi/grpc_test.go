package gatewayapi

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// grpcInput is one Gateway infra/gw with an HTTP and an HTTPS listener
// (every namespace allowed) and, per name, a Service ns/name with port 80
// (appProtocol from protocols, if named) and one ready endpoint 10.0.1.<i>.
func grpcInput(h2c bool, protocols map[string]string, services ...string) *Input {
	in := &Input{Port: 80, TLSPort: 443, H2C: h2c, Namespaces: map[string]labels.Set{}}
	in.Classes = []gwv1.GatewayClass{{ObjectMeta: metav1.ObjectMeta{Name: "tollgate"}, Spec: gwv1.GatewayClassSpec{ControllerName: ControllerName}}}
	all := gwv1.NamespacesFromAll
	allowAll := &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &all}}
	in.Gateways = []gwv1.Gateway{{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: "tollgate",
		Listeners: []gwv1.Listener{
			{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType, AllowedRoutes: allowAll},
			{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, AllowedRoutes: allowAll,
				TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert"}}}},
		},
	}}}
	in.Certs = map[types.NamespacedName]*Cert{{Namespace: "infra", Name: "cert"}: {}}
	for i, key := range services {
		ns, name, _ := strings.Cut(key, "/")
		port := corev1.ServicePort{Port: 80}
		if p, ok := protocols[key]; ok {
			port.AppProtocol = ptr.To(p)
		}
		in.Services = append(in.Services, corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{port}}})
		in.Slices = append(in.Slices, discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Port: ptr.To(int32(8080))}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.1." + itoa(i+1)}}},
		})
	}
	return in
}

// gr is a GRPCRoute ns/name attached to infra/gw (sectionName section, ""
// for every listener) with the given rules.
func gr(ns, name string, created time.Time, section string, hosts []string, rules ...gwv1.GRPCRouteRule) gwv1.GRPCRoute {
	r := gwv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(created)}}
	ref := gwv1.ParentReference{Name: "gw", Namespace: ptr.To(gwv1.Namespace("infra"))}
	if section != "" {
		ref.SectionName = ptr.To(gwv1.SectionName(section))
	}
	r.Spec.ParentRefs = []gwv1.ParentReference{ref}
	for _, h := range hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	r.Spec.Rules = rules
	return r
}

// grpcRule is a GRPCRoute rule named name ("" for none) with one match
// of service and method ("" for none) and headers, to backends (ns/name,
// weight 1 each).
func grpcRule(name, service, method string, headers []string, backends ...string) gwv1.GRPCRouteRule {
	r := gwv1.GRPCRouteRule{}
	if name != "" {
		r.Name = ptr.To(gwv1.SectionName(name))
	}
	m := gwv1.GRPCRouteMatch{}
	if service != "" || method != "" {
		m.Method = &gwv1.GRPCMethodMatch{}
		if service != "" {
			m.Method.Service = ptr.To(service)
		}
		if method != "" {
			m.Method.Method = ptr.To(method)
		}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers = append(m.Headers, gwv1.GRPCHeaderMatch{Name: gwv1.GRPCHeaderName(headers[i]), Value: headers[i+1]})
	}
	r.Matches = []gwv1.GRPCRouteMatch{m}
	for _, b := range backends {
		ns, name, _ := strings.Cut(b, "/")
		r.BackendRefs = append(r.BackendRefs, gwv1.GRPCBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
			Name: gwv1.ObjectName(name), Namespace: ptr.To(gwv1.Namespace(ns)), Port: ptr.To(gwv1.PortNumber(80))}}})
	}
	return r
}

// accepted is route v's first parent's Accepted and ResolvedRefs, as
// "Status/Reason" each.
func accepted(v *routeVerdict) (string, string) {
	if v == nil || len(v.parents) == 0 {
		return "<none>", "<none>"
	}
	c := v.parents[0].Conditions
	return string(c[0].Status) + "/" + c[0].Reason, string(c[1].Status) + "/" + c[1].Reason
}

// TestGRPCRouteTranslate: a GRPCRoute's rules in the table, with their ids,
// service and method matches, headers, and backends spoken to over h2c;
// HTTP and HTTPS listeners take GRPCRoutes (HTTP with h2c); the route's
// statuses.
func TestGRPCRouteTranslate(t *testing.T) {
	in := grpcInput(true, nil, "shop/echo", "shop/echo2")
	t0 := time.Unix(1000, 0)
	rt := gr("shop", "echo", t0, "", []string{"grpc.example.com"},
		grpcRule("unary", "grpc.testing.TestService", "UnaryCall", nil, "shop/echo", "shop/echo2"),
		grpcRule("", "grpc.testing.TestService", "", []string{"X-Version", "2", "x-version", "3"}, "shop/echo"))
	rt.Spec.Rules[1].Filters = []gwv1.GRPCRouteFilter{{Type: gwv1.GRPCRouteFilterRequestHeaderModifier,
		RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "X-Env", Value: "test"}}}}}
	in.GRPCRoutes = []gwv1.GRPCRoute{rt}
	out := Translate(in)
	if a, r := accepted(out.grpcRoutes[types.NamespacedName{Namespace: "shop", Name: "echo"}]); a != "True/Accepted" || r != "True/ResolvedRefs" {
		t.Fatalf("statuses %s %s", a, r)
	}
	var ids []string
	for _, r := range out.Table.Rules {
		ids = append(ids, r.ID)
		if !r.GRPC || r.Route != "shop/echo" || len(r.Hostnames) != 1 || r.Hostnames[0] != "grpc.example.com" {
			t.Errorf("rule %+v", r)
		}
		for _, b := range r.Backends {
			if b.Protocol != routetable.ProtocolH2C || len(b.Endpoints) != 1 {
				t.Errorf("rule %s: backend %+v, want h2c with its endpoint", r.ID, b)
			}
		}
	}
	// One copy per kind of listener: HTTP, then HTTPS.
	if got := strings.Join(ids, " "); got != "grpc_shop_echo_unary grpc_shop_echo__1 grpc_shop_echo_unary grpc_shop_echo__1" {
		t.Fatalf("ids %s", got)
	}
	r0, r1 := out.Table.Rules[0], out.Table.Rules[1]
	if m := r0.Matches[0]; m.GRPCService != "grpc.testing.TestService" || m.GRPCMethod != "UnaryCall" || len(r0.Backends) != 2 {
		t.Errorf("rule unary: %+v", r0)
	}
	if m := r1.Matches[0]; m.GRPCMethod != "" || len(m.Headers) != 1 || m.Headers[0] != (routetable.NameValue{Name: "x-version", Value: "2"}) ||
		len(r1.Filters) != 1 || r1.Filters[0].Set[0].Name != "X-Env" {
		t.Errorf("rule 1: %+v, want the first x-version match only and the filter", r1)
	}
	for _, ls := range out.listeners[types.NamespacedName{Namespace: "infra", Name: "gw"}] {
		if len(ls.kinds) != 2 || ls.kinds[1].Kind != kindGRPCRoute || ls.attached != 1 {
			t.Errorf("listener %s: kinds %v, %d attached", ls.l.Name, ls.kinds, ls.attached)
		}
	}
}

// TestGRPCRouteNeedsH2COnHTTP: without h2c an HTTP listener does not take
// GRPCRoutes (gRPC is HTTP/2): a route on it alone is not accepted, one on
// both kinds of listener serves over HTTPS only, and a listener that asks
// for GRPCRoutes says why not.
func TestGRPCRouteNeedsH2COnHTTP(t *testing.T) {
	in := grpcInput(false, nil, "shop/echo")
	t0 := time.Unix(1000, 0)
	in.GRPCRoutes = []gwv1.GRPCRoute{
		gr("shop", "http-only", t0, "http", nil, grpcRule("", "a.S", "", nil, "shop/echo")),
		gr("shop", "both", t0, "", nil, grpcRule("", "b.S", "", nil, "shop/echo")),
	}
	in.Gateways[0].Spec.Listeners = append(in.Gateways[0].Spec.Listeners, gwv1.Listener{Name: "grpc", Port: 80, Protocol: gwv1.HTTPProtocolType,
		Hostname: ptr.To(gwv1.Hostname("grpc.example.com")), AllowedRoutes: &gwv1.AllowedRoutes{Kinds: []gwv1.RouteGroupKind{{Kind: kindGRPCRoute}}}})
	out := Translate(in)
	if a, _ := accepted(out.grpcRoutes[types.NamespacedName{Namespace: "shop", Name: "http-only"}]); a != "False/NotAllowedByListeners" {
		t.Errorf("a GRPCRoute on an HTTP listener without h2c: %s", a)
	}
	if a, _ := accepted(out.grpcRoutes[types.NamespacedName{Namespace: "shop", Name: "both"}]); a != "True/Accepted" {
		t.Errorf("a GRPCRoute on both listeners: %s", a)
	}
	if len(out.Table.Rules) != 1 || !out.Table.Rules[0].TLS {
		t.Errorf("table %+v, want the route both over HTTPS only", out.Table.Rules)
	}
	for _, ls := range out.listeners[types.NamespacedName{Namespace: "infra", Name: "gw"}] {
		if ls.l.Name == "grpc" && (ls.conds[2].Reason != string(gwv1.ListenerReasonInvalidRouteKinds) || !strings.Contains(ls.conds[2].Message, "--gateway-h2c")) {
			t.Errorf("listener grpc ResolvedRefs %+v", ls.conds[2])
		}
	}
}

// TestGRPCRouteUnsupported: what tollgate does not implement is refused
// with UnsupportedValue naming the field, never ignored.
func TestGRPCRouteUnsupported(t *testing.T) {
	regex := gwv1.GRPCMethodMatchRegularExpression
	headerRegex := gwv1.GRPCHeaderMatchRegularExpression
	for name, c := range map[string]struct {
		mutate func(r *gwv1.GRPCRouteRule)
		want   string
	}{
		"regex method": {func(r *gwv1.GRPCRouteRule) { r.Matches[0].Method.Type = &regex }, "spec.rules[0].matches[0].method.type RegularExpression is not supported"},
		"regex header": {func(r *gwv1.GRPCRouteRule) {
			r.Matches[0].Headers = []gwv1.GRPCHeaderMatch{{Type: &headerRegex, Name: "x", Value: "y"}}
		}, "spec.rules[0].matches[0].headers[0].type RegularExpression is not supported"},
		"response headers": {func(r *gwv1.GRPCRouteRule) {
			r.Filters = []gwv1.GRPCRouteFilter{{Type: gwv1.GRPCRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{}}}
		}, "spec.rules[0].filters[0].type ResponseHeaderModifier is not supported"},
		"mirror": {func(r *gwv1.GRPCRouteRule) {
			r.Filters = []gwv1.GRPCRouteFilter{{Type: gwv1.GRPCRouteFilterRequestMirror}}
		}, "spec.rules[0].filters[0].type RequestMirror is not supported"},
		"backend filters": {func(r *gwv1.GRPCRouteRule) {
			r.BackendRefs[0].Filters = []gwv1.GRPCRouteFilter{{Type: gwv1.GRPCRouteFilterRequestHeaderModifier}}
		}, "spec.rules[0].backendRefs[0].filters is not supported"},
		"session persistence": {func(r *gwv1.GRPCRouteRule) { r.SessionPersistence = &gwv1.SessionPersistence{} }, "spec.rules[0].sessionPersistence is not supported"},
	} {
		in := grpcInput(true, nil, "shop/echo")
		rt := gr("shop", "bad", time.Unix(0, 0), "", nil, grpcRule("", "a.S", "M", nil, "shop/echo"))
		c.mutate(&rt.Spec.Rules[0])
		in.GRPCRoutes = []gwv1.GRPCRoute{rt}
		out := Translate(in)
		v := out.grpcRoutes[types.NamespacedName{Namespace: "shop", Name: "bad"}]
		if a, _ := accepted(v); a != "False/UnsupportedValue" || !strings.Contains(v.parents[0].Conditions[0].Message, c.want) || len(out.Table.Rules) != 0 {
			t.Errorf("%s: %s %+v, want UnsupportedValue %q and no rule", name, a, v.parents[0].Conditions[0], c.want)
		}
	}
}

// TestGRPCRouteBackends: a cross-namespace backend needs a ReferenceGrant
// from GRPCRoutes (one from HTTPRoutes does not do); the appProtocol of a
// Service port decides how HTTPRoute backends are spoken to (kubernetes.io/h2c:
// HTTP/2 without TLS) and refuses what the gateway cannot speak
// (UnsupportedProtocol: TLS, or WebSocket for a GRPCRoute).
func TestGRPCRouteBackends(t *testing.T) {
	protocols := map[string]string{"shop/h2c": "kubernetes.io/h2c", "shop/wss": "kubernetes.io/wss", "shop/ws": "kubernetes.io/ws"}
	in := grpcInput(true, protocols, "shop/h2c", "shop/wss", "shop/ws", "backends/remote", "shop/plain")
	t0 := time.Unix(1000, 0)
	in.GRPCRoutes = []gwv1.GRPCRoute{
		gr("shop", "cross", t0, "", []string{"cross.example.com"}, grpcRule("", "", "", nil, "backends/remote")),
		gr("shop", "ws", t0, "", []string{"ws.example.com"}, grpcRule("", "", "", nil, "shop/ws")),
	}
	in.Routes = []gwv1.HTTPRoute{
		hr("shop", "h2c", t0, []string{"h2c.example.com"}, testRule{prefix("/"), "h2c"}),
		hr("shop", "wss", t0, []string{"wss.example.com"}, testRule{prefix("/"), "wss"}),
		hr("shop", "plain", t0, []string{"plain.example.com"}, testRule{prefix("/"), "plain"}),
	}
	grant := func(kind string) gwv1.ReferenceGrant {
		return gwv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "backends", Name: "g"}, Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwGroup, Kind: gwv1.Kind(kind), Namespace: "shop"}},
			To:   []gwv1.ReferenceGrantTo{{Kind: "Service"}}}}
	}
	protocolOf := func(out *Output, route string) string {
		for _, r := range out.Table.Rules {
			if r.Route == route && len(r.Backends) > 0 {
				return r.Backends[0].Protocol + "|" + r.Backends[0].Error
			}
		}
		return "<no rule>"
	}
	in.Grants = []gwv1.ReferenceGrant{grant("HTTPRoute")}
	out := Translate(in)
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "shop", Name: n} }
	if _, r := accepted(out.grpcRoutes[key("cross")]); r != "False/RefNotPermitted" {
		t.Errorf("cross-namespace with a grant for HTTPRoutes only: %s", r)
	}
	if _, r := accepted(out.grpcRoutes[key("ws")]); r != "False/UnsupportedProtocol" {
		t.Errorf("a GRPCRoute to a WebSocket port: %s", r)
	}
	if _, r := accepted(out.routes[key("wss")]); r != "False/UnsupportedProtocol" {
		t.Errorf("an HTTPRoute to a wss port: %s", r)
	}
	for route, want := range map[string]string{"shop/h2c": "h2c|", "shop/plain": "|"} {
		if got := protocolOf(out, route); got != want {
			t.Errorf("%s: protocol|error %q, want %q", route, got, want)
		}
	}
	in.Grants = []gwv1.ReferenceGrant{grant("GRPCRoute")}
	out = Translate(in)
	if _, r := accepted(out.grpcRoutes[key("cross")]); r != "True/ResolvedRefs" || protocolOf(out, "shop/cross") != "h2c|" {
		t.Errorf("cross-namespace with a grant for GRPCRoutes: %s %s", r, protocolOf(out, "shop/cross"))
	}
}

// TestGRPCRouteHTTPRouteConflict: on one listener an HTTPRoute and a
// GRPCRoute cannot share a hostname; the older route (then the first by
// namespace/name) keeps it, the other is not accepted there. Routes of one
// kind, or with hostnames apart, or on other listeners, do not conflict.
func TestGRPCRouteHTTPRouteConflict(t *testing.T) {
	t0, t1 := time.Unix(1000, 0), time.Unix(2000, 0)
	for _, c := range []struct {
		name                  string
		httpAt, grpcAt        time.Time
		httpHosts, grpcHosts  []string
		grpcSection           string
		wantHTTP, wantGRPC    string
		wantHTTPRs, wantGRPCs int // rules in the table
	}{
		{"HTTPRoute older", t0, t1, nil, []string{"a.example.com"}, "", "True/Accepted", "False/NotAllowedByListeners", 2, 0},
		{"GRPCRoute older", t1, t0, []string{"*.example.com"}, []string{"a.example.com"}, "", "False/NotAllowedByListeners", "True/Accepted", 0, 2},
		{"same age: namespace/name", t0, t0, nil, nil, "", "True/Accepted", "False/NotAllowedByListeners", 2, 0}, // shop/api < shop/grpc
		{"hostnames apart", t0, t1, []string{"web.example.com"}, []string{"grpc.example.com"}, "", "True/Accepted", "True/Accepted", 2, 2},
		{"one listener each", t0, t1, nil, nil, "https", "True/Accepted", "True/Accepted", 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := grpcInput(true, nil, "shop/svc")
			httpRoute := hr("shop", "api", c.httpAt, c.httpHosts, testRule{prefix("/"), "svc"})
			if c.grpcSection != "" {
				httpRoute.Spec.ParentRefs[0].SectionName = ptr.To(gwv1.SectionName("http"))
			}
			in.Routes = []gwv1.HTTPRoute{httpRoute}
			in.GRPCRoutes = []gwv1.GRPCRoute{gr("shop", "grpc", c.grpcAt, c.grpcSection, c.grpcHosts, grpcRule("", "a.S", "", nil, "shop/svc"))}
			out := Translate(in)
			gotHTTP, _ := accepted(out.routes[types.NamespacedName{Namespace: "shop", Name: "api"}])
			gotGRPC, _ := accepted(out.grpcRoutes[types.NamespacedName{Namespace: "shop", Name: "grpc"}])
			if gotHTTP != c.wantHTTP || gotGRPC != c.wantGRPC {
				t.Fatalf("HTTPRoute %s, GRPCRoute %s; want %s, %s", gotHTTP, gotGRPC, c.wantHTTP, c.wantGRPC)
			}
			var nHTTP, nGRPC int
			for _, r := range out.Table.Rules {
				if r.GRPC {
					nGRPC++
				} else {
					nHTTP++
				}
			}
			if nHTTP != c.wantHTTPRs || nGRPC != c.wantGRPCs {
				t.Fatalf("table: %d HTTPRoute and %d GRPCRoute rules, want %d and %d", nHTTP, nGRPC, c.wantHTTPRs, c.wantGRPCs)
			}
		})
	}
}

// TestGRPCRoutePrecedence: compiled and matched end to end: a GRPCRoute
// rule with a service and a method, then a service, then a method, then
// none; more headers first; then the oldest route; and an HTTPRoute for
// what no GRPCRoute rule takes.
func TestGRPCRoutePrecedence(t *testing.T) {
	in := grpcInput(true, nil, "shop/both", "shop/service", "shop/method", "shop/any", "shop/header", "shop/old", "shop/young", "shop/web")
	t0, t1 := time.Unix(1000, 0), time.Unix(2000, 0)
	g := []string{"grpc.example.com"}
	in.GRPCRoutes = []gwv1.GRPCRoute{
		gr("shop", "a", t0, "http", g,
			grpcRule("", "", "", nil, "shop/any"),
			grpcRule("", "", "Get", nil, "shop/method"),
			grpcRule("", "shop.Orders", "", nil, "shop/service"),
			grpcRule("", "shop.Orders", "Get", nil, "shop/both"),
			grpcRule("", "shop.Orders", "Get", []string{"x-v", "2"}, "shop/header")),
		gr("shop", "young", t1, "http", g, grpcRule("", "shop.Carts", "", nil, "shop/young")),
		gr("shop", "old", t0, "http", g, grpcRule("", "shop.Carts", "", nil, "shop/old")),
	}
	in.Routes = []gwv1.HTTPRoute{hr("shop", "web", t1, []string{"web.example.com"}, testRule{prefix("/"), "web"})}
	in.Routes[0].Spec.ParentRefs[0].SectionName = ptr.To(gwv1.SectionName("http"))
	out := Translate(in)
	table := httproutes.New(out.Table)
	for _, c := range []struct {
		host, path string
		grpc       bool
		header     string
		want       string
	}{
		{"grpc.example.com", "/shop.Orders/Get", true, "", "10.0.1.1:8080"},
		{"grpc.example.com", "/shop.Orders/Get", true, "2", "10.0.1.5:8080"},
		{"grpc.example.com", "/shop.Orders/List", true, "", "10.0.1.2:8080"},
		{"grpc.example.com", "/shop.Users/Get", true, "", "10.0.1.3:8080"},
		{"grpc.example.com", "/shop.Users/List", true, "", "10.0.1.4:8080"},
		{"grpc.example.com", "/shop.Carts/Add", true, "", "10.0.1.6:8080"},
		{"web.example.com", "/shop.Orders/Get", false, "", "10.0.1.8:8080"},
		{"web.example.com", "/shop.Orders/Get", true, "", "10.0.1.8:8080"},
		{"grpc.example.com", "/shop.Orders/Get", false, "", ""},
	} {
		r := httptest.NewRequest("POST", "http://"+c.host+c.path, nil)
		if c.grpc {
			r.ProtoMajor = 2
			r.Header.Set("Content-Type", "application/grpc+proto")
		}
		if c.header != "" {
			r.Header.Set("X-V", c.header)
		}
		got := ""
		if res, ok := table.Match(r); ok {
			_, got, _ = res.Rule.Pick()
		}
		if got != c.want {
			t.Errorf("%s%s gRPC %v x-v %q: %q, want %q", c.host, c.path, c.grpc, c.header, got, c.want)
		}
	}
}
