package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// targetFixture: Gateway public (listeners http, https) in ns a, HTTPRoutes
// login (on listener http), orders (on the whole Gateway, two rules), and
// other (on another Gateway).
func targetFixture() *targetObjects {
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "public"},
		Spec: gwv1.GatewaySpec{Listeners: []gwv1.Listener{{Name: "http"}, {Name: "https"}}}}
	route := func(name string, section *gwv1.SectionName, gateway string, rules int) *gwv1.HTTPRoute {
		rt := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name}}
		rt.Spec.ParentRefs = []gwv1.ParentReference{{Name: gwv1.ObjectName(gateway), SectionName: section}}
		rt.Spec.Rules = make([]gwv1.HTTPRouteRule, rules)
		return rt
	}
	t := &targetObjects{routes: map[types.NamespacedName]*gwv1.HTTPRoute{}, gateways: map[types.NamespacedName]*gwv1.Gateway{{Namespace: "a", Name: "public"}: gw}}
	for _, rt := range []*gwv1.HTTPRoute{route("login", ptr.To[gwv1.SectionName]("http"), "public", 1), route("orders", nil, "public", 2), route("other", nil, "internal", 1)} {
		t.routes[types.NamespacedName{Namespace: rt.Namespace, Name: rt.Name}] = rt
	}
	return t
}

func targetRule(name string, age time.Duration, kind, target, section string, by ...v1alpha1.KeyPart) v1alpha1.RateLimitRule {
	return v1alpha1.RateLimitRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
		Spec: v1alpha1.RateLimitRuleSpec{Tenant: "*", Capacity: 5, RefillPerSecond: ptr.To[int64](1), By: by,
			TargetRef: &v1alpha1.TargetRef{Group: gwv1.GroupName, Kind: kind, Name: target, SectionName: section}},
	}
}

var byAddr = v1alpha1.KeyPart{ClientAddress: &v1alpha1.KeyClientAddress{}}

// routesOf are the route ids of the compiled rules from source.
func routesOf(c compiled, source string) []string {
	var out []string
	for _, r := range c.Rules {
		if r.Source == source {
			out = append(out, r.Route)
		}
	}
	return out
}

// TestGatewayTargetRef: a rule on a Gateway limits every HTTPRoute rule
// attached to it (or to one listener), with one Source (one bucket for a
// rule not keyed by route); a rule on an HTTPRoute of the same kind wins
// over it on that route, one of another kind stacks; missing targets and
// listeners are TargetNotFound; two Gateway rules of one kind conflict,
// the older wins and the younger's message names it.
func TestGatewayTargetRef(t *testing.T) {
	login := routetable.RuleID("a", "login", "", 0)
	orders0, orders1 := routetable.RuleID("a", "orders", "", 0), routetable.RuleID("a", "orders", "", 1)
	items := []v1alpha1.RateLimitRule{
		targetRule("gw-per-address", time.Hour, "Gateway", "public", "", byAddr),
		targetRule("gw-http-listener", time.Hour, "Gateway", "public", "http"),
		targetRule("orders-per-address", time.Minute, "HTTPRoute", "orders", "", byAddr),
		targetRule("gw-per-address-younger", time.Second, "Gateway", "public", "", byAddr),
		targetRule("no-gateway", 0, "Gateway", "missing", ""),
		targetRule("no-listener", 0, "Gateway", "public", "grpc"),
		targetRule("orders-overridden", 0, "Gateway", "public", "https", byAddr),
	}
	c := compile(items, &tenantPolicy{open: true}, targetFixture(), time.Unix(1e9, 0))
	if got := routesOf(c, "a/gw-per-address"); strings.Join(got, ",") != login {
		t.Errorf("gw-per-address limits %v, want only %s: orders has a rule of its own of the same kind", got, login)
	}
	if got := routesOf(c, "a/orders-per-address"); len(got) != 2 || got[0] != orders0 || got[1] != orders1 {
		t.Errorf("orders-per-address limits %v", got)
	}
	if got := routesOf(c, "a/gw-http-listener"); strings.Join(got, ",") != login+","+orders0+","+orders1 {
		t.Errorf("gw-http-listener (default kind) limits %v, want every route attached to listener http", got)
	}
	for name, want := range map[string]struct{ reason, msg string }{
		"gw-per-address":         {v1alpha1.ReasonAccepted, ""},
		"orders-per-address":     {v1alpha1.ReasonAccepted, ""},
		"gw-per-address-younger": {v1alpha1.ReasonConflict, "a/gw-per-address"},
		"no-gateway":             {v1alpha1.ReasonTargetNotFound, "Gateway a/missing (spec.targetRef) does not exist"},
		"no-listener":            {v1alpha1.ReasonTargetNotFound, `no listener named "grpc"`},
		"orders-overridden":      {v1alpha1.ReasonConflict, "more specific target"},
	} {
		v := c.Verdicts[types.UID(name)]
		if (want.reason == v1alpha1.ReasonAccepted) != v.Accepted || !v.Accepted && (v.Reason != want.reason || !strings.Contains(v.Message, want.msg)) {
			t.Errorf("%s: %+v, want %s %q", name, v, want.reason, want.msg)
		}
	}
}

