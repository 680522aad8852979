// Package routes is the gateway's route table: the route file format, its
// validation, request matching, and live reload of the file. It maps a
// request to a route id and an upstream (a Table is the proxy's
// routing.Router in routes-file mode); the limits for that route id are
// rules (dataplane/rules), compiled in the snapshot format (pkg/snapshot).
//
// A route file is YAML or JSON:
//
//	routes:
//	  - id: create-order                 # required; see v1alpha1.ValidIdentifier
//	    methods: [POST]                  # optional; empty means any method
//	    path: /orders                    # exactly one of path (exact) ...
//	    # pathPrefix: /api/              # ... or pathPrefix (segment-aware)
//	    upstream: http://127.0.0.1:8081  # http, https, or h2c (HTTP/2 without TLS: gRPC servers); a base path is prepended
//	    host: shop.example.com           # optional; case-insensitive, port ignored
//	    stripPrefix: false               # optional, only with pathPrefix
//	    timeout: 30s                     # optional response-header timeout, (0, 10m]; default: the gateway's --upstream-timeout
//	    forwardAuthorization: false      # optional; true forwards a bearer token that identified the request
//	    identity: required               # optional: required (default; 401 without a credential), optional (anonymous without one), none (never read)
//
// Unknown fields, duplicate keys and duplicate ids are errors, and so is a file
// without a top-level "routes" key, such as an empty file. An empty
// list is valid and matches nothing.
package routes

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/internal/lib/filewatch"
	"github.com/tollgate-dev/tollgate/internal/lib/strictdecode"
	"github.com/tollgate-dev/tollgate/internal/lib/urlpath"
)

// maxTimeout is the longest accepted route timeout.
const maxTimeout = 10 * time.Minute

// maxFileSize bounds what Load and the Watcher read. ConfigMaps are limited to
// 1 MiB, so this only guards against pointing the gateway at the wrong file.
const maxFileSize = 4 << 20

// Route is one validated entry of a route file. Routes returned by a Table are
// shared by all its readers and must not be modified.
//
// Route marshals to JSON (and, through sigs.k8s.io/yaml, to YAML) in the file
// form, so a slice of routes can be written back out as a route file. Read
// route files with Parse or Load, which validate; Route has no UnmarshalJSON.
type Route struct {
	// ID is the route id, unique within a table; it satisfies
	// v1alpha1.ValidIdentifier.
	ID string `json:"id"`
	// Methods lists the accepted HTTP methods, upper-case and without
	// duplicates; empty means any method. GET does not imply HEAD.
	Methods []string `json:"methods,omitempty"`
	// Path, when set, is the exact request path this route matches.
	Path string `json:"path,omitempty"`
	// PathPrefix, when set, is a segment-aware prefix: "/api" matches "/api"
	// and "/api/x" but not "/apix", and "/" matches every path. It is stored
	// without a trailing slash ("/api/" in the file becomes "/api"), except
	// for "/" itself. Exactly one of Path and PathPrefix is set.
	PathPrefix string `json:"pathPrefix,omitempty"`
	// Upstream is the http, https or h2c URL requests are forwarded to
	// (h2c: over HTTP/2 without TLS, routing.SchemeH2C). It has a
	// host and no user info, query or fragment; its path, if any, is a base
	// path prepended to the forwarded path (see UpstreamPath).
	Upstream *url.URL `json:"upstream"`
	// Host, when set, restricts the route to requests for this host. It is
	// stored in lower case, without a port.
	Host string `json:"host,omitempty"`
	// StripPrefix removes PathPrefix from the request path before forwarding.
	// It is only set together with PathPrefix.
	StripPrefix bool `json:"stripPrefix,omitempty"`
	// Timeout is the upstream response-header timeout; zero means the
	// caller's default.
	Timeout time.Duration `json:"timeout,omitempty"`
	// ForwardAuthorization forwards the Authorization header upstream
	// even when the request's identity came from it (a bearer token that
	// the upstream verifies again); by default the gateway removes it
	// then. A header that did not identify the request is forwarded
	// either way.
	ForwardAuthorization bool `json:"forwardAuthorization,omitempty"`
	// IdentityMode is the route's identity field: required (the
	// default), optional or none.
	IdentityMode routing.Identity `json:"-"`
}

