package routes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/internal/lib/urlpath"
)

func mustParse(t testing.TB, src string) *Table {
	t.Helper()
	tab, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return tab
}

// ids returns the ids of tab's routes in file order.
func ids(tab *Table) []string {
	var out []string
	for _, r := range tab.Routes() {
		out = append(out, r.ID)
	}
	return out
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name  string
		src   string                    // file content
		check func(*testing.T, []Route) // inspects the parsed routes
	}{
		{
			name: "empty list",
			src:  "routes: []\n",
			check: func(t *testing.T, rs []Route) {
				if len(rs) != 0 {
					t.Errorf("got %d routes, want 0", len(rs))
				}
			},
		},
		{
			name: "null list is empty",
			src:  "routes:\n",
			check: func(t *testing.T, rs []Route) {
				if len(rs) != 0 {
					t.Errorf("got %d routes, want 0", len(rs))
				}
			},
		},
		{
			name: "all fields",
			src: `
routes:
  - id: create-order
    methods: [POST, PUT]
    pathPrefix: /orders/
    upstream: https://orders.internal:8443/base/
    host: Shop.Example.COM
    stripPrefix: true
    timeout: 1m30s
`,
			check: func(t *testing.T, rs []Route) {
				r := rs[0]
				if r.ID != "create-order" || !reflect.DeepEqual(r.Methods, []string{"POST", "PUT"}) ||
					r.Path != "" || r.PathPrefix != "/orders" || r.Host != "shop.example.com" ||
					!r.StripPrefix || r.Timeout != 90*time.Second {
					t.Errorf("got %+v", r)
				}
				if got := r.Upstream.String(); got != "https://orders.internal:8443/base/" {
					t.Errorf("upstream = %q", got)
				}
			},
		},
		{
			name: "minimal exact route, defaults",
			src:  "routes:\n- id: a\n  path: /x\n  upstream: http://127.0.0.1:8081\n",
			check: func(t *testing.T, rs []Route) {
				r := rs[0]
				if r.Methods != nil || r.Host != "" || r.StripPrefix || r.Timeout != 0 || r.Path != "/x" {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name: "JSON",
			src:  `{"routes":[{"id":"j","path":"/j","upstream":"http://j"},{"id":"k","pathPrefix":"/","upstream":"http://k"}]}`,
			check: func(t *testing.T, rs []Route) {
				if len(rs) != 2 || rs[0].ID != "j" || rs[1].PathPrefix != "/" {
					t.Errorf("got %+v", rs)
				}
			},
		},
		{
			name: "IPv6 host is normalized",
			src:  "routes:\n- id: v6\n  host: '[0:0::1]'\n  path: /\n  upstream: http://[::1]:80\n",
			check: func(t *testing.T, rs []Route) {
				if rs[0].Host != "[::1]" {
					t.Errorf("host = %q", rs[0].Host)
				}
			},
		},
		{
			name: "file order kept",
			src:  "routes:\n- {id: b, path: /b, upstream: 'http://b'}\n- {id: a, path: /a, upstream: 'http://a'}\n",
			check: func(t *testing.T, rs []Route) {
				if rs[0].ID != "b" || rs[1].ID != "a" {
					t.Errorf("got %+v", rs)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := mustParse(t, tt.src)
			if tab.Len() != len(tab.Routes()) {
				t.Errorf("Len() = %d, len(Routes()) = %d", tab.Len(), len(tab.Routes()))
			}
			tt.check(t, tab.Routes())
		})
	}
}

func TestParseErrors(t *testing.T) {
	// route wraps one route's fields (YAML flow mapping body) in a file whose
	// first two routes are valid, so the route under test is routes[2].
	route := func(fields string) string {
		return "routes:\n- {id: r0, path: /r0, upstream: 'http://r0'}\n- {id: r1, path: /r1, upstream: 'http://r1'}\n- {" + fields + "}\n"
	}
	tests := []struct {
		name string
		src  string // file content
		want string // substring of the error
	}{
		{"example from the docs", route(`id: orders, path: orders, upstream: 'http://o'`), `routes[2] (id "orders"): path: must start with "/"`},
		{"duplicate id", route(`id: r1, path: /x, upstream: 'http://x'`), `routes[2] (id "r1"): id: duplicate of routes[1]`},
		{"missing id", route(`path: /x, upstream: 'http://x'`), `routes[2]: id: required`},
		{"bad id characters", route(`id: 'a b', path: /x, upstream: 'http://x'`), `routes[2] (id "a b"): id: must be 1 to 64 characters`},
		{"id starting with a dash", route(`id: -a, path: /x, upstream: 'http://x'`), `id: must be 1 to 64`},
		{"id too long", route(`id: ` + strings.Repeat("a", 65) + `, path: /x, upstream: 'http://x'`), `id: must be 1 to 64`},
		{"numeric id not quoted", route(`id: 123, path: /x, upstream: 'http://x'`), `routes[2]: id: must be a string`},
		{"lower-case method", route(`id: x, methods: [get], path: /x, upstream: 'http://x'`), `routes[2] (id "x"): methods[0]: "get" is not an upper-case HTTP method token`},
		{"method with space", route(`id: x, methods: [GET, 'PO ST'], path: /x, upstream: 'http://x'`), `methods[1]: "PO ST" is not`},
		{"empty method", route(`id: x, methods: [''], path: /x, upstream: 'http://x'`), `methods[0]: "" is not`},
		{"duplicate method", route(`id: x, methods: [GET, GET], path: /x, upstream: 'http://x'`), `methods[1]: duplicate "GET"`},
		{"methods not a list", route(`id: x, methods: GET, path: /x, upstream: 'http://x'`), `methods: must be a list of strings`},
		{"both path and pathPrefix", route(`id: x, path: /x, pathPrefix: /y, upstream: 'http://x'`), `path: set exactly one of path and pathPrefix, not both`},
		{"neither path nor pathPrefix", route(`id: x, upstream: 'http://x'`), `routes[2] (id "x"): path: set exactly one of path and pathPrefix`},
		{"path with dot-dot", route(`id: x, path: /a/../b, upstream: 'http://x'`), `path: must not contain ".."`},
		{"prefix with dot-dot", route(`id: x, pathPrefix: '/a..', upstream: 'http://x'`), `pathPrefix: must not contain ".."`},
		{"path with NUL", route(`id: x, path: "/a\0", upstream: 'http://x'`), `path: must not contain NUL or control characters`},
		{"path with tab", route(`id: x, path: "/a\tb", upstream: 'http://x'`), `path: must not contain NUL or control characters`},
		{"path with query", route(`id: x, path: '/a?b=1', upstream: 'http://x'`), `path: must not contain "?" or "#"`},
		{"path with empty segment", route(`id: x, path: '/a//b', upstream: 'http://x'`), `path: must not contain empty`},
		{"path with dot segment", route(`id: x, pathPrefix: '/a/.', upstream: 'http://x'`), `pathPrefix: must not contain empty ("//") or "." segments`},
		{"missing upstream", route(`id: x, path: /x`), `routes[2] (id "x"): upstream: required`},
		{"bad upstream scheme", route(`id: x, path: /x, upstream: 'ftp://x'`), `upstream: scheme must be http, https or h2c, got "ftp"`},
		{"upstream without scheme", route(`id: x, path: /x, upstream: 'localhost:8080'`), `upstream: scheme must be http, https or h2c`},
		{"upstream without host", route(`id: x, path: /x, upstream: 'http:///x'`), `upstream: must include a host`},
		{"upstream with port only", route(`id: x, path: /x, upstream: 'http://:80'`), `upstream: must include a host name`},
		{"upstream bad port", route(`id: x, path: /x, upstream: 'http://x:99999'`), `upstream: invalid port "99999"`},
		{"upstream with query", route(`id: x, path: /x, upstream: 'http://x/?a=b'`), `upstream: must not include a query or fragment`},
		{"upstream with user info", route(`id: x, path: /x, upstream: 'http://u:p@x/'`), `upstream: must not include user info`},
		{"upstream unparsable", route(`id: x, path: /x, upstream: 'http://x y'`), `upstream: invalid URL`},
		{"host with port", route(`id: x, path: /x, host: 'a.com:80', upstream: 'http://x'`), `host: "a.com:80" must not include a port`},
		{"host wildcard", route(`id: x, path: /x, host: '*.a.com', upstream: 'http://x'`), `host: "*.a.com" is not a host name`},
		{"host bad IPv6", route(`id: x, path: /x, host: '[::1', upstream: 'http://x'`), `host: "[::1" is not a bracketed IPv6 address`},
		{"stripPrefix without pathPrefix", route(`id: x, path: /x, stripPrefix: true, upstream: 'http://x'`), `routes[2] (id "x"): stripPrefix: only allowed with pathPrefix`},
		{"stripPrefix not a bool", route(`id: x, pathPrefix: /x, stripPrefix: 'yes', upstream: 'http://x'`), `stripPrefix: must be a boolean`},
		{"unknown field", route(`id: x, path: /x, upstream: 'http://x', retries: 3`), `routes[2] (id "x"): unknown field "retries"`},
		{"field in wrong case", route(`id: x, Path: /x, upstream: 'http://x'`), `unknown field "Path" (did you mean "path"?)`},
		{"unknown top-level field", "routes: []\nroute: []\n", `unknown field "route"`},
		{"duplicate key", "routes:\n- id: x\n  id: y\n  path: /x\n  upstream: http://x\n", `syntax:`},
		{"timeout not a duration", route(`id: x, path: /x, upstream: 'http://x', timeout: 'soon'`), `routes[2] (id "x"): timeout: invalid duration "soon"`},
		{"timeout without unit", route(`id: x, path: /x, upstream: 'http://x', timeout: 30`), `timeout: must be a duration string`},
		{"timeout zero", route(`id: x, path: /x, upstream: 'http://x', timeout: 0s`), `timeout: must be greater than 0`},
		{"timeout negative", route(`id: x, path: /x, upstream: 'http://x', timeout: -1s`), `timeout: must be greater than 0`},
		{"timeout too long", route(`id: x, path: /x, upstream: 'http://x', timeout: 11m`), `timeout: must be at most 10m0s`},
		{"empty file", "", `routes: missing`},
		{"routes missing", "{}", `routes: missing`},
		{"routes not a list", "routes: {a: b}\n", `routes: must be a list`},
		{"route not a mapping", "routes: [a]\n", `routes[0]: must be a mapping`},
		{"route null", "routes: [null]\n", `routes[0]: must be a mapping`},
		{"routes a string", "routes: all\n", `routes: must be a list`},
		{"path not a string", route(`id: x, path: [/x], upstream: 'http://x'`), `routes[2] (id "x"): path: must be a string`},
		{"upstream not a string", route(`id: x, path: /x, upstream: {host: x}`), `routes[2] (id "x"): upstream: must be a string`},
		{"host not a string", route(`id: x, path: /x, host: 1, upstream: 'http://x'`), `routes[2] (id "x"): host: must be a string`},
		{"top level is a list", "- a\n", `must be a mapping with a "routes" list`},
		{"YAML syntax error", "routes: [\n", `syntax:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, err := Parse([]byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded with routes %v; want error containing %q", ids(tab), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant substring:\n%s", err, tt.want)
			}
		})
	}
}

func TestParseReportsEveryError(t *testing.T) {
	_, err := Parse([]byte("routes:\n- {id: a, path: x, upstream: 'ftp://a'}\n- {id: a, pathPrefix: /b, upstream: 'http://b', timeout: 1h}\n"))
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	for _, want := range []string{
		`routes[0] (id "a"): path: must start with "/"`,
		`routes[0] (id "a"): upstream: scheme must be http, https or h2c`,
		`routes[1] (id "a"): timeout: must be at most`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error:\n%v\nmissing %q", err, want)
		}
	}
}

// TestParseReportsEveryBadField: a wrong type in one field hides neither
// the next one nor an unknown field.
func TestParseReportsEveryBadField(t *testing.T) {
	_, err := Parse([]byte("routes:\n- {id: a, methods: GET, pathPrefix: 1, stripPrefix: 'no', upstream: 'http://b', timeout: 30, Host: x}\n"))
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	for _, want := range []string{
		`routes[0] (id "a"): unknown field "Host" (did you mean "host"?)`,
		`routes[0] (id "a"): methods: must be a list of strings`,
		`routes[0] (id "a"): pathPrefix: must be a string`,
		`routes[0] (id "a"): stripPrefix: must be a boolean`,
		`routes[0] (id "a"): timeout: must be a duration string`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error:\n%v\nmissing %q", err, want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "routes.yaml")
	writeFile(t, good, "routes:\n- {id: a, path: /a, upstream: 'http://a'}\n")
	tab, err := Load(good)
	if err != nil || tab.Len() != 1 {
		t.Fatalf("Load = %v, %v", tab, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "routes:\n- {id: a, path: a, upstream: 'http://a'}\n")
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": routes[0]") {
		t.Errorf("Load(bad) error = %v, want it prefixed with the path", err)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Load(missing) succeeded")
	}

	big := filepath.Join(dir, "big.yaml")
	writeFile(t, big, "routes: []\n#"+strings.Repeat("x", maxFileSize))
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) error = %v", err)
	}
}

// matchTable is the fixed table for the matching tests and FuzzMatch.
const matchTable = `
routes:
  - id: shop-orders
    host: shop.example.com
    methods: [GET]
    path: /orders
    upstream: http://shop
  - id: shop-all
    host: Shop.Example.com
    pathPrefix: /
    upstream: http://shop-all
  - id: create-order
    methods: [POST]
    path: /orders
    upstream: http://orders
  - id: list-orders
    methods: [GET, HEAD]
    path: /orders
    upstream: http://orders-read
  - id: api
    pathPrefix: /api/
    stripPrefix: true
    upstream: http://api/base/
  - id: api-v2
    pathPrefix: /api/v2
    upstream: http://api-v2
  - id: api-v2-shadowed   # same prefix as api-v2, later in the file
    pathPrefix: /api/v2/
    upstream: http://never
  - id: admin
    methods: [GET]
    pathPrefix: /admin
    upstream: http://admin
  - id: item-writes
    methods: [PUT, DELETE]
    pathPrefix: /items
    upstream: http://items
  - id: item-x
    methods: [GET, PUT]
    path: /items/x
    upstream: http://items
  - id: v6
    host: "[::1]"
    path: /v6
    upstream: http://v6
  - id: Case
    path: /Case
    upstream: http://case
`

// Match is the route for a request, or false: Lookup without telling a
// 405 from a 404, and without allocating.
func (t *Table) Match(method, host, path string) (*Route, bool) {
	r, _ := t.find(method, host, path)
	return r, r != nil
}

func TestMatch(t *testing.T) {
	tab := mustParse(t, matchTable)
	tests := []struct {
		name   string
		method string
		host   string
		path   string
		want   string   // matched route id; "" for none
		allow  []string // when set, expect a 405 with this Allow list
	}{
		{"exact with method", "POST", "other.example.com", "/orders", "create-order", nil},
		{"exact, second route by method", "GET", "", "/orders", "list-orders", nil},
		{"host-specific exact wins, port ignored", "GET", "shop.example.com:8443", "/orders", "shop-orders", nil},
		{"host-specific prefix beats host-less exact", "POST", "SHOP.example.COM", "/orders", "shop-all", nil},
		{"host trailing dot ignored", "GET", "shop.example.com.", "/x", "shop-all", nil},
		{"host suffix is another host", "GET", "shop.example.com.evil", "/orders", "list-orders", nil},
		{"host with Kelvin sign is not folded", "GET", "shop.e\u212Aample.com", "/x", "", nil},
		{"empty path is /", "GET", "shop.example.com", "", "shop-all", nil},
		{"longer prefix wins", "GET", "", "/api/v2/users", "api-v2", nil},
		{"prefix matches itself", "GET", "", "/api/v2", "api-v2", nil},
		{"prefix with trailing slash", "GET", "", "/api/v2/", "api-v2", nil},
		{"prefix is segment-aware", "GET", "", "/api/v20", "api", nil},
		{"prefix configured with slash matches bare", "GET", "", "/api", "api", nil},
		{"no partial segment", "GET", "", "/apix", "", nil},
		{"exact does not match trailing slash", "DELETE", "", "/orders/", "", nil},
		{"exact beats prefix", "GET", "", "/items/x", "item-x", nil},
		{"prefix after exact with wrong method", "DELETE", "", "/items/x", "item-writes", nil},
		{"405 from a prefix", "POST", "", "/admin/users", "", []string{"GET"}},
		{"405 unions all candidates", "PATCH", "", "/items/x", "", []string{"DELETE", "GET", "PUT"}},
		{"405 on exact routes", "DELETE", "", "/orders", "", []string{"GET", "HEAD", "POST"}},
		{"method is case-sensitive", "get", "", "/orders", "", []string{"GET", "HEAD", "POST"}},
		{"path is case-sensitive", "GET", "", "/case", "", nil},
		{"path case matches", "GET", "", "/Case", "Case", nil},
		{"dot-dot never matches", "GET", "", "/api/../admin", "", nil},
		{"dot segment never matches", "GET", "", "/api/./x", "", nil},
		{"double slash never matches", "GET", "", "//api/x", "", nil},
		{"unclean path with host catch-all", "GET", "shop.example.com", "/a/../b", "", nil},
		{"asterisk never matches", "OPTIONS", "shop.example.com", "*", "", nil},
		{"IPv6 host", "GET", "[::1]:8080", "/v6", "v6", nil},
		{"IPv6 host, other address", "GET", "[::2]:8080", "/v6", "", nil},
		{"unknown path", "GET", "", "/nope", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := tab.Match(tt.method, tt.host, tt.path)
			got := ""
			if ok {
				got = r.ID
			}
			if got != tt.want {
				t.Errorf("Match(%q, %q, %q) = %q, want %q", tt.method, tt.host, tt.path, got, tt.want)
			}
			res := tab.Lookup(tt.method, tt.host, tt.path)
			if res.Route != r {
				t.Errorf("Lookup route = %v, Match route = %v", res.Route, r)
			}
			if res.MethodNotAllowed != (tt.allow != nil) || !reflect.DeepEqual(res.Allow, tt.allow) {
				t.Errorf("Lookup = {MethodNotAllowed: %v, Allow: %q}, want Allow %q", res.MethodNotAllowed, res.Allow, tt.allow)
			}
		})
	}
}

func TestMatchEmptyTables(t *testing.T) {
	for name, tab := range map[string]*Table{"nil": nil, "zero": {}, "parsed": mustParse(t, "routes: []")} {
		if r, ok := tab.Match("GET", "h", "/"); ok || r != nil {
			t.Errorf("%s: Match = %v, %v", name, r, ok)
		}
		if res := tab.Lookup("GET", "h", "/"); res.Route != nil || res.MethodNotAllowed {
			t.Errorf("%s: Lookup = %+v", name, res)
		}
		if tab.Len() != 0 || len(tab.Routes()) != 0 {
			t.Errorf("%s: Len = %d", name, tab.Len())
		}
	}
}

func TestUpstreamPath(t *testing.T) {
	tests := []struct {
		route string // YAML flow mapping body without id
		path  string // request path
		want  string // forwarded path
	}{
		{`path: /a, upstream: 'http://u'`, "/a", "/a"},
		{`path: /a, upstream: 'http://u/'`, "/a", "/a"},
		{`path: /a, upstream: 'http://u/base'`, "/a", "/base/a"},
		{`path: /a, upstream: 'http://u/base/'`, "/a", "/base/a"},
		{`pathPrefix: /api, upstream: 'http://u'`, "/api/x", "/api/x"},
		{`pathPrefix: /api/, stripPrefix: true, upstream: 'http://u'`, "/api/x/y", "/x/y"},
		{`pathPrefix: /api, stripPrefix: true, upstream: 'http://u'`, "/api", "/"},
		{`pathPrefix: /api, stripPrefix: true, upstream: 'http://u'`, "/api/", "/"},
		{`pathPrefix: /api, stripPrefix: true, upstream: 'http://u/v1'`, "/api/x", "/v1/x"},
		{`pathPrefix: /api, stripPrefix: true, upstream: 'http://u/v1'`, "/api", "/v1/"},
		{`pathPrefix: /, stripPrefix: true, upstream: 'http://u/v1'`, "/x", "/v1/x"},
		{`pathPrefix: /, upstream: 'http://u'`, "", "/"},
	}
	for _, tt := range tests {
		tab := mustParse(t, "routes:\n- {id: r, "+tt.route+"}\n")
		r, ok := tab.Match("GET", "", tt.path)
		if !ok {
			t.Errorf("{%s}: %q did not match", tt.route, tt.path)
			continue
		}
		if got := r.UpstreamPath(tt.path); got != tt.want {
			t.Errorf("{%s}.UpstreamPath(%q) = %q, want %q", tt.route, tt.path, got, tt.want)
		}
	}
}

func TestRoutesReturnsCopies(t *testing.T) {
	tab := mustParse(t, matchTable)
	rs := tab.Routes()
	rs[0].Methods[0] = "DELETE"
	rs[0].Upstream.Host = "evil"
	rs[0].ID = "changed"
	if r, ok := tab.Match("GET", "shop.example.com", "/orders"); !ok || r.ID != "shop-orders" || r.Upstream.Host != "shop" {
		t.Errorf("table changed through Routes(): %+v", r)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	tab := mustParse(t, matchTable+"  - {id: t, path: /t, upstream: 'https://t:1/p', timeout: 1500ms}\n")
	out, err := yaml.Marshal(map[string]any{"routes": tab.Routes()})
	if err != nil {
		t.Fatal(err)
	}
	again := mustParse(t, string(out))
	if a, b := comparable(tab.Routes()), comparable(again.Routes()); !reflect.DeepEqual(a, b) {
		t.Errorf("round trip changed routes:\n%s\nbefore: %+v\nafter:  %+v", out, a, b)
	}
}

// comparable replaces each route's upstream by its string form.
func comparable(rs []Route) []any {
	var out []any
	for _, r := range rs {
		u := r.Upstream.String()
		r.Upstream = nil
		out = append(out, []any{r, u})
	}
	return out
}

// writeFile replaces path atomically, as a careful writer would.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds, failing the test after a generous
// deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// watchRecorder records Watcher callbacks.
type watchRecorder struct {
	mu      sync.Mutex
	reloads []*Table
	errs    []error
}

func (r *watchRecorder) options() WatcherOptions {
	return WatcherOptions{
		Interval: 20 * time.Millisecond,
		OnReload: func(t *Table) { r.mu.Lock(); r.reloads = append(r.reloads, t); r.mu.Unlock() },
		OnError:  func(err error) { r.mu.Lock(); r.errs = append(r.errs, err); r.mu.Unlock() },
	}
}

func (r *watchRecorder) counts() (reloads, errs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reloads), len(r.errs)
}

// startWatcher runs w until the test ends.
func startWatcher(t *testing.T, w *Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func routeFileWith(ids ...string) string {
	var b strings.Builder
	b.WriteString("routes:\n")
	for _, id := range ids {
		fmt.Fprintf(&b, "- {id: %s, path: /%s, upstream: 'http://%s'}\n", id, id, id)
	}
	return b.String()
}

func TestWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "routes.yaml")
	writeFile(t, path, routeFileWith("a"))
	var rec watchRecorder
	w, err := NewWatcher(path, rec.options())
	if err != nil {
		t.Fatal(err)
	}
	first := w.Current()
	if got := ids(first); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("initial routes = %v", got)
	}
	startWatcher(t, w)

	// A valid change is picked up.
	writeFile(t, path, routeFileWith("a", "b"))
	eventually(t, "reload to [a b]", func() bool { return w.Current().Len() == 2 })
	second := w.Current()
	if _, ok := second.Match("GET", "", "/b"); !ok {
		t.Error("new table does not match /b")
	}
	if _, ok := first.Match("GET", "", "/b"); ok {
		t.Error("old table changed")
	}
	eventually(t, "OnReload", func() bool { n, _ := rec.counts(); return n == 1 })
	rec.mu.Lock()
	if rec.reloads[0] != second {
		t.Error("OnReload got a different table than Current")
	}
	rec.mu.Unlock()

	// Rewriting the same content (new mtime, same hash) does not reload.
	writeFile(t, path, routeFileWith("a", "b"))
	w.Poll()
	w.Poll()
	if n, _ := rec.counts(); n != 1 || w.Current() != second {
		t.Errorf("identical content reloaded: %d reloads", n)
	}

	// Invalid content: last good table kept, OnError called once.
	writeFile(t, path, routeFileWith("a", "b")+"- {id: bad, path: nope, upstream: 'http://x'}\n")
	eventually(t, "OnError", func() bool { _, n := rec.counts(); return n >= 1 })
	for range 5 {
		w.Poll() // each poll sees the same bad content
	}
	if _, n := rec.counts(); n != 1 {
		t.Errorf("OnError called %d times for one bad content, want 1", n)
	}
	rec.mu.Lock()
	if err := rec.errs[0]; !strings.Contains(err.Error(), path+`: routes[2] (id "bad"): path: must start with "/"`) {
		t.Errorf("OnError error = %v", err)
	}
	rec.mu.Unlock()
	if w.Current() != second {
		t.Error("invalid content replaced the table")
	}

	// Another bad content is reported again.
	writeFile(t, path, "routes: [\n")
	eventually(t, "second OnError", func() bool { _, n := rec.counts(); return n == 2 })

	// Fixing the file reloads it.
	writeFile(t, path, routeFileWith("c"))
	eventually(t, "reload to [c]", func() bool { return reflect.DeepEqual(ids(w.Current()), []string{"c"}) })
	eventually(t, "second OnReload", func() bool { n, _ := rec.counts(); return n == 2 })
	if _, n := rec.counts(); n != 2 {
		t.Errorf("OnError called %d times, want 2", n)
	}
}

func TestWatcherReadErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "routes.yaml")
	writeFile(t, path, routeFileWith("a"))
	var rec watchRecorder
	w, err := NewWatcher(path, rec.options())
	if err != nil {
		t.Fatal(err)
	}
	good := w.Current()

	// A missing file is one error, however many polls see it.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w.Poll()
	}
	if r, e := rec.counts(); r != 0 || e != 1 || w.Current() != good {
		t.Errorf("after removal: %d reloads, %d errors, table kept: %v", r, e, w.Current() == good)
	}

	// The same content coming back is not a reload, but re-arms reporting.
	writeFile(t, path, routeFileWith("a"))
	w.Poll()
	if r, e := rec.counts(); r != 0 || e != 1 || w.Current() != good {
		t.Errorf("after restore: %d reloads, %d errors", r, e)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w.Poll()
	if _, e := rec.counts(); e != 2 {
		t.Errorf("second removal: %d errors, want 2", e)
	}
}

// TestWatcherConfigMapSwap updates the file the way the kubelet updates a
// ConfigMap volume: routes.yaml -> ..data/routes.yaml, with ..data a symlink
// to a timestamped directory that is replaced by renaming a new symlink.
func TestWatcherConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "routes.yaml"), content)
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", routeFileWith("a"))
	path := filepath.Join(dir, "routes.yaml")
	if err := os.Symlink(filepath.Join("..data", "routes.yaml"), path); err != nil {
		t.Fatal(err)
	}

	w, err := NewWatcher(path, WatcherOptions{Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	startWatcher(t, w)
	version("..v2", routeFileWith("b"))
	eventually(t, "reload through the symlink swap", func() bool {
		return reflect.DeepEqual(ids(w.Current()), []string{"b"})
	})
}

func TestNewWatcherErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewWatcher(filepath.Join(dir, "missing.yaml"), WatcherOptions{}); err == nil {
		t.Error("NewWatcher(missing) succeeded")
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "routes: {}\n")
	if _, err := NewWatcher(bad, WatcherOptions{}); err == nil || !strings.Contains(err.Error(), bad+": routes: must be a list") {
		t.Errorf("NewWatcher(bad) error = %v", err)
	}
}

// benchTable builds a 50-route table: 10 host-specific exact, 5
// host-specific prefix, 20 host-less exact and 15 host-less prefix routes.
func benchTable(b *testing.B) *Table {
	var sb strings.Builder
	sb.WriteString("routes:\n")
	for i := range 10 {
		fmt.Fprintf(&sb, "- {id: he%d, host: h%d.example.com, methods: [GET, POST], path: /svc%d/items, upstream: 'http://u'}\n", i, i%3, i)
	}
	for i := range 5 {
		fmt.Fprintf(&sb, "- {id: hp%d, host: h%d.example.com, pathPrefix: /tenant%d, upstream: 'http://u'}\n", i, i, i)
	}
	for i := range 20 {
		fmt.Fprintf(&sb, "- {id: e%d, methods: [GET], path: /v1/resource%d, upstream: 'http://u'}\n", i, i)
	}
	for i := range 15 {
		fmt.Fprintf(&sb, "- {id: p%d, pathPrefix: /api/v%d/group%d, upstream: 'http://u'}\n", i, i%4, i)
	}
	tab := mustParse(b, sb.String())
	if tab.Len() != 50 {
		b.Fatalf("Len = %d", tab.Len())
	}
	return tab
}

func BenchmarkMatch(b *testing.B) {
	tab := benchTable(b)
	reqs := []struct{ method, host, path string }{
		{"GET", "h1.example.com:443", "/svc1/items"},           // host-specific exact
		{"GET", "H2.example.com", "/tenant2/orders/17"},        // host-specific prefix
		{"GET", "other.example.com", "/v1/resource13"},         // host-less exact
		{"POST", "other.example.com", "/api/v2/group14/a/b/c"}, // last prefix
		{"GET", "other.example.com", "/not/found"},             // miss: scans everything
	}
	for _, r := range reqs {
		if _, ok := tab.Match(r.method, r.host, r.path); !ok && r.path != "/not/found" {
			b.Fatalf("no match for %+v", r)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := reqs[i%len(reqs)]
		tab.Match(r.method, r.host, r.path)
		i++
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	tab := mustParse(t, matchTable)
	allocs := testing.AllocsPerRun(100, func() {
		tab.Match("GET", "Shop.Example.com:80", "/orders")
		tab.Match("POST", "", "/admin/x")
		tab.Match("GET", "", "/api/v2/x")
		tab.Match("GET", "", "/a/../b")
	})
	if allocs != 0 {
		t.Errorf("Match allocates %v times per run", allocs)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(matchTable))
	f.Add([]byte("routes: []\n"))
	f.Add([]byte(`{"routes":[{"id":"j","path":"/j","upstream":"http://j","timeout":"1s"}]}`))
	f.Add([]byte("routes:\n- {id: x, pathPrefix: /a/, stripPrefix: true, host: '[::1]', upstream: 'https://u:1/b'}\n"))
	f.Add([]byte("routes:\n- &a {id: x, path: /x, upstream: 'http://x'}\n- *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := Parse(data)
		if err != nil {
			if tab != nil {
				t.Fatal("Parse returned a table and an error")
			}
			return
		}
		// Every accepted table satisfies the documented invariants ...
		seen := map[string]bool{}
		for _, r := range tab.Routes() {
			if seen[r.ID] {
				t.Fatalf("duplicate id %q", r.ID)
			}
			seen[r.ID] = true
			if (r.Path == "") == (r.PathPrefix == "") || r.Upstream == nil || (r.StripPrefix && r.PathPrefix == "") {
				t.Fatalf("invalid route accepted: %+v", r)
			}
			if p := r.Path + r.PathPrefix; !urlpath.Clean(p) || (len(r.PathPrefix) > 1 && strings.HasSuffix(p, "/")) {
				t.Fatalf("bad path accepted: %q", p)
			}
		}
		// ... and survives being written out and read back.
		out, err := json.Marshal(map[string]any{"routes": tab.Routes()})
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if a, b := comparable(tab.Routes()), comparable(again.Routes()); !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed routes:\nbefore: %+v\nafter:  %+v", a, b)
		}
	})
}

// referenceMatch is a slow, obviously-correct Match: sort by precedence and
// scan.
func referenceMatch(rs []Route, method, host, path string) (id string, wrongMethod bool, allow []string) {
	if path == "" {
		path = "/"
	}
	if !urlpath.Clean(path) {
		return "", false, nil
	}
	hb := []byte(urlpath.Host(host))
	for i, c := range hb {
		if c >= 'A' && c <= 'Z' {
			hb[i] = c + 'a' - 'A'
		}
	}
	host = string(hb)
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	class := func(r Route) int {
		c := 0
		if r.Host == "" {
			c += 2
		}
		if r.PathPrefix != "" {
			c++
		}
		return c
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := rs[order[i]], rs[order[j]]
		if class(a) != class(b) {
			return class(a) < class(b)
		}
		return len(a.PathPrefix) > len(b.PathPrefix)
	})
	for _, i := range order {
		r := rs[i]
		if r.Host != "" && r.Host != host {
			continue
		}
		if r.Path != "" && r.Path != path {
			continue
		}
		if r.PathPrefix != "" && r.PathPrefix != "/" && path != r.PathPrefix && !strings.HasPrefix(path, r.PathPrefix+"/") {
			continue
		}
		if len(r.Methods) == 0 || slicesContains(r.Methods, method) {
			return r.ID, false, nil
		}
		wrongMethod = true
		for _, m := range r.Methods {
			if !slicesContains(allow, m) {
				allow = append(allow, m)
			}
		}
	}
	sort.Strings(allow)
	return "", wrongMethod, allow
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func FuzzMatch(f *testing.F) {
	tab := mustParse(f, matchTable)
	rs := tab.Routes()
	f.Add("GET", "shop.example.com:8443", "/orders")
	f.Add("POST", "", "/admin/users")
	f.Add("PATCH", "", "/items/x")
	f.Add("GET", "[::1]:80", "/v6")
	f.Add("GET", "", "/api/v2/")
	f.Add("GET", "SHOP.EXAMPLE.COM.", "/a/../b")
	f.Add("", ":", "")
	f.Fuzz(func(t *testing.T, method, host, path string) {
		r, ok := tab.Match(method, host, path)
		res := tab.Lookup(method, host, path)
		if ok != (r != nil) || res.Route != r {
			t.Fatalf("Match = %v, %v; Lookup = %+v", r, ok, res)
		}
		if ok {
			// The route really satisfies its own criteria.
			p := path
			if p == "" {
				p = "/"
			}
			if len(r.Methods) > 0 && !slicesContains(r.Methods, method) {
				t.Fatalf("%s matched method %q", r.ID, method)
			}
			if r.Host != "" && !strings.EqualFold(r.Host, strings.TrimSuffix(urlpath.Host(host), ".")) {
				t.Fatalf("%s matched host %q", r.ID, host)
			}
			if r.Path != "" && r.Path != p {
				t.Fatalf("%s matched path %q", r.ID, path)
			}
			if r.PathPrefix != "" && r.PathPrefix != "/" && p != r.PathPrefix && !strings.HasPrefix(p, r.PathPrefix+"/") {
				t.Fatalf("%s matched path %q", r.ID, path)
			}
			if !urlpath.Clean(p) {
				t.Fatalf("%s matched unclean path %q", r.ID, path)
			}
			if res.MethodNotAllowed || res.Allow != nil {
				t.Fatalf("match with 405 fields: %+v", res)
			}
		}
		// And it is the route precedence says.
		wantID, wrong, allow := referenceMatch(rs, method, host, path)
		gotID := ""
		if ok {
			gotID = r.ID
		}
		if gotID != wantID || res.MethodNotAllowed != wrong || !reflect.DeepEqual(res.Allow, allow) {
			t.Fatalf("Lookup(%q, %q, %q) = %q %+v, reference = %q, 405 %v %q", method, host, path, gotID, res, wantID, wrong, allow)
		}
	})
}
