package httproutes

import (
	"net/http/httptest"
	"net/http/httputil"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// TestGRPCMatch: GRPCRoute rules match gRPC calls only, by service and
// method, before the HTTPRoute rules of their hostname tier: a match with
// a service and a method, then with a service, then with a method, then
// any call; more header matches first; then the oldest route. A request
// that is not a gRPC call, or a call no GRPCRoute rule takes, goes on to
// the HTTPRoute rules.
func TestGRPCMatch(t *testing.T) {
	be := []routetable.Backend{{Name: "shop/b:80", Weight: 1, Endpoints: []string{"10.0.0.1:80"}, Protocol: routetable.ProtocolH2C}}
	grpcRule := func(id string, created int64, m ...routetable.Match) routetable.Rule {
		return routetable.Rule{ID: id, Route: "shop/" + id, Created: created, GRPC: true, Matches: m, Backends: be}
	}
	table := New(&routetable.Table{Rules: []routetable.Rule{
		{ID: "http", Route: "shop/http", Matches: []routetable.Match{{PathType: routetable.PathPrefix, PathValue: "/"}}, Backends: be},
		grpcRule("any", 1, routetable.Match{}),
		grpcRule("method", 1, routetable.Match{GRPCMethod: "Get"}),
		grpcRule("service", 1, routetable.Match{GRPCService: "shop.Orders"}),
		grpcRule("both", 1, routetable.Match{GRPCService: "shop.Orders", GRPCMethod: "Get"}),
		grpcRule("both-header", 2, routetable.Match{GRPCService: "shop.Orders", GRPCMethod: "Get", Headers: []routetable.NameValue{{Name: "x-v", Value: "2"}}}),
		grpcRule("older", 0, routetable.Match{GRPCService: "shop.Carts"}),
		grpcRule("younger", 5, routetable.Match{GRPCService: "shop.Carts"}),
	}})
	for _, c := range []struct {
		path   string
		grpc   bool
		header string
		want   string
	}{
		{"/shop.Orders/Get", true, "", "both"},
		{"/shop.Orders/Get", true, "2", "both-header"},
		{"/shop.Orders/List", true, "", "service"},
		{"/shop.Users/Get", true, "", "method"},
		{"/shop.Users/List", true, "", "any"},
		{"/not/a/grpc/path", true, "", "any"},
		{"/shop.Carts/Add", true, "", "older"},
		{"/shop.Orders/Get", false, "", "http"},
	} {
		req := httptest.NewRequest("POST", "http://h"+c.path, nil)
		if c.grpc {
			req.ProtoMajor = 2
			req.Header.Set("Content-Type", "application/grpc")
		}
		if c.header != "" {
			req.Header.Set("X-V", c.header)
		}
		res, ok := table.Match(req)
		if !ok || res.Rule.ID != c.want {
			t.Errorf("%s (gRPC %v, x-v %q): %v %v, want %s", c.path, c.grpc, c.header, ok, res.Rule, c.want)
			continue
		}
		route, out, refusal := table.Route(req)
		if refusal.Status != 0 {
			t.Fatalf("%s: refused %+v", c.path, refusal)
		}
		pr := &httputil.ProxyRequest{In: out, Out: out.Clone(out.Context())}
		route.Rewrite(pr)
		if pr.Out.URL.Scheme != routing.SchemeH2C || pr.Out.URL.Host != "10.0.0.1:80" {
			t.Errorf("%s: forwarded to %s, want h2c://10.0.0.1:80", c.path, pr.Out.URL)
		}
	}
}
