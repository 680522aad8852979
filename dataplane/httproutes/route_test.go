package httproutes

import (
	"net/http/httptest"
	"net/http/httputil"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// TestTableRoute: the routing.Router view of a table: no match is a 404
// refusal without a route; a rule whose chosen backend did not resolve (or
// that has none) a 500, and one without a ready endpoint a 503 to log with
// the backend's name, both with the rule, for its metrics.
func TestTableRoute(t *testing.T) {
	prefix := []routetable.Match{{PathType: routetable.PathPrefix, PathValue: "/"}}
	rule := func(host string, backends ...routetable.Backend) routetable.Rule {
		return routetable.Rule{ID: "shop_" + host + "__0", Route: "shop/" + host, Hostnames: []string{host}, Matches: prefix, Backends: backends}
	}
	table := New(&routetable.Table{Rules: []routetable.Rule{
		rule("ok", routetable.Backend{Name: "shop/ok:80", Weight: 1, Endpoints: []string{"10.0.0.1:80"}}),
		rule("none"),
		rule("unresolved", routetable.Backend{Name: "shop/gone:80", Weight: 1, Error: "Service not found"}),
		rule("drained", routetable.Backend{Name: "shop/drained:80", Weight: 1}),
	}})
	for _, c := range []struct {
		host   string
		wantID string // "" for no route
		want   routing.Refusal
	}{
		{"ok", "shop_ok__0", routing.Refusal{}},
		{"elsewhere", "", routing.Refusal{Status: 404, Message: "no route matches this request"}},
		{"none", "shop_none__0", routing.Refusal{Status: 500, Message: "the route's backend is not resolved"}},
		{"unresolved", "shop_unresolved__0", routing.Refusal{Status: 500, Message: "the route's backend is not resolved"}},
		{"drained", "shop_drained__0", routing.Refusal{Status: 503, Message: "no ready endpoint for the route's backend",
			Log: "no ready endpoint", LogValues: []any{"backend", "shop/drained:80"}}},
	} {
		req := httptest.NewRequest("GET", "http://"+c.host+"/x", nil)
		route, out, refusal := table.Route(req)
		if !reflect.DeepEqual(refusal, c.want) {
			t.Errorf("%s: refusal %+v, want %+v", c.host, refusal, c.want)
		}
		switch {
		case c.wantID == "" && route != nil:
			t.Errorf("%s: route %s, want none", c.host, route.RouteID())
		case c.wantID != "" && (route == nil || route.RouteID() != c.wantID):
			t.Errorf("%s: route %v, want %s", c.host, route, c.wantID)
		}
		if refusal.Status != 0 && out != req {
			t.Errorf("%s: a refusal returned another request", c.host)
		}
		if req.Context().Value(targetKey{}) != nil {
			t.Errorf("%s: Route modified the request's context", c.host)
		}
	}
}

// TestRuleRewrite: a forwarding rule sends the request to the endpoint
// Route chose, with the client's Host, then applies its filters in order
// (a header modifier; a URLRewrite of host and matched prefix), under its
// timeouts and its HTTPRoute's forward-authorization annotation.
func TestRuleRewrite(t *testing.T) {
	table := New(&routetable.Table{Rules: []routetable.Rule{{
		ID: "shop_web__0", Route: "shop/web", RequestTimeoutMs: 5000, BackendTimeoutMs: 1500, ForwardAuthorization: true,
		Matches: []routetable.Match{{PathType: routetable.PathPrefix, PathValue: "/old"}},
		Filters: []routetable.Filter{
			{Type: routetable.FilterRequestHeaderModifier, Set: []routetable.NameValue{{Name: "X-Env", Value: "test"}}, Remove: []string{"X-Drop"}},
			{Type: routetable.FilterURLRewrite, Hostname: "internal.example", PathType: routetable.ReplacePrefixMatch, PathValue: "/new"},
		},
		Backends: []routetable.Backend{{Name: "shop/web:8080", Weight: 1, Endpoints: []string{"10.0.0.7:8080"}}},
	}}})
	if got, want := table.HeaderTimeouts(), []time.Duration{1500 * time.Millisecond}; !reflect.DeepEqual(got, want) {
		t.Errorf("HeaderTimeouts = %v, want %v", got, want)
	}
	in := httptest.NewRequest("GET", "http://shop.example/old/a?q=1", nil)
	in.Header.Set("X-Drop", "1")
	route, out, refusal := table.Route(in)
	if route == nil || refusal.Status != 0 {
		t.Fatalf("route %v, refusal %+v", route, refusal)
	}
	if route.HeaderTimeout() != 1500*time.Millisecond || route.RequestTimeout() != 5*time.Second || route.Redirect() != nil || !route.ForwardsAuthorization() {
		t.Errorf("header timeout %v, request timeout %v, redirect %v, forwards Authorization %v",
			route.HeaderTimeout(), route.RequestTimeout(), route.Redirect() != nil, route.ForwardsAuthorization())
	}
	pr := &httputil.ProxyRequest{In: out, Out: out.Clone(out.Context())}
	route.Rewrite(pr)
	if u := pr.Out.URL; u.Scheme != "http" || u.Host != "10.0.0.7:8080" || u.Path != "/new/a" || u.RawQuery != "q=1" {
		t.Errorf("rewritten to %s://%s%s?%s", u.Scheme, u.Host, u.Path, u.RawQuery)
	}
	if pr.Out.Host != "internal.example" || pr.Out.Header.Get("X-Env") != "test" || pr.Out.Header.Get("X-Drop") != "" {
		t.Errorf("Host %q, headers %v", pr.Out.Host, pr.Out.Header)
	}
}

// TestRuleRedirect: a rule with a RequestRedirect forwards nothing and
// picks no backend: its Redirect answers with the Location built from the
// request and the match Route found.
func TestRuleRedirect(t *testing.T) {
	table := New(&routetable.Table{Rules: []routetable.Rule{{
		ID: "shop_moved__0", Route: "shop/moved",
		Matches: []routetable.Match{{PathType: routetable.PathPrefix, PathValue: "/old"}},
		Filters: []routetable.Filter{{Type: routetable.FilterRequestRedirect, Scheme: "https", StatusCode: 301,
			PathType: routetable.ReplacePrefixMatch, PathValue: "/new"}},
	}}})
	route, out, refusal := table.Route(httptest.NewRequest("GET", "http://shop.example:8080/old/a?q=1", nil))
	if route == nil || refusal.Status != 0 {
		t.Fatalf("route %v, refusal %+v", route, refusal)
	}
	redirect := route.Redirect()
	if redirect == nil {
		t.Fatal("no redirect")
	}
	w := httptest.NewRecorder()
	redirect(w, out)
	if loc := w.Header().Get("Location"); w.Code != 301 || loc != "https://shop.example/new/a?q=1" {
		t.Errorf("%d Location %q, want 301 https://shop.example/new/a?q=1", w.Code, loc)
	}
}
