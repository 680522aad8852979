package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// The Gateway API path: an HTTPRoute rule of the compiled route table takes
// the place of a routes-file route. Its route id (routetable.RuleID) names
// its rate limits and metrics; identity, limiting, headers and fallback are
// the same code as for the routes file.

// gatewayUpstreams caches the upstream of every HTTPRoute rule of the current
// table; a new table (a route or endpoint change) starts a new set.
type gatewayUpstreams struct {
	cur perTable[*httproutes.Table, *httproutes.Rule]
}

// gwTarget is what routing decided for one request, handed to the rule's
// reverse proxy through the request context.
type gwTarget struct {
	endpoint string
	match    *routetable.Match
}

type gwTargetKey struct{}

// routeGatewayAPI matches r against the HTTPRoute table and picks its
// backend endpoint. It answers 404 (no match), 500 (the chosen backend
// reference did not resolve, or the rule has no backend) or 503 (no ready
// endpoint) itself and returns nil then.
func (h *Handler) routeGatewayAPI(w http.ResponseWriter, r *http.Request) (*upstream, *http.Request) {
	table := h.opts.HTTPRoutes()
	res, ok := table.Match(r)
	if !ok {
		h.reply(w, "none", http.StatusNotFound, "no route matches this request")
		return nil, r
	}
	up := h.gwUpstreams.get(h, table, res.Rule)
	tgt := &gwTarget{match: res.Match}
	if res.Rule.Redirect() == nil {
		b, endpoint, ok := res.Rule.Pick()
		switch {
		case !ok:
			// The HTTPRoute's status says which reference and why; clients
			// learn no Service names.
			h.reply(w, up.id, http.StatusInternalServerError, "the route's backend is not resolved")
			return nil, r
		case endpoint == "":
			h.log.Error(nil, "no ready endpoint", "route", up.id, "backend", b.Name)
			h.reply(w, up.id, http.StatusServiceUnavailable, "no ready endpoint for the route's backend")
			return nil, r
		}
		tgt.endpoint = endpoint
	}
	return up, r.WithContext(context.WithValue(r.Context(), gwTargetKey{}, tgt))
}

// retainTransports keeps, on a table swap, the transports of the new
// table's backend timeouts only (upstreams.retain).
func (g *gatewayUpstreams) retainTransports(u *upstreams) {
	g.cur.swapped = func(t *httproutes.Table) {
		rules := t.Rules()
		keep := make([]time.Duration, len(rules))
		for i, r := range rules {
			keep[i] = time.Duration(r.BackendTimeoutMs) * time.Millisecond
		}
		u.retain(keep)
	}
}

func (g *gatewayUpstreams) get(h *Handler, table *httproutes.Table, rule *httproutes.Rule) *upstream {
	return g.cur.get(table, rule, func() *upstream {
		up := h.buildGatewayUpstream(rule)
		up.forwardAuthorization = rule.ForwardAuthorization
		return up
	})
}

// buildGatewayUpstream builds the forwarding of one HTTPRoute rule: a
// redirect, or a reverse proxy to the endpoint chosen per request, with the
// rule's filters and timeouts.
func (h *Handler) buildGatewayUpstream(rule *httproutes.Rule) *upstream {
	if f := rule.Redirect(); f != nil {
		// The route's metric series as for a proxied rule; the reverse
		// proxy is replaced by the redirect.
		up := h.upstreams.buildWith(rule.ID, 0, nil)
		responses := h.opts.Metrics.Responses.WithLabelValues(rule.ID, "3xx", metrics.OriginGateway)
		up.proxy = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tgt, _ := r.Context().Value(gwTargetKey{}).(*gwTarget)
			responses.Inc()
			redirect(w, r, f, tgt)
		})
		return up
	}
	filters := rule.Filters
	up := h.upstreams.buildWith(rule.ID, time.Duration(rule.BackendTimeoutMs)*time.Millisecond, func(pr *httputil.ProxyRequest) {
		tgt, _ := pr.In.Context().Value(gwTargetKey{}).(*gwTarget)
		pr.Out.URL.Scheme = "http"
		pr.Out.URL.Host = tgt.endpoint
		// The client's Host goes to the backend, as other Gateway API
		// implementations do, unless a URLRewrite changes it.
		pr.Out.Host = pr.In.Host
		for i := range filters {
			f := &filters[i]
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
		pr.SetXForwarded()
	})
	if rule.RequestTimeoutMs > 0 {
		timeout := time.Duration(rule.RequestTimeoutMs) * time.Millisecond
		next := up.proxy
		up.proxy = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), timeout)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	return up
}

// modifyHeaders applies a RequestHeaderModifier: set, then add, then remove.
func modifyHeaders(hd http.Header, f *routetable.Filter) {
	for _, nv := range f.Set {
		hd.Set(nv.Name, nv.Value)
	}
	for _, nv := range f.Add {
		hd.Add(nv.Name, nv.Value)
	}
	for _, name := range f.Remove {
		hd.Del(name)
	}
}

// rewritePath applies a path modifier to the request path p, which matched m.
func rewritePath(p string, f *routetable.Filter, m *routetable.Match) string {
	if p == "" {
		p = "/"
	}
	switch f.PathType {
	case routetable.ReplaceFullPath:
		return f.PathValue
	case routetable.ReplacePrefixMatch:
		if m == nil || m.PathType != routetable.PathPrefix {
			return p
		}
		rest := p
		if m.PathValue != "/" {
			rest = p[len(m.PathValue):]
		}
		out := f.PathValue
		switch {
		case rest == "" || rest == "/" && strings.HasSuffix(out, "/"):
		case strings.HasSuffix(out, "/"):
			out += rest[1:]
		default:
			out += rest
		}
		if out == "" {
			out = "/"
		}
		return out
	}
	return p
}

// redirect answers a RequestRedirect.
func redirect(w http.ResponseWriter, r *http.Request, f *routetable.Filter, tgt *gwTarget) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host, port := r.Host, ""
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		host, port = h, p
	}
	if f.Scheme != "" && f.Scheme != scheme {
		scheme, port = f.Scheme, ""
	}
	if f.Hostname != "" {
		host = f.Hostname
	}
	if f.Port != 0 {
		port = strconv.Itoa(int(f.Port))
	}
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		port = ""
	}
	path := r.URL.Path
	if f.PathType != "" {
		var m *routetable.Match
		if tgt != nil {
			m = tgt.match
		}
		path = rewritePath(path, f, m)
	}
	loc := scheme + "://" + host
	if port != "" {
		loc = scheme + "://" + net.JoinHostPort(host, port)
	}
	u := *r.URL
	u.Scheme, u.Host, u.Path, u.RawPath = "", "", path, ""
	loc += u.RequestURI()
	code := f.StatusCode
	if code == 0 {
		code = http.StatusFound
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(code)
}
