// Package httproutes serves a compiled Gateway API route table
// (pkg/routetable) in the gateway: matching with the Gateway API's
// precedence, backend and endpoint choice, the rules' filters and
// redirects (a Table is the proxy's routing.Router in Gateway API mode),
// and the live ConfigMap source.
package httproutes

import (
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/internal/lib/urlpath"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// Table is a route table ready for matching. It is immutable and safe for
// concurrent use; a nil *Table matches nothing.
//
// Precedence follows the Gateway API (HTTPRoute spec): first the hostname
// (an exact hostname before wildcards, a longer wildcard before a shorter
// one, both before routes for every host); then, among the matches for that
// hostname: an Exact path before a PathPrefix, a longer prefix before a
// shorter one, a match with a method, more header matches, more query
// matches, then the oldest HTTPRoute, then the HTTPRoute first by
// "namespace/name", then rule and match order. A request that matches no
// entry of a hostname tier is tried against the next, less specific, tier.
//
// Requests that arrived over TLS (r.TLS set) match only the rules attached
// to HTTPS listeners, plain ones only those attached to HTTP listeners.
//
// GRPCRoute rules match gRPC calls only (routing.IsGRPC), and within a
// hostname tier come before the HTTPRoute rules (a gRPC call that matches
// none of them may still match an HTTPRoute), with the GRPCRoute spec's
// precedence: a match with a service, then with a method, more header
// matches, then the oldest route, the route first by "namespace/name",
// rule and match order.
type Table struct {
	rules      []*Rule
	plain, tls index
	listeners  []routetable.TLSListener
}

// index is the hostname tiers of one kind of listener.
type index struct {
	exact    map[string][]*entry // host -> entries
	wildcard map[string][]*entry // ".suffix" -> entries
	any      []*entry
}

// Rule is one compiled rule with its serving state.
type Rule struct {
	routetable.Rule
	// redirect is the rule's RequestRedirect filter, if any.
	redirect *routetable.Filter
	backends []*backend
	total    int64 // sum of weights
}

type backend struct {
	routetable.Backend
	next atomic.Uint64 // round robin over Endpoints
}

type entry struct {
	rule  *Rule
	match *routetable.Match
	// precedence keys; grpc, service and method for a GRPCRoute's
	grpc     bool
	service  int
	gmethod  int
	exact    bool
	pathLen  int
	method   bool
	headers  int
	query    int
	created  int64
	route    string
	index    int
	matchIdx int
}

// New indexes t for matching.
func New(t *routetable.Table) *Table {
	out := &Table{plain: index{exact: map[string][]*entry{}, wildcard: map[string][]*entry{}},
		tls: index{exact: map[string][]*entry{}, wildcard: map[string][]*entry{}}}
	if t == nil {
		return out
	}
	out.listeners = t.TLS
	for i := range t.Rules {
		r := &Rule{Rule: t.Rules[i]}
		for j := range r.Filters {
			if r.Filters[j].Type == routetable.FilterRequestRedirect {
				r.redirect = &r.Filters[j]
			}
		}
		for _, b := range r.Backends {
			r.backends = append(r.backends, &backend{Backend: b})
			r.total += int64(b.Weight)
		}
		out.rules = append(out.rules, r)
		idx := &out.plain
		if r.TLS {
			idx = &out.tls
		}
		for j := range r.Matches {
			m := &r.Matches[j]
			e := &entry{
				rule: r, match: m, grpc: r.GRPC, service: len(m.GRPCService), gmethod: len(m.GRPCMethod),
				exact: m.PathType == routetable.PathExact, pathLen: len(m.PathValue),
				method: m.Method != "", headers: len(m.Headers), query: len(m.Query),
				created: r.Created, route: r.Route, index: r.Index, matchIdx: j,
			}
			if len(r.Hostnames) == 0 {
				idx.any = append(idx.any, e)
			}
			for _, h := range r.Hostnames {
				if strings.HasPrefix(h, "*.") {
					idx.wildcard[h[1:]] = append(idx.wildcard[h[1:]], e)
				} else {
					idx.exact[h] = append(idx.exact[h], e)
				}
			}
		}
	}
	for _, idx := range []*index{&out.plain, &out.tls} {
		for _, es := range idx.exact {
			sortEntries(es)
		}
		for _, es := range idx.wildcard {
			sortEntries(es)
		}
		sortEntries(idx.any)
	}
	return out
}

// TLSListeners are the HTTPS listeners of the table, with the Secrets of
// their certificates.
func (t *Table) TLSListeners() []routetable.TLSListener {
	if t == nil {
		return nil
	}
	return t.listeners
}

func sortEntries(es []*entry) {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		switch {
		case a.grpc != b.grpc:
			return a.grpc
		case a.service != b.service:
			return a.service > b.service
		case a.gmethod != b.gmethod:
			return a.gmethod > b.gmethod
		case a.exact != b.exact:
			return a.exact
		case a.pathLen != b.pathLen:
			return a.pathLen > b.pathLen
		case a.method != b.method:
			return a.method
		case a.headers != b.headers:
			return a.headers > b.headers
		case a.query != b.query:
			return a.query > b.query
		case a.created != b.created:
			return a.created < b.created
		case a.route != b.route:
			return a.route < b.route
		case a.index != b.index:
			return a.index < b.index
		}
		return a.matchIdx < b.matchIdx
	})
}

