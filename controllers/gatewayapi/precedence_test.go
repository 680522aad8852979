package gatewayapi

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
)

// The precedence rows follow the HTTPRoute spec's ordering: hostname (exact,
// then longer wildcard, then shorter wildcard, then none), an Exact path
// before a PathPrefix, the longer prefix, a method match, more header
// matches, more query matches, the oldest route, the route first by
// namespace/name, and finally rule order. Each backend is a Service named
// after the row's expected winner.

// hr builds an HTTPRoute in namespace ns attached to Gateway gw with one
// rule per given match; each rule's backend is a Service named by backend.
func hr(ns, name string, created time.Time, hosts []string, rules ...testRule) gwv1.HTTPRoute {
	r := gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(created)}}
	r.Spec.ParentRefs = []gwv1.ParentReference{{Name: "gw", Namespace: ptr.To(gwv1.Namespace("infra"))}}
	for _, h := range hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	for _, tr := range rules {
		r.Spec.Rules = append(r.Spec.Rules, gwv1.HTTPRouteRule{
			Matches:     []gwv1.HTTPRouteMatch{tr.match},
			BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(tr.backend), Port: ptr.To(gwv1.PortNumber(80))}}}},
		})
	}
	return r
}

type testRule struct {
	match   gwv1.HTTPRouteMatch
	backend string
}

func prefix(p string) gwv1.HTTPRouteMatch {
	return gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(p)}}
}

func exact(p string) gwv1.HTTPRouteMatch {
	return gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchExact), Value: ptr.To(p)}}
}

func withMethod(m gwv1.HTTPRouteMatch, method string) gwv1.HTTPRouteMatch {
	m.Method = ptr.To(gwv1.HTTPMethod(method))
	return m
}

func withHeaders(m gwv1.HTTPRouteMatch, kv ...string) gwv1.HTTPRouteMatch {
	for i := 0; i < len(kv); i += 2 {
		m.Headers = append(m.Headers, gwv1.HTTPHeaderMatch{Name: gwv1.HTTPHeaderName(kv[i]), Value: kv[i+1]})
	}
	return m
}

func withQuery(m gwv1.HTTPRouteMatch, kv ...string) gwv1.HTTPRouteMatch {
	for i := 0; i < len(kv); i += 2 {
		m.QueryParams = append(m.QueryParams, gwv1.HTTPQueryParamMatch{Name: gwv1.HTTPHeaderName(kv[i]), Value: kv[i+1]})
	}
	return m
}

// precedenceInput is one Gateway (listener on port 80 allowing every
// namespace) plus, for every backend name used, a Service with one ready
// endpoint whose address encodes the name.
func precedenceInput(routes []gwv1.HTTPRoute) (*Input, map[string]string) {
	in := &Input{Port: 80, Namespaces: map[string]labels.Set{}}
	in.Classes = []gwv1.GatewayClass{{ObjectMeta: metav1.ObjectMeta{Name: "tollgate"}, Spec: gwv1.GatewayClassSpec{ControllerName: ControllerName}}}
	all := gwv1.NamespacesFromAll
	in.Gateways = []gwv1.Gateway{{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: "tollgate",
		Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType,
			AllowedRoutes: &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &all}}}},
	}}}
	in.Routes = routes
	addrOf := map[string]string{}
	for _, r := range routes {
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				name := string(b.Name)
				key := r.Namespace + "/" + name
				if _, ok := addrOf[key]; ok {
					continue
				}
				addr := "10.0.0." + itoa(len(addrOf)+1)
				addrOf[key] = addr + ":8080"
				in.Services = append(in.Services, corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: name},
					Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}})
				in.Slices = append(in.Slices, discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Namespace: r.Namespace, Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
					AddressType: discoveryv1.AddressTypeIPv4,
					Ports:       []discoveryv1.EndpointPort{{Port: ptr.To(int32(8080))}},
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
				})
			}
		}
	}
	byAddr := map[string]string{}
	for k, v := range addrOf {
		byAddr[v] = k
	}
	return in, byAddr
}

