package decision

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

type claimMap map[string]string

func (c claimMap) HasClaim(p, v string) bool { return c[p] == v }
func (c claimMap) ClaimValue(p string) (string, bool) {
	v, ok := c[p]
	return v, ok
}

func keyedRule(source string, parts ...snapshot.KeyPart) *snapshot.Rule {
	return &snapshot.Rule{Tenant: "*", Route: "*", Capacity: 5, RefillTokens: 1, RefillPeriodMs: 1000, Source: source, By: parts}
}

var (
	pTenant  = snapshot.KeyPart{Kind: snapshot.PartTenant}
	pRoute   = snapshot.KeyPart{Kind: snapshot.PartRoute}
	pAddress = snapshot.KeyPart{Kind: snapshot.PartAddress, V4: 32, V6: 64}
	pHeader  = snapshot.KeyPart{Kind: snapshot.PartHeader, Name: "X-Client-Id"}
	pMethod  = snapshot.KeyPart{Kind: snapshot.PartMethod}
	pPath    = snapshot.KeyPart{Kind: snapshot.PartPath, Segments: 2}
	pClaim   = snapshot.KeyPart{Kind: snapshot.PartClaim, Name: "org.id"}
)

func request() *Request {
	return &Request{
		Tenant: "shop-a", Route: "login", Addr: netip.MustParseAddr("198.51.100.7"), Method: "POST", Path: "/v1/orders/42",
		Header: http.Header{"X-Client-Id": {"client-7"}}, Claims: claimMap{"org.id": "org-1"},
	}
}

// TestKeyForDefaultKind: a rule without key parts keys exactly today's
// bucket, and the region, shard and quota keys derived from it are
// today's too.
func TestKeyForDefaultKind(t *testing.T) {
	k, err := KeyFor(&snapshot.Rule{Tenant: "*", Route: "*"}, request())
	if err != nil || k != "rl:{shop-a}:login" || k != limiter.Key("shop-a", "login") {
		t.Fatalf("default kind key %q, %v", k, err)
	}
	if limiter.RegionOf(k, "eu") != "rl:{shop-a}:login@eu" || limiter.ShardKeyOf(k, "eu", 3) != "rl:shop-a:login@eu:3" ||
		limiter.QuotaKeyOf(k, "eu") != "rq:{shop-a}:login@eu" || limiter.ShardKeyOf(k, "", 0) != limiter.ShardKey("shop-a", "login", "", 0) {
		t.Fatal("derived keys differ from today's")
	}
	if h, f := limiter.Storage(k); h != "rl:{shop-a}" || f != "login" {
		t.Fatalf("storage %q %q", h, f)
	}
}

// TestKeyForEveryPart: each part, its encoding, the hash tag, and that
// no raw header, path or claim value reaches the key.
func TestKeyForEveryPart(t *testing.T) {
	req := request()
	cases := []struct {
		rule      *snapshot.Rule
		hash      string
		fieldHas  []string
		fieldNone []string
	}{
		{keyedRule("a/tenant", pTenant), "rl:{shop-a}", []string{"|" + keyedRule("a/tenant", pTenant).Identity()}, nil},
		{keyedRule("a/addr", pAddress), "rl:{a:198.51.100.7/32}", nil, nil},
		{keyedRule("a/addr-route", pAddress, pRoute), "rl:{a:198.51.100.7/32}", []string{"|r:login"}, []string{keyedRule("a/addr-route").Identity()}},
		{keyedRule("a/tenant-header", pTenant, pHeader), "rl:{shop-a}", []string{"|h:" + snapshot.Digest("client-7")}, []string{"client-7"}},
		{keyedRule("a/method", pMethod, pTenant), "rl:{m:POST}", []string{"|t:shop-a"}, nil},
		{keyedRule("a/path", pPath), "rl:{p:" + snapshot.Digest("/v1/orders") + "}", nil, []string{"orders"}},
		{keyedRule("a/claim", pClaim), "rl:{c:" + snapshot.Digest("org-1") + "}", nil, []string{"org-1"}},
		{&snapshot.Rule{Tenant: "*", Route: "export", Shared: true, Source: "a/export"}, "rl:{s:" + (&snapshot.Rule{Source: "a/export"}).Identity() + "}", []string{"s"}, nil},
	}
	for _, c := range cases {
		k, err := KeyFor(c.rule, req)
		if err != nil {
			t.Fatalf("%s: %v", c.rule.Source, err)
		}
		hash, field := limiter.Storage(k)
		if hash != c.hash || !strings.HasPrefix(field, "|") {
			t.Errorf("%s: key %q: hash %q field %q, want hash %q and a field starting with |", c.rule.Source, k, hash, field, c.hash)
		}
		for _, s := range c.fieldHas {
			if !strings.Contains(field, s) {
				t.Errorf("%s: field %q lacks %q", c.rule.Source, field, s)
			}
		}
		for _, s := range c.fieldNone {
			if strings.Contains(k, s) {
				t.Errorf("%s: key %q holds %q", c.rule.Source, k, s)
			}
		}
		if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
			t.Errorf("%s: key %q has braces of its own", c.rule.Source, k)
		}
	}
}