// TestGatewayTargetRefOutsideGatewayAPI: without Gateway API mode a
// Gateway target is not found, saying why.
func TestGatewayTargetRefOutsideGatewayAPI(t *testing.T) {
	c := compile([]v1alpha1.RateLimitRule{targetRule("gw", 0, "Gateway", "public", "")}, &tenantPolicy{open: true}, nil, time.Unix(1e9, 0))
	if v := c.Verdicts["gw"]; v.Accepted || v.Reason != v1alpha1.ReasonTargetNotFound || !strings.Contains(v.Message, "--gateway-api") {
		t.Errorf("%+v", v)
	}
}

// TestExpandGRPCRouteTargets: a targetRef to a GRPCRoute limits each of its
// rules (a rule per gRPC service or method) with a bucket of its own, or
// the one named by sectionName, which takes precedence over a rule for the
// whole route; the ids are the GRPCRoute's, never an HTTPRoute's of the
// same name.
func TestExpandGRPCRouteTargets(t *testing.T) {
	named := func(n string) *gwv1.SectionName { return ptr.To(gwv1.SectionName(n)) }
	routes := &targetObjects{
		routes: map[types.NamespacedName]*gwv1.HTTPRoute{{Namespace: "shop", Name: "echo"}: {
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "echo"}, Spec: gwv1.HTTPRouteSpec{Rules: []gwv1.HTTPRouteRule{{Name: named("unary")}}}}},
		grpc: map[types.NamespacedName]*gwv1.GRPCRoute{{Namespace: "shop", Name: "echo"}: {
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "echo"}, Spec: gwv1.GRPCRouteSpec{Rules: []gwv1.GRPCRouteRule{{Name: named("unary")}, {}}}}},
	}
	rule := func(uid, tenant, kind, name, section string) v1alpha1.RateLimitRule {
		return v1alpha1.RateLimitRule{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: uid, UID: types.UID(uid)},
			Spec: v1alpha1.RateLimitRuleSpec{Tenant: tenant, TargetRef: &v1alpha1.TargetRef{Group: "gateway.networking.k8s.io", Kind: kind, Name: name, SectionName: section}}}
	}
	items := []v1alpha1.RateLimitRule{
		rule("whole", "a", "GRPCRoute", "echo", ""),
		rule("unary", "a", "GRPCRoute", "echo", "unary"),
		rule("http", "a", "HTTPRoute", "echo", ""),
		rule("b", "b", "GRPCRoute", "echo", ""),
		rule("gone", "a", "GRPCRoute", "nothing", ""),
		rule("nosection", "a", "GRPCRoute", "echo", "stream"),
	}
	out, notFound := expandTargets(items, routes)
	var got []string
	for _, r := range out {
		got = append(got, r.Name+"="+r.Spec.Tenant+"/"+r.Spec.Route)
	}
	want := "[whole=a/grpc_shop_echo__1 unary=a/grpc_shop_echo_unary http=a/shop_echo_unary b=b/grpc_shop_echo_unary b=b/grpc_shop_echo__1]"
	if fmt.Sprint(got) != want {
		t.Errorf("expanded %v\nwant %s", got, want)
	}
	for uid, msg := range map[types.UID]string{"gone": "GRPCRoute shop/nothing (spec.targetRef) does not exist",
		"nosection": `GRPCRoute shop/echo has no rule named "stream"`} {
		if v, ok := notFound[uid]; !ok || v.Reason != v1alpha1.ReasonTargetNotFound || !strings.Contains(v.Message, msg) {
			t.Errorf("%s: %+v, want TargetNotFound %q", uid, v, msg)
		}
	}
	if _, nf := expandTargets(items[:1], nil); !strings.Contains(nf["whole"].Message, "names a GRPCRoute, but the controller does not run in Gateway API mode") {
		t.Errorf("outside Gateway API mode: %+v", nf["whole"])
	}
}

// TestGatewayTargetRefCoversGRPCRoutes: a rule on a Gateway limits the
// rules of the GRPCRoutes attached to it as well as the HTTPRoutes', and
// a GRPCRoute on another listener is left out with sectionName.
func TestGatewayTargetRefCoversGRPCRoutes(t *testing.T) {
	objs := targetFixture()
	objs.grpc = map[types.NamespacedName]*gwv1.GRPCRoute{}
	for _, name := range []string{"echo", "tls-only"} {
		rt := &gwv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name}}
		rt.Spec.ParentRefs = []gwv1.ParentReference{{Name: "public"}}
		if name == "tls-only" {
			rt.Spec.ParentRefs[0].SectionName = ptr.To[gwv1.SectionName]("https")
		}
		rt.Spec.Rules = make([]gwv1.GRPCRouteRule, 1)
		objs.grpc[types.NamespacedName{Namespace: "a", Name: name}] = rt
	}
	echo, tlsOnly := routetable.GRPCRuleID("a", "echo", "", 0), routetable.GRPCRuleID("a", "tls-only", "", 0)
	items := []v1alpha1.RateLimitRule{
		targetRule("whole", 0, "Gateway", "public", "", byAddr),
		targetRule("http-listener", 0, "Gateway", "public", "http"),
	}
	c := compile(items, &tenantPolicy{open: true}, objs, time.Unix(1e9, 0))
	whole := strings.Join(routesOf(c, "a/whole"), ",")
	if !strings.Contains(whole, echo) || !strings.Contains(whole, tlsOnly) {
		t.Errorf("the Gateway rule limits %s, want both GRPCRoutes' rules among them", whole)
	}
	listener := strings.Join(routesOf(c, "a/http-listener"), ",")
	if !strings.Contains(listener, echo) || strings.Contains(listener, tlsOnly) {
		t.Errorf("the listener rule limits %s, want echo's rule and not tls-only's", listener)
	}
}