func TestHTTPRoutePrecedence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	older, newer := t0, t0.Add(time.Hour)
	type req struct {
		method, host, target string
		headers              map[string]string
		want                 string // "ns/backend", or "" for no match
	}
	rows := []struct {
		name   string
		routes []gwv1.HTTPRoute
		reqs   []req
	}{
		{
			name: "exact hostname before wildcard before none, falling through on a path miss",
			routes: []gwv1.HTTPRoute{
				hr("a", "any", older, nil, testRule{prefix("/"), "any"}),
				hr("a", "wild", older, []string{"*.example.com"}, testRule{prefix("/"), "wild"}),
				hr("a", "longwild", older, []string{"*.shop.example.com"}, testRule{prefix("/"), "longwild"}),
				hr("a", "exact", newer, []string{"foo.shop.example.com"}, testRule{prefix("/only"), "exact"}),
			},
			reqs: []req{
				{"GET", "foo.shop.example.com", "/only/x", nil, "a/exact"},
				{"GET", "FOO.shop.example.com:8080", "/only", nil, "a/exact"},
				{"GET", "foo.shop.example.com", "/other", nil, "a/longwild"},
				{"GET", "bar.shop.example.com", "/", nil, "a/longwild"},
				{"GET", "x.example.com", "/", nil, "a/wild"},
				{"GET", "example.com", "/", nil, "a/any"},
				{"GET", "other.org", "/", nil, "a/any"},
			},
		},
		{
			name: "Exact path before PathPrefix, longer prefix first, segment-aware",
			routes: []gwv1.HTTPRoute{
				hr("a", "r1", older, nil, testRule{prefix("/"), "root"}, testRule{prefix("/api"), "api"}),
				hr("a", "r2", newer, nil, testRule{prefix("/api/v1/"), "v1"}, testRule{exact("/api/v1/health"), "health"}),
			},
			reqs: []req{
				{"GET", "h", "/api/v1/health", nil, "a/health"},
				{"GET", "h", "/api/v1/health/x", nil, "a/v1"},
				{"GET", "h", "/api/v1", nil, "a/v1"},
				{"GET", "h", "/api/v1x", nil, "a/api"},
				{"GET", "h", "/apix", nil, "a/root"},
				{"GET", "h", "/api", nil, "a/api"},
				{"GET", "h", "/api/../admin", nil, ""},
			},
		},
		{
			name: "then method, then header count, then query count",
			routes: []gwv1.HTTPRoute{
				hr("a", "r1", older, nil,
					testRule{prefix("/p"), "plain"},
					testRule{withQuery(prefix("/p"), "v", "2"), "query"},
					testRule{withHeaders(prefix("/p"), "x-a", "1"), "onehdr"},
					testRule{withHeaders(prefix("/p"), "x-a", "1", "x-b", "2"), "twohdr"},
				),
				hr("a", "r2", newer, nil, testRule{withMethod(prefix("/p"), "POST"), "post"}),
			},
			reqs: []req{
				{"POST", "h", "/p", map[string]string{"X-A": "1", "X-B": "2"}, "a/post"},
				{"GET", "h", "/p?v=2", map[string]string{"X-A": "1", "X-B": "2"}, "a/twohdr"},
				{"GET", "h", "/p?v=2", map[string]string{"X-A": "1"}, "a/onehdr"},
				{"GET", "h", "/p?v=2", map[string]string{"X-A": "2"}, "a/query"},
				{"GET", "h", "/p?v=3", nil, "a/plain"},
			},
		},
		{
			name: "ties: the oldest route, then namespace/name, then rule order",
			routes: []gwv1.HTTPRoute{
				hr("b", "young", newer, nil, testRule{prefix("/t"), "young"}),
				hr("b", "old", older, nil, testRule{prefix("/t"), "old"}),
				hr("c", "same-age-c", t0.Add(time.Minute), nil, testRule{prefix("/u"), "c"}),
				hr("b", "same-age-b", t0.Add(time.Minute), nil, testRule{prefix("/u"), "b"}),
				hr("b", "rules", older, nil, testRule{prefix("/v"), "first"}, testRule{prefix("/v"), "second"}),
			},
			reqs: []req{
				{"GET", "h", "/t", nil, "b/old"},
				{"GET", "h", "/u", nil, "b/b"},
				{"GET", "h", "/v", nil, "b/first"},
				{"GET", "h", "/w", nil, ""},
			},
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			in, byAddr := precedenceInput(row.routes)
			out := Translate(in)
			table := httproutes.New(out.Table)
			for _, rq := range row.reqs {
				r := httptest.NewRequest(rq.method, "http://x"+rq.target, nil)
				r.Host = rq.host
				for k, v := range rq.headers {
					r.Header.Set(k, v)
				}
				res, ok := table.Match(r)
				got := ""
				if ok {
					_, ep, ok := res.Rule.Pick()
					if !ok {
						t.Fatalf("%s %s%s: backend not resolved", rq.method, rq.host, rq.target)
					}
					got = byAddr[ep]
				}
				if got != rq.want {
					t.Errorf("%s %s%s %v: got %q, want %q", rq.method, rq.host, rq.target, rq.headers, got, rq.want)
				}
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