// TestKeyForSeparates: requests that differ in a part get different
// buckets; requests that differ only elsewhere share one; two rules of one
// kind without route never share; a missing header or claim is one value
// of its own.
func TestKeyForSeparates(t *testing.T) {
	key := func(r *snapshot.Rule, mut func(*Request)) string {
		req := request()
		mut(req)
		k, err := KeyFor(r, req)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	same := func(*Request) {}
	addr := keyedRule("a/addr", pAddress)
	for name, c := range map[string]struct {
		rule   *snapshot.Rule
		mut    func(*Request)
		differ bool
	}{
		"another address":               {addr, func(r *Request) { r.Addr = netip.MustParseAddr("198.51.100.8") }, true},
		"another tenant, same address":  {addr, func(r *Request) { r.Tenant = "shop-b" }, false},
		"another route, same address":   {addr, func(r *Request) { r.Route = "signup" }, false},
		"IPv6 in the same /64":          {addr, func(r *Request) { r.Addr = netip.MustParseAddr("2001:db8:1:2::1") }, true},
		"IPv4-mapped is IPv4":           {addr, func(r *Request) { r.Addr = netip.MustParseAddr("::ffff:198.51.100.7") }, false},
		"path beyond the segments":      {keyedRule("a/p", pPath), func(r *Request) { r.Path = "/v1//orders/43?x" }, false},
		"another path prefix":           {keyedRule("a/p", pPath), func(r *Request) { r.Path = "/v1/users/1" }, true},
		"no header":                     {keyedRule("a/h", pHeader), func(r *Request) { r.Header = http.Header{} }, true},
		"another claim":                 {keyedRule("a/c", pClaim), func(r *Request) { r.Claims = claimMap{"org.id": "org-2"} }, true},
		"another rule of the same kind": {keyedRule("a/addr-2", pAddress), same, true},
	} {
		base := key(c.rule, same)
		if name == "another rule of the same kind" {
			base = key(addr, same)
		}
		if got := key(c.rule, c.mut); (got != base) != c.differ {
			t.Errorf("%s: %q and %q, want differ=%v", name, base, got, c.differ)
		}
	}
	v6a := key(addr, func(r *Request) { r.Addr = netip.MustParseAddr("2001:db8:1:2::1") })
	v6b := key(addr, func(r *Request) { r.Addr = netip.MustParseAddr("2001:db8:1:2:ffff::9") })
	if v6a != v6b || !strings.Contains(v6a, "a:2001:db8:1:2::/64") {
		t.Errorf("one /64: %q and %q", v6a, v6b)
	}
	noHeader := key(keyedRule("a/h", pHeader), func(r *Request) { r.Header = nil })
	noHeader2 := key(keyedRule("a/h", pHeader), func(r *Request) { r.Header = http.Header{"Other": {"x"}} })
	noClaims := key(keyedRule("a/c", pClaim), func(r *Request) { r.Claims = nil })
	noClaim := key(keyedRule("a/c", pClaim), func(r *Request) { r.Claims = claimMap{} })
	if noHeader != noHeader2 || noClaims != noClaim {
		t.Errorf("requests without the header or claim do not share one bucket: %q %q, %q %q", noHeader, noHeader2, noClaims, noClaim)
	}
}

// TestKeyForMalformedHeader: a header sent twice, too long or with a
// control character is a HeaderError naming the header, without the value.
func TestKeyForMalformedHeader(t *testing.T) {
	r := keyedRule("a/h", pHeader)
	for name, vs := range map[string][]string{
		"twice":   {"a", "b"},
		"long":    {strings.Repeat("v", 257)},
		"control": {"secret\x01value"},
	} {
		req := request()
		req.Header = http.Header{"X-Client-Id": vs}
		_, err := KeyFor(r, req)
		var he *HeaderError
		if !errors.As(err, &he) || he.Name != "X-Client-Id" || !strings.Contains(err.Error(), "X-Client-Id") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v, want a HeaderError naming X-Client-Id", name, err)
		}
	}
	req := request()
	req.Header = http.Header{"X-Client-Id": {strings.Repeat("v", 256)}}
	if _, err := KeyFor(r, req); err != nil {
		t.Errorf("256 bytes refused: %v", err)
	}
}

func TestPathPrefix(t *testing.T) {
	for _, c := range []struct {
		path string
		n    int
		want string
	}{
		{"/v1/orders/42", 2, "/v1/orders"}, {"/v1/orders/42", 1, "/v1"}, {"/v1/orders/42", 16, "/v1/orders/42"},
		{"//v1///orders/", 2, "/v1/orders"}, {"/", 1, "/"}, {"", 3, "/"}, {"/login", 2, "/login"},
	} {
		if got := PathPrefix(c.path, c.n); got != c.want {
			t.Errorf("PathPrefix(%q, %d) = %q, want %q", c.path, c.n, got, c.want)
		}
	}
}

func TestMethodPart(t *testing.T) {
	if methodPart("GET") != "GET" || methodPart("get") == "get" || len(methodPart(strings.Repeat("A", 17))) != 22 {
		t.Error("methods: upper-case letters as they are, others digested")
	}
}
