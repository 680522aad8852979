package routes

import (
	"net/http/httptest"
	"net/http/httputil"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/routing"
)

// TestTableRoute: the routing.Router view of Lookup: a match is the route
// and the request itself; no match is a 404 refusal, a match with another
// method a 405 refusal with the methods that would match; neither carries
// a route.
func TestTableRoute(t *testing.T) {
	tab := mustParse(t, matchTable)
	for _, c := range []struct {
		method, host, target string
		wantID               string          // "" for a refusal
		want                 routing.Refusal // the refusal
	}{
		{"GET", "shop.example.com", "/orders", "shop-orders", routing.Refusal{}},
		{"POST", "", "/api/x", "api", routing.Refusal{}},
		{"GET", "", "/nowhere", "", routing.Refusal{Status: 404, Message: "no route matches this request"}},
		{"GET", "", "/a/../orders", "", routing.Refusal{Status: 404, Message: "no route matches this request"}},
		{"PATCH", "", "/orders", "", routing.Refusal{Status: 405, Message: "method not allowed on this route", Allow: []string{"GET", "HEAD", "POST"}}},
	} {
		req := httptest.NewRequest(c.method, "http://x"+c.target, nil)
		req.Host = c.host
		route, out, refusal := tab.Route(req)
		if out != req {
			t.Errorf("%s %s%s: Route returned another request", c.method, c.host, c.target)
		}
		if !reflect.DeepEqual(refusal, c.want) {
			t.Errorf("%s %s%s: refusal %+v, want %+v", c.method, c.host, c.target, refusal, c.want)
		}
		switch {
		case c.wantID == "" && route != nil:
			t.Errorf("%s %s%s: route %s with a refusal", c.method, c.host, c.target, route.RouteID())
		case c.wantID != "" && (route == nil || route.RouteID() != c.wantID):
			t.Errorf("%s %s%s: route %v, want %s", c.method, c.host, c.target, route, c.wantID)
		}
	}
	// Neither a match nor a 404 allocates.
	hit, miss := httptest.NewRequest("GET", "/orders", nil), httptest.NewRequest("GET", "/nowhere", nil)
	hit.Host = "shop.example.com"
	if n := testing.AllocsPerRun(100, func() { tab.Route(hit); tab.Route(miss) }); n != 0 {
		t.Errorf("Route allocates %v times per match and 404", n)
	}
	var empty *Table
	if route, _, refusal := empty.Route(hit); route != nil || refusal.Status != 404 {
		t.Errorf("a nil table: %v, %+v", route, refusal)
	}
}

// TestRouteAsRoutingRoute: a route of the file forwards (no redirect) to
// its upstream at UpstreamPath with the upstream's Host, under its id,
// timeout and forwardAuthorization; HeaderTimeouts lists every route's timeout (0: the default).
func TestRouteAsRoutingRoute(t *testing.T) {
	tab := mustParse(t, "routes:\n"+
		"  - {id: a, pathPrefix: /api, stripPrefix: true, upstream: 'https://up.example:8443/base', timeout: 3s, forwardAuthorization: true}\n"+
		"  - {id: b, path: /b, upstream: 'http://b'}\n")
	if got, want := tab.HeaderTimeouts(), []time.Duration{3 * time.Second, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("HeaderTimeouts = %v, want %v", got, want)
	}
	in := httptest.NewRequest("GET", "http://client.example/api/x%2Fy?q=1", nil)
	route, _, _ := tab.Route(in)
	if route == nil {
		t.Fatal("no route")
	}
	if route.RouteID() != "a" || route.HeaderTimeout() != 3*time.Second || route.RequestTimeout() != 0 || route.Redirect() != nil {
		t.Errorf("route %s: header timeout %v, request timeout %v, redirect %v", route.RouteID(), route.HeaderTimeout(), route.RequestTimeout(), route.Redirect() != nil)
	}
	if !route.ForwardsAuthorization() {
		t.Error("route a does not forward Authorization")
	}
	if b, _, _ := tab.Route(httptest.NewRequest("GET", "/b", nil)); b == nil || b.ForwardsAuthorization() {
		t.Errorf("route b: %v, forwards Authorization", b)
	}
	pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
	route.Rewrite(pr)
	if u := pr.Out.URL; u.Scheme != "https" || u.Host != "up.example:8443" || u.Path != "/base/x/y" || u.RawPath != "" || u.RawQuery != "q=1" || pr.Out.Host != "" {
		t.Errorf("rewritten to %s %s (path %q, raw %q), Host %q", u.Scheme, u.Host, u.Path, u.RawPath, pr.Out.Host)
	}
}

// TestH2CUpstream: an h2c upstream (a gRPC server) is addressed with
// routing.SchemeH2C, which the proxy's transport sends over HTTP/2
// without TLS.
func TestH2CUpstream(t *testing.T) {
	table, err := Parse([]byte("routes:\n  - {id: echo, pathPrefix: /grpc.testing.TestService, upstream: 'h2c://127.0.0.1:50051'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/grpc.testing.TestService/UnaryCall", nil)
	route, out, refusal := table.Route(req)
	if refusal.Status != 0 {
		t.Fatalf("refused: %+v", refusal)
	}
	pr := &httputil.ProxyRequest{In: out, Out: out.Clone(out.Context())}
	route.Rewrite(pr)
	if got := pr.Out.URL.String(); got != "h2c://127.0.0.1:50051/grpc.testing.TestService/UnaryCall" {
		t.Fatalf("outgoing URL %s", got)
	}
}