// Rules are the table's rules, in the compiled table's order. They are
// shared and must not be modified.
func (t *Table) Rules() []*Rule {
	if t == nil {
		return nil
	}
	return t.rules
}

// Len is the number of rules.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.rules)
}

// Result is a match.
type Result struct {
	Rule *Rule
	// Match is the HTTPRouteMatch that matched (for ReplacePrefixMatch).
	Match *routetable.Match
}

// Match finds the rule for a request. path is the unescaped request path;
// paths with an empty, "." or ".." segment match nothing.
func (t *Table) Match(r *http.Request) (Result, bool) {
	if t == nil {
		return Result{}, false
	}
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	if !urlpath.Clean(path) {
		return Result{}, false
	}
	host := strings.ToLower(urlpath.Host(r.Host))
	idx := &t.plain
	if r.TLS != nil {
		idx = &t.tls
	}
	if e := first(idx.exact[host], r, path); e != nil {
		return Result{e.rule, e.match}, true
	}
	if len(idx.wildcard) > 0 {
		// Longest suffix first: ".b.example.com" before ".example.com".
		for i := strings.IndexByte(host, '.'); i >= 0; {
			if e := first(idx.wildcard[host[i:]], r, path); e != nil {
				return Result{e.rule, e.match}, true
			}
			j := strings.IndexByte(host[i+1:], '.')
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	if e := first(idx.any, r, path); e != nil {
		return Result{e.rule, e.match}, true
	}
	return Result{}, false
}

func first(es []*entry, r *http.Request, path string) *entry {
	var query map[string][]string
	var call *grpcCall
	for _, e := range es {
		m := e.match
		if e.grpc {
			if call == nil {
				call = grpcCallOf(r, path)
			}
			if !call.matches(m) {
				continue
			}
		} else if !pathMatches(m, r, path) {
			continue
		}
		ok := true
		for _, h := range m.Headers {
			if v := r.Header.Values(h.Name); len(v) == 0 || v[0] != h.Value {
				ok = false
				break
			}
		}
		if ok && len(m.Query) > 0 {
			if query == nil {
				query = r.URL.Query()
			}
			for _, q := range m.Query {
				if v := query[q.Name]; len(v) == 0 || v[0] != q.Value {
					ok = false
					break
				}
			}
		}
		if ok {
			return e
		}
	}
	return nil
}

// pathMatches reports whether r, of path, matches m's path and method.
func pathMatches(m *routetable.Match, r *http.Request, path string) bool {
	if m.PathType == routetable.PathExact {
		if path != m.PathValue {
			return false
		}
	} else if !urlpath.PrefixMatch(m.PathValue, path) {
		return false
	}
	return m.Method == "" || m.Method == r.Method
}

// grpcCall is what GRPCRoute matches see of a request: whether it is a
// gRPC call, and its service and method (its path is /<service>/<method>;
// ok is false for another path, which only a match of any call takes).
type grpcCall struct {
	is, ok          bool
	service, method string
}

func grpcCallOf(r *http.Request, path string) *grpcCall {
	c := &grpcCall{is: routing.IsGRPC(r)}
	if rest, ok := strings.CutPrefix(path, "/"); ok {
		c.service, c.method, c.ok = strings.Cut(rest, "/")
		c.ok = c.ok && c.service != "" && c.method != "" && !strings.Contains(c.method, "/")
	}
	return c
}

// matches reports whether the call matches m's service and method.
func (c *grpcCall) matches(m *routetable.Match) bool {
	switch {
	case !c.is:
		return false
	case m.GRPCService == "" && m.GRPCMethod == "":
		return true
	}
	return c.ok && (m.GRPCService == "" || m.GRPCService == c.service) && (m.GRPCMethod == "" || m.GRPCMethod == c.method)
}

// Pick chooses a backend by weight and one of its endpoints. ok is false
// when the request must be answered 500 (no backend, all weights zero, or
// the chosen reference did not resolve); endpoint is "" when the backend has
// no ready endpoint (503).
func (r *Rule) Pick() (b *routetable.Backend, endpoint string, ok bool) {
	if r.total <= 0 {
		return nil, "", false
	}
	n := rand.Int64N(r.total)
	var chosen *backend
	for _, be := range r.backends {
		if n < int64(be.Weight) {
			chosen = be
			break
		}
		n -= int64(be.Weight)
	}
	if chosen.Error != "" {
		return &chosen.Backend, "", false
	}
	if len(chosen.Endpoints) == 0 {
		return &chosen.Backend, "", true
	}
	i := chosen.next.Add(1) - 1
	return &chosen.Backend, chosen.Endpoints[i%uint64(len(chosen.Endpoints))], true
}
