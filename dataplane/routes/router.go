package routes

import (
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/routing"
)

// A Table is the proxy's routing.Router in routes-file mode, a *Route its
// routing.Route.
var (
	_ routing.Router = (*Table)(nil)
	_ routing.Route  = (*Route)(nil)
)

// Route is the routing.Router view of Lookup: the matched route and r, or
// the refusal (404, or 405 with the methods that would match). It does not
// allocate but for the Allow list.
func (t *Table) Route(r *http.Request) (routing.Route, *http.Request, routing.Refusal) {
	m := t.Lookup(r.Method, r.Host, r.URL.Path)
	switch {
	case m.Route != nil:
		return m.Route, r, routing.Refusal{}
	case m.MethodNotAllowed:
		return nil, r, routing.MethodNotAllowed(m.Allow)
	}
	return nil, r, routing.NotFound()
}

// HeaderTimeouts are the routes' timeouts, in file order.
func (t *Table) HeaderTimeouts() []time.Duration {
	if t == nil {
		return nil
	}
	out := make([]time.Duration, len(t.routes))
	for i := range t.routes {
		out[i] = t.routes[i].Timeout
	}
	return out
}

// RouteID is r.ID.
func (r *Route) RouteID() string { return r.ID }

// HeaderTimeout is r.Timeout.
func (r *Route) HeaderTimeout() time.Duration { return r.Timeout }

// RequestTimeout is 0: the route file bounds the response headers only.
func (r *Route) RequestTimeout() time.Duration { return 0 }

// Identity is r.IdentityMode.
func (r *Route) Identity() routing.Identity { return r.IdentityMode }

// ForwardsAuthorization is r.ForwardAuthorization.
func (r *Route) ForwardsAuthorization() bool { return r.ForwardAuthorization }

// Rewrite sends the request to the route's upstream, at UpstreamPath, with
// the upstream's host in the Host header.
func (r *Route) Rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = r.Upstream.Scheme
	pr.Out.URL.Host = r.Upstream.Host
	pr.Out.URL.Path = r.UpstreamPath(pr.In.URL.Path)
	pr.Out.URL.RawPath = ""
	pr.Out.Host = ""
}

// Redirect is nil: a route of the file forwards.
func (r *Route) Redirect() http.HandlerFunc { return nil }