// routeFile is the file form of a Route.
type routeFile struct {
	ID          string   `json:"id"`
	Methods     []string `json:"methods,omitempty"`
	Path        string   `json:"path,omitempty"`
	PathPrefix  string   `json:"pathPrefix,omitempty"`
	Upstream    string   `json:"upstream"`
	Host        string   `json:"host,omitempty"`
	StripPrefix bool     `json:"stripPrefix,omitempty"`
	Timeout     string   `json:"timeout,omitempty"`

	ForwardAuthorization bool   `json:"forwardAuthorization,omitempty"`
	Identity             string `json:"identity,omitempty"`
}

// MarshalJSON encodes r in the route file form: Upstream as a URL string and
// Timeout as a Go duration string.
func (r Route) MarshalJSON() ([]byte, error) {
	f := routeFile{
		ID:          r.ID,
		Methods:     r.Methods,
		Path:        r.Path,
		PathPrefix:  r.PathPrefix,
		Host:        r.Host,
		StripPrefix: r.StripPrefix,

		ForwardAuthorization: r.ForwardAuthorization,
	}
	if r.IdentityMode != routing.IdentityRequired {
		f.Identity = r.IdentityMode.String()
	}
	if r.Upstream != nil {
		f.Upstream = r.Upstream.String()
	}
	if r.Timeout != 0 {
		f.Timeout = r.Timeout.String()
	}
	return json.Marshal(f)
}

// UpstreamPath returns the path to forward upstream for reqPath, a request
// path that matched r: with StripPrefix the matched prefix is removed
// (leaving at least "/"), then the upstream URL's base path, if any, is
// prepended. It works on unescaped paths, like the ones Lookup takes.
func (r *Route) UpstreamPath(reqPath string) string {
	rest := reqPath
	if rest == "" {
		rest = "/"
	}
	if r.StripPrefix && r.PathPrefix != "/" && strings.HasPrefix(rest, r.PathPrefix) {
		rest = rest[len(r.PathPrefix):]
		if rest == "" {
			rest = "/"
		}
	}
	base := ""
	if r.Upstream != nil {
		base = strings.TrimSuffix(r.Upstream.Path, "/")
	}
	return base + rest
}

// Load reads and parses the route file at path. Errors are prefixed with
// the path.
func Load(path string) (*Table, error) {
	return filewatch.Load(path, maxFileSize, Parse)
}

