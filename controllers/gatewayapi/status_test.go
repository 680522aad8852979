package gatewayapi

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestGatewayAPIListenerAndAttachmentReasons checks the documented reasons
// of listeners that tollgate cannot serve and of routes that cannot attach.
func TestGatewayAPIListenerAndAttachmentReasons(t *testing.T) {
	selector := gwv1.NamespacesFromSelector
	grpc := gwv1.Kind("GRPCRoute")
	in := &Input{Port: 80, Namespaces: map[string]labels.Set{"team": {"gateway-access": "yes"}, "other": {}}}
	in.Classes = []gwv1.GatewayClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "tollgate"}, Spec: gwv1.GatewayClassSpec{ControllerName: ControllerName}},
		{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}, Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/other"}},
	}
	in.Gateways = []gwv1.Gateway{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"}, Spec: gwv1.GatewaySpec{GatewayClassName: "tollgate", Listeners: []gwv1.Listener{
			{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname("*.example.com")),
				AllowedRoutes: &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &selector,
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"gateway-access": "yes"}}}}},
			{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType},
			{Name: "alt", Port: 8080, Protocol: gwv1.HTTPProtocolType},
			{Name: "dup", Port: 80, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname("*.example.com"))},
			{Name: "grpc", Port: 80, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname("grpc.example.com")),
				AllowedRoutes: &gwv1.AllowedRoutes{Kinds: []gwv1.RouteGroupKind{{Kind: grpc}}}},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "foreign"}, Spec: gwv1.GatewaySpec{GatewayClassName: "someone-else",
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}},
	}
	route := func(ns, name string, hosts []string, refs ...gwv1.ParentReference) gwv1.HTTPRoute {
		r := hr(ns, name, time.Unix(0, 0), hosts, testRule{prefix("/"), "svc"})
		r.Spec.ParentRefs = refs
		return r
	}
	ref := func(section string) gwv1.ParentReference {
		p := gwv1.ParentReference{Name: "gw", Namespace: ptr.To(gwv1.Namespace("infra"))}
		if section != "" {
			p.SectionName = ptr.To(gwv1.SectionName(section))
		}
		return p
	}
	in.Routes = []gwv1.HTTPRoute{
		route("team", "ok", []string{"shop.example.com"}, ref("http")),
		route("team", "nosection", nil, ref("nope")),
		route("other", "notallowed", nil, ref("http")),
		route("team", "nohost", []string{"shop.example.org"}, ref("http")),
		route("team", "https", nil, ref("https")),
		route("team", "foreign", nil, gwv1.ParentReference{Name: "foreign", Namespace: ptr.To(gwv1.Namespace("infra"))}),
	}
	out := Translate(in)

	listeners := map[string]map[string]string{}
	var attached int32
	for _, ls := range out.listeners[types.NamespacedName{Namespace: "infra", Name: "gw"}] {
		listeners[string(ls.l.Name)] = map[string]string{}
		for _, c := range ls.conds {
			listeners[string(ls.l.Name)][c.Type] = string(c.Status) + "/" + c.Reason
		}
		if ls.l.Name == "http" {
			attached = ls.attached
		}
	}
	for _, c := range []struct{ listener, cond, want string }{
		{"http", "Accepted", "True/Accepted"},
		{"http", "Programmed", "True/Programmed"},
		{"https", "Accepted", "False/UnsupportedProtocol"},
		{"https", "Programmed", "False/Invalid"},
		{"alt", "Accepted", "False/PortUnavailable"},
		{"dup", "Conflicted", "True/HostnameConflict"},
		{"dup", "Accepted", "False/HostnameConflict"},
		{"grpc", "ResolvedRefs", "False/InvalidRouteKinds"},
		{"grpc", "Programmed", "False/Invalid"},
	} {
		if got := listeners[c.listener][c.cond]; got != c.want {
			t.Errorf("listener %s %s = %q, want %q", c.listener, c.cond, got, c.want)
		}
	}
	if attached != 1 {
		t.Errorf("listener http attachedRoutes = %d, want 1", attached)
	}
	if got := out.gwAccepted[types.NamespacedName{Namespace: "infra", Name: "gw"}]; got.Reason != string(gwv1.GatewayReasonListenersNotValid) || got.Status != metav1.ConditionTrue {
		t.Errorf("Gateway Accepted = %s/%s, want True/ListenersNotValid", got.Status, got.Reason)
	}
	if _, ok := out.gwAccepted[types.NamespacedName{Namespace: "infra", Name: "foreign"}]; ok {
		t.Error("a Gateway of another controller's class got a status")
	}

	for name, want := range map[string]string{
		"ok":         "True/Accepted",
		"nosection":  "False/NoMatchingParent",
		"notallowed": "False/NotAllowedByListeners",
		"nohost":     "False/NoMatchingListenerHostname",
		"https":      "False/NotAllowedByListeners",
	} {
		v := out.routes[types.NamespacedName{Namespace: map[bool]string{true: "other", false: "team"}[name == "notallowed"], Name: name}]
		if v == nil || len(v.parents) != 1 {
			t.Errorf("route %s: parents %v", name, v)
			continue
		}
		c := v.parents[0].Conditions[0]
		if got := string(c.Status) + "/" + c.Reason; got != want {
			t.Errorf("route %s Accepted = %s (%s), want %s", name, got, c.Message, want)
		}
	}
	if v := out.routes[types.NamespacedName{Namespace: "team", Name: "foreign"}]; v == nil || len(v.parents) != 0 {
		t.Errorf("route of another controller's Gateway: parents %v, want none of ours", v)
	}
	if len(out.Table.Rules) != 1 || out.Table.Rules[0].Route != "team/ok" || len(out.Table.Rules[0].Hostnames) != 1 || out.Table.Rules[0].Hostnames[0] != "shop.example.com" {
		t.Errorf("table = %+v, want only team/ok for shop.example.com", out.Table.Rules)
	}
}

// TestSupportedFeaturesSorted: the GatewayClass's supportedFeatures are
// sorted by name, as the API requires, with and without the GRPCRoute
// features (which need h2c on HTTP listeners).
func TestSupportedFeaturesSorted(t *testing.T) {
	for _, h2c := range []bool{false, true} {
		fs := SupportedFeatures(h2c)
		grpc := false
		for i, f := range fs {
			if i > 0 && fs[i-1].Name >= f.Name {
				t.Errorf("h2c %v: %s before %s", h2c, fs[i-1].Name, f.Name)
			}
			grpc = grpc || f.Name == "GRPCRoute"
		}
		if grpc != h2c {
			t.Errorf("h2c %v: GRPCRoute claimed %v", h2c, grpc)
		}
	}
}
