package httproutes

import (
	"context"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// A Table is the proxy's routing.Router in Gateway API mode, a *Rule its
// routing.Route: its route id (routetable.RuleID) names its rate limits and
// metrics, and it forwards to the endpoint chosen per request with its
// filters applied, or redirects.
var (
	_ routing.Router = (*Table)(nil)
	_ routing.Route  = (*Rule)(nil)
)

// target is what routing chose for one request, for the rule's Rewrite
// and redirect: the endpoint (none for a redirect), the protocol its
// backend speaks, and the match.
type target struct {
	endpoint string
	h2c      bool
	match    *routetable.Match
}

type targetKey struct{}

// Route matches r (Match) and picks the rule's backend endpoint (Pick),
// which it hands to the rule's Rewrite in the returned request's context.
// It refuses with 404 (no match), 500 (the chosen backend reference did not
// resolve, or the rule has no backend; the route's status says which and
// why, clients learn no Service names) or 503 (no ready endpoint); the
// proxy answers a gRPC call's refusal as UNIMPLEMENTED or UNAVAILABLE.
func (t *Table) Route(r *http.Request) (routing.Route, *http.Request, routing.Refusal) {
	res, ok := t.Match(r)
	if !ok {
		return nil, r, routing.NotFound()
	}
	tgt := &target{match: res.Match}
	if res.Rule.redirect == nil {
		b, endpoint, ok := res.Rule.Pick()
		switch {
		case !ok:
			return res.Rule, r, routing.Refusal{Status: http.StatusInternalServerError, Message: "the route's backend is not resolved"}
		case endpoint == "":
			return res.Rule, r, routing.Refusal{Status: http.StatusServiceUnavailable, Message: "no ready endpoint for the route's backend",
				Log: "no ready endpoint", LogValues: []any{"backend", b.Name}}
		}
		tgt.endpoint, tgt.h2c = endpoint, b.Protocol == routetable.ProtocolH2C
	}
	return res.Rule, r.WithContext(context.WithValue(r.Context(), targetKey{}, tgt)), routing.Refusal{}
}

// HeaderTimeouts are the rules' backend timeouts (timeouts.backendRequest).
func (t *Table) HeaderTimeouts() []time.Duration {
	rules := t.Rules()
	out := make([]time.Duration, len(rules))
	for i, r := range rules {
		out[i] = r.HeaderTimeout()
	}
	return out
}

// RouteID is the rule's id, routetable.RuleID.
func (r *Rule) RouteID() string { return r.ID }

// HeaderTimeout is the rule's timeouts.backendRequest.
func (r *Rule) HeaderTimeout() time.Duration {
	return time.Duration(r.BackendTimeoutMs) * time.Millisecond
}

// RequestTimeout is the rule's timeouts.request.
func (r *Rule) RequestTimeout() time.Duration {
	return time.Duration(r.RequestTimeoutMs) * time.Millisecond
}

// Identity is the HTTPRoute's annotation routetable.AnnotationIdentity:
// required (also without it, or with a value the controller refused),
// optional or none.
func (r *Rule) Identity() routing.Identity {
	mode, _ := routing.ParseIdentity(r.IdentityMode)
	return mode
}

// ForwardsAuthorization: the HTTPRoute has the annotation
// routetable.AnnotationForwardAuthorization.
func (r *Rule) ForwardsAuthorization() bool { return r.ForwardAuthorization }

// Rewrite sends the request to the endpoint Route chose (over h2c when its
// backend speaks HTTP/2: routing.SchemeH2C), with the client's Host (as
// other Gateway API implementations do) unless a URLRewrite changes it,
// and applies the rule's RequestHeaderModifier and URLRewrite filters in
// order.
func (r *Rule) Rewrite(pr *httputil.ProxyRequest) {
	tgt, _ := pr.In.Context().Value(targetKey{}).(*target)
	pr.Out.URL.Scheme = "http"
	if tgt.h2c {
		pr.Out.URL.Scheme = routing.SchemeH2C
	}
	pr.Out.URL.Host = tgt.endpoint
	pr.Out.Host = pr.In.Host
	for i := range r.Filters {
		f := &r.Filters[i]
		switch f.Type {
		case routetable.FilterRequestHeaderModifier:
			modifyHeaders(pr.Out.Header, f)
		case routetable.FilterURLRewrite:
			if f.Hostname != "" {
				pr.Out.Host = f.Hostname
			}
			if f.PathType != "" {
				pr.Out.URL.Path = rewritePath(pr.In.URL.Path, f, tgt.match)
				pr.Out.URL.RawPath = ""
			}
		}
	}
}

// Redirect answers the rule's RequestRedirect filter, if it has one.
func (r *Rule) Redirect() http.HandlerFunc {
	f := r.redirect
	if f == nil {
		return nil
	}
	return func(w http.ResponseWriter, req *http.Request) {
		var m *routetable.Match
		if tgt, ok := req.Context().Value(targetKey{}).(*target); ok {
			m = tgt.match
		}
		redirect(w, req, f, m)
	}
}