// Parse parses and validates a route file (YAML or JSON). Every problem found
// is reported, one per line, each naming the route and the field, e.g.
//
//	routes[2] (id "orders"): path: must start with "/"
func Parse(data []byte) (*Table, error) {
	js, err := strictdecode.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("syntax: %w", err)
	}
	// Decode one field at a time: this gives errors that name the route
	// and the field.
	var file struct {
		Routes []json.RawMessage `json:"routes"`
	}
	top, ok := strictdecode.Fields(js, &file)
	if !ok {
		return nil, errors.New(`must be a mapping with a "routes" list`)
	}
	var errs []error
	for _, e := range top.Errors {
		if e.Problem == strictdecode.Invalid {
			return nil, errors.Join(append(errs, errors.New("routes: must be a list"))...)
		}
		errs = append(errs, e)
	}
	if !top.Has("routes") {
		errs = append(errs, errors.New(`routes: missing (use "routes: []" for an empty table)`))
		return nil, errors.Join(errs...)
	}
	items := file.Routes

	routes := make([]Route, 0, len(items))
	seen := make(map[string]int, len(items))
	for i, raw := range items {
		r, rerrs := parseRoute(i, raw)
		if len(rerrs) == 0 && r.ID != "" {
			if j, dup := seen[r.ID]; dup {
				rerrs = append(rerrs, fmt.Errorf("%s: id: duplicate of routes[%d]", label(i, r.ID), j))
			} else {
				seen[r.ID] = i
			}
		}
		errs = append(errs, rerrs...)
		routes = append(routes, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return newTable(routes), nil
}

// wants says what each field of a route must be, for type errors.
var wants = map[string]string{
	"id":          "a string (quote ids that look like numbers)",
	"methods":     "a list of strings",
	"path":        "a string",
	"pathPrefix":  "a string",
	"upstream":    "a string",
	"host":        "a string",
	"stripPrefix": "a boolean",
	"timeout":     `a duration string such as "30s"`,

	"forwardAuthorization": "a boolean",
	"identity":             "a string: required, optional or none",
}

// label names route i in error messages.
func label(i int, id string) string {
	if id == "" {
		return fmt.Sprintf("routes[%d]", i)
	}
	return fmt.Sprintf("routes[%d] (id %q)", i, id)
}

// parseRoute decodes and validates route i. It returns what it could decode
// (the id at least, for duplicate detection) and every problem found.
func parseRoute(i int, raw json.RawMessage) (Route, []error) {
	var f routeFile
	fields, ok := strictdecode.Fields(raw, &f)
	if !ok || fields.Null {
		return Route{}, []error{fmt.Errorf("routes[%d]: must be a mapping", i)}
	}
	c := &routeCheck{where: label(i, f.ID)}
	for _, e := range fields.Errors {
		if e.Problem == strictdecode.Invalid {
			c.fail(e.Name, "must be %s", wants[e.Name])
		} else {
			c.errs = append(c.errs, fmt.Errorf("%s: %w", c.where, e))
		}
	}
	if len(c.errs) > 0 {
		return Route{ID: f.ID}, c.errs
	}
	// One check per field, in the order of the file format.
	r := Route{ID: f.ID, StripPrefix: f.StripPrefix, ForwardAuthorization: f.ForwardAuthorization}
	c.id(f.ID)
	r.Methods = c.methods(f.Methods)
	r.Path, r.PathPrefix = c.paths(f.Path, f.PathPrefix, f.StripPrefix)
	r.Upstream = c.upstream(f.Upstream)
	r.Host = c.host(f.Host)
	r.Timeout = c.timeout(f.Timeout)
	r.IdentityMode = c.identity(f.Identity)
	return r, c.errs
}

// routeCheck collects the problems of one route, each naming the route
// (where) and the field.
type routeCheck struct {
	where string
	errs  []error
}

func (c *routeCheck) fail(field, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s: %s", c.where, field, fmt.Sprintf(format, args...)))
}

func (c *routeCheck) identity(s string) routing.Identity {
	mode, ok := routing.ParseIdentity(s)
	if !ok {
		c.fail("identity", "must be required, optional or none")
	}
	return mode
}

func (c *routeCheck) id(id string) {
	switch {
	case id == "":
		c.fail("id", "required")
	case !v1alpha1.ValidIdentifier(id):
		c.fail("id", "must be 1 to %d characters of [A-Za-z0-9._-], starting with a letter or digit", v1alpha1.MaxIdentifierLength)
	}
}

// methods returns the methods to store: nil for none.
func (c *routeCheck) methods(methods []string) []string {
	for j, m := range methods {
		switch {
		case !validMethod(m):
			c.fail(fmt.Sprintf("methods[%d]", j), "%q is not an upper-case HTTP method token", m)
		case contains(methods[:j], m):
			c.fail(fmt.Sprintf("methods[%d]", j), "duplicate %q", m)
		}
	}
	if len(methods) == 0 {
		return nil
	}
	return methods
}

// paths checks that exactly one of path and prefix is set, and
// stripPrefix only with a prefix; it returns them to store (the prefix
// without a trailing slash).
func (c *routeCheck) paths(path, prefix string, stripPrefix bool) (string, string) {
	stripAlone := stripPrefix && prefix == ""
	switch {
	case path != "" && prefix != "":
		c.fail("path", "set exactly one of path and pathPrefix, not both")
	case path == "" && prefix == "":
		c.fail("path", "set exactly one of path and pathPrefix")
	case path != "":
		if msg := checkPath(path); msg != "" {
			c.fail("path", "%s", msg)
		}
	default:
		if msg := checkPath(prefix); msg != "" {
			c.fail("pathPrefix", "%s", msg)
		}
		if len(prefix) > 1 {
			prefix = strings.TrimSuffix(prefix, "/")
		}
	}
	if stripAlone {
		c.fail("stripPrefix", "only allowed with pathPrefix")
	}
	return path, prefix
}

func (c *routeCheck) upstream(s string) *url.URL {
	if s == "" {
		c.fail("upstream", "required")
		return nil
	}
	u, msg := parseUpstream(s)
	if msg != "" {
		c.fail("upstream", "%s", msg)
	}
	return u
}

// host returns the host to store, in lower case.
func (c *routeCheck) host(h string) string {
	if h == "" {
		return ""
	}
	h, msg := checkHost(h)
	if msg != "" {
		c.fail("host", "%s", msg)
	}
	return h
}

func (c *routeCheck) timeout(s string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		c.fail("timeout", "invalid duration %q (want e.g. \"30s\")", s)
	case d <= 0:
		c.fail("timeout", "must be greater than 0, got %q", s)
	case d > maxTimeout:
		c.fail("timeout", "must be at most %s, got %q", maxTimeout, s)
	default:
		return d
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// validMethod reports whether m is an HTTP token (RFC 9110) without
// lower-case letters.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// checkPath validates a configured path or prefix and returns what is wrong
// with it, or "".
func checkPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return `must start with "/"`
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f {
			return "must not contain NUL or control characters"
		}
	}
	if strings.Contains(p, "..") {
		return `must not contain ".."`
	}
	if strings.ContainsAny(p, "?#") {
		return `must not contain "?" or "#" (routes match paths only)`
	}
	if !urlpath.Clean(p) {
		return `must not contain empty ("//") or "." segments`
	}
	return ""
}

