package routes

import (
	"sort"

	"github.com/tollgate-dev/tollgate/internal/lib/urlpath"
)

// Table is a validated set of routes. It is immutable after construction and
// safe for concurrent use; the zero value and a nil *Table match nothing.
//
// Lookup precedence: routes with a host before routes without one; then exact
// paths before prefixes; then longer prefixes before shorter ones; then file
// order. A route whose method set excludes the request method is skipped, so
// a lower-precedence route may still match.
type Table struct {
	routes []Route // file order

	// The four precedence classes, each in precedence order. Exact routes
	// are indexed by path; the slices under one path are in file order.
	hostExact  map[string][]*Route
	hostPrefix []*Route
	anyExact   map[string][]*Route
	anyPrefix  []*Route
}

// MatchResult is the outcome of Table.Lookup.
type MatchResult struct {
	// Route is the matched route, or nil. It is shared and must not be
	// modified.
	Route *Route
	// MethodNotAllowed is set when no route matched but some route matches
	// the host and path with another method: callers should answer 405 with
	// an Allow header rather than 404.
	MethodNotAllowed bool
	// Allow lists, when MethodNotAllowed is set, the methods that would have
	// matched, sorted and without duplicates, for the Allow header
	// (strings.Join(Allow, ", ")).
	Allow []string
}

func newTable(routes []Route) *Table {
	t := &Table{routes: routes}
	for i := range routes {
		r := &routes[i]
		switch {
		case r.Host != "" && r.Path != "":
			if t.hostExact == nil {
				t.hostExact = make(map[string][]*Route)
			}
			t.hostExact[r.Path] = append(t.hostExact[r.Path], r)
		case r.Host != "":
			t.hostPrefix = append(t.hostPrefix, r)
		case r.Path != "":
			if t.anyExact == nil {
				t.anyExact = make(map[string][]*Route)
			}
			t.anyExact[r.Path] = append(t.anyExact[r.Path], r)
		default:
			t.anyPrefix = append(t.anyPrefix, r)
		}
	}
	byLength := func(s []*Route) {
		sort.SliceStable(s, func(i, j int) bool { return len(s[i].PathPrefix) > len(s[j].PathPrefix) })
	}
	byLength(t.hostPrefix)
	byLength(t.anyPrefix)
	return t
}

// Len returns the number of routes.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.routes)
}

// Routes returns a copy of the routes in file order.
func (t *Table) Routes() []Route {
	if t == nil {
		return nil
	}
	out := make([]Route, len(t.routes))
	for i, r := range t.routes {
		if r.Methods != nil {
			r.Methods = append([]string(nil), r.Methods...)
		}
		if r.Upstream != nil {
			u := *r.Upstream
			r.Upstream = &u
		}
		out[i] = r
	}
	return out
}

// Lookup returns the route for a request, or, when none matches, whether
// some route matches its host and path with another method (405, not 404).
// method is compared case-sensitively; host is the request Host, compared
// ignoring ASCII case, any port and a trailing dot; path is the unescaped
// request path (r.URL.Path), compared case-sensitively, with "" treated as
// "/".
//
// Paths that are not clean, that is with an empty ("//"), "." or ".."
// segment, match nothing: the upstream might resolve them to a path that
// belongs to another route. Callers wanting to serve them can redirect to
// path.Clean(path) first.
//
// The returned route is shared and must not be modified. Lookup only
// allocates to build MatchResult.Allow.
func (t *Table) Lookup(method, host, path string) MatchResult {
	r, wrongMethod := t.find(method, host, path)
	if r != nil || !wrongMethod {
		return MatchResult{Route: r}
	}
	if path == "" {
		path = "/"
	}
	host = urlpath.Host(host)
	var allow []string
	for i := range t.routes {
		r := &t.routes[i]
		if r.matchesHostPath(host, path) {
			for _, m := range r.Methods {
				if !contains(allow, m) {
					allow = append(allow, m)
				}
			}
		}
	}
	sort.Strings(allow)
	return MatchResult{MethodNotAllowed: true, Allow: allow}
}

// find returns the matching route, or nil and whether some route matched the
// host and path but not the method.
func (t *Table) find(method, host, path string) (match *Route, wrongMethod bool) {
	if t == nil {
		return nil, false
	}
	if path == "" {
		path = "/"
	}
	if !urlpath.Clean(path) {
		return nil, false
	}
	host = urlpath.Host(host)
	if len(t.hostExact) > 0 || len(t.hostPrefix) > 0 {
		for _, r := range t.hostExact[path] {
			if asciiEqualFold(r.Host, host) {
				if r.allowsMethod(method) {
					return r, false
				}
				wrongMethod = true
			}
		}
		for _, r := range t.hostPrefix {
			if urlpath.PrefixMatch(r.PathPrefix, path) && asciiEqualFold(r.Host, host) {
				if r.allowsMethod(method) {
					return r, false
				}
				wrongMethod = true
			}
		}
	}
	for _, r := range t.anyExact[path] {
		if r.allowsMethod(method) {
			return r, false
		}
		wrongMethod = true
	}
	for _, r := range t.anyPrefix {
		if urlpath.PrefixMatch(r.PathPrefix, path) {
			if r.allowsMethod(method) {
				return r, false
			}
			wrongMethod = true
		}
	}
	return nil, wrongMethod
}

// matchesHostPath reports whether r matches a request host (already passed
// through urlpath.Host) and a clean path, regardless of method.
func (r *Route) matchesHostPath(host, path string) bool {
	if r.Host != "" && !asciiEqualFold(r.Host, host) {
		return false
	}
	if r.Path != "" {
		return r.Path == path
	}
	return urlpath.PrefixMatch(r.PathPrefix, path)
}

func (r *Route) allowsMethod(method string) bool {
	if len(r.Methods) == 0 {
		return true
	}
	for _, m := range r.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// asciiEqualFold compares a lower-case configured host with a request host,
// ignoring ASCII case only (strings.EqualFold would also fold, e.g., the
// Kelvin sign into "k").
func asciiEqualFold(lower, s string) bool {
	if len(lower) != len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
