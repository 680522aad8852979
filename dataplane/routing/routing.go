// Package routing is the seam between the gateway's route tables and its
// HTTP proxy. A Router (the routes file's routes.Table, or the Gateway API
// route table httproutes.Table) finds the Route of a request, or the
// Refusal the gateway answers instead; the proxy (dataplane/proxy) limits
// and forwards along the Route without knowing which table it serves. It
// imports nothing of this module, so that both tables can implement it.
package routing

import (
	"net/http"
	"net/http/httputil"
	"strings"
	"time"
)

// Router is the route table in force. It is immutable and safe for
// concurrent use. The proxy calls Route once per request, and caches what
// it builds for a route (a reverse proxy, metric series) under the Router
// and the Route, which must therefore be comparable (pointers): a new table
// is a new set of routes.
type Router interface {
	// Route finds the route of r and returns it with the request to
	// forward: r itself, or a copy carrying what the route chose for this
	// request (an endpoint, the match) for its Rewrite and Redirect. A
	// refusal (Status not 0) is the gateway's answer to r instead; its
	// route is then nil when no route matched, or the matched route, whose
	// id names the refusal in the metrics. Route does not modify r.
	Route(r *http.Request) (Route, *http.Request, Refusal)
	// HeaderTimeouts are the response-header timeouts of the routes (0 for
	// the gateway's default; duplicates allowed). When this Router takes
	// the place of another, the proxy keeps the upstream transports of
	// these timeouts only, so that route churn cannot grow them.
	HeaderTimeouts() []time.Duration
}

// Route is one route of a Router: what a request matched. Its methods are
// called once per Router, when the proxy builds the route's upstream;
// Rewrite and the Redirect handler run per request.
type Route interface {
	// RouteID is the route id: the name of its rate limits and metrics.
	RouteID() string
	// HeaderTimeout bounds the wait for the upstream's response headers
	// (then 504); 0 means the gateway's default (--upstream-timeout).
	HeaderTimeout() time.Duration
	// RequestTimeout bounds the whole forwarded request; 0: no bound.
	RequestTimeout() time.Duration
	// Rewrite sets the outgoing request: its destination (pr.Out.URL's
	// scheme, host and path, and pr.Out.Host; the scheme http, https, or
	// SchemeH2C for an upstream that speaks HTTP/2 without TLS) and the
	// route's own changes
	// (header and path filters). The proxy then adds the X-Forwarded
	// headers and, last, puts in the gateway's identity headers, so that a
	// route can neither set the tenant header nor pass the API key on.
	Rewrite(pr *httputil.ProxyRequest)
	// ForwardsAuthorization: the route forwards the Authorization header
	// even when the request's identity came from it (a bearer token the
	// upstream verifies again); otherwise the proxy removes it then.
	ForwardsAuthorization() bool
	// Identity is what the route requires of a request's identity.
	Identity() Identity
	// Redirect is nil for a route that forwards; otherwise the route
	// answers every request itself with a redirect (a 3xx response) and
	// forwards nothing.
	Redirect() http.HandlerFunc
}

// SchemeH2C, as the scheme of the outgoing request's URL (Route.Rewrite),
// sends it over HTTP/2 without TLS (h2c with prior knowledge) to an http
// address: gRPC servers, and Services whose port says appProtocol
// kubernetes.io/h2c.
const SchemeH2C = "h2c"

// Refusal is the gateway's own answer to a request it cannot route. The
// zero value refuses nothing. It is a value, not a pointer: a refusal costs
// no allocation (a scan of unknown paths is the common case) and no shared
// state.
type Refusal struct {
	// Status is the response status: 404 (no route), 405 (no route for the
	// method), 500 (the route's backend did not resolve), 503 (no ready
	// endpoint); 0 means the request is routed.
	Status int
	// Message is the error text of the JSON answer.
	Message string
	// Allow, with 405, lists the methods that would have matched, one
	// Allow header each.
	Allow []string
	// Log, when not "", is logged (rate-limited, at error level) with the
	// route id and LogValues, key-value pairs.
	Log       string
	LogValues []any
}

// NotFound is the refusal of a request that no route matches.
func NotFound() Refusal {
	return Refusal{Status: http.StatusNotFound, Message: "no route matches this request"}
}

// MethodNotAllowed is the refusal of a request whose host and path match
// routes of other methods, allow.
func MethodNotAllowed(allow []string) Refusal {
	return Refusal{Status: http.StatusMethodNotAllowed, Message: "method not allowed on this route", Allow: allow}
}

// Identity is what a route requires of a request's identity (the routes
// file's identity field, the HTTPRoute annotation
// ratelimit.tollgate.dev/identity).
type Identity uint8

const (
	// IdentityRequired (the default): a request without a credential is
	// answered 401.
	IdentityRequired Identity = iota
	// IdentityOptional: a request with a credential is identified (a bad
	// one is still refused); one without is anonymous, limited by the
	// rules not keyed by tenant (address, header, shared, ...).
	IdentityOptional
	// IdentityNone: credentials are never read (the API key header is
	// still removed before forwarding); every request is anonymous.
	IdentityNone
)

// ParseIdentity reads an identity value: "" or "required", "optional",
// "none".
func ParseIdentity(s string) (Identity, bool) {
	switch s {
	case "", "required":
		return IdentityRequired, true
	case "optional":
		return IdentityOptional, true
	case "none":
		return IdentityNone, true
	}
	return IdentityRequired, false
}

func (i Identity) String() string {
	return [...]string{"required", "optional", "none"}[min(int(i), 2)]
}

// IsGRPC reports whether r is a gRPC call: an HTTP/2 request with the
// Content-Type application/grpc or application/grpc+<codec> (not gRPC-Web).
// GRPCRoute rules match only such requests, and the proxy answers them in
// gRPC's form.
func IsGRPC(r *http.Request) bool {
	if r.ProtoMajor != 2 {
		return false
	}
	const grpc = "application/grpc"
	ct := r.Header["Content-Type"]
	if len(ct) != 1 || len(ct[0]) < len(grpc) || !strings.EqualFold(ct[0][:len(grpc)], grpc) {
		return false
	}
	rest := ct[0][len(grpc):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}