// parseUpstream validates an upstream URL and returns what is wrong with it.
func parseUpstream(s string) (*url.URL, string) {
	u, err := url.Parse(s)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Sprintf("invalid URL %q: %v", s, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != routing.SchemeH2C:
		return nil, fmt.Sprintf("scheme must be http, https or h2c, got %q in %q", u.Scheme, s)
	case u.Opaque != "" || u.Host == "":
		return nil, fmt.Sprintf("must include a host, as in \"http://127.0.0.1:8081\", got %q", s)
	case u.Hostname() == "":
		return nil, fmt.Sprintf("must include a host name, got %q", s)
	case !validPort(u.Port()):
		return nil, fmt.Sprintf("invalid port %q", u.Port())
	case u.User != nil:
		return nil, "must not include user info"
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#"):
		return nil, "must not include a query or fragment"
	}
	return u, ""
}

// validPort reports whether p is empty or a port number from 1 to 65535.
func validPort(p string) bool {
	if p == "" {
		return true
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// checkHost validates a configured host and returns it in lower case.
func checkHost(h string) (string, string) {
	h = strings.ToLower(h)
	if strings.HasPrefix(h, "[") {
		a, err := netip.ParseAddr(strings.TrimSuffix(h[1:], "]"))
		if !strings.HasSuffix(h, "]") || err != nil || !a.Is6() || a.Zone() != "" {
			return "", fmt.Sprintf("%q is not a bracketed IPv6 address", h)
		}
		return "[" + a.String() + "]", ""
	}
	if len(h) > 253 {
		return "", "longer than 253 characters"
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.' && i > 0 && i < len(h)-1 && h[i-1] != '.':
		case c == ':':
			return "", fmt.Sprintf("%q must not include a port (the request port is ignored)", h)
		default:
			return "", fmt.Sprintf("%q is not a host name", h)
		}
	}
	return h, ""
}
