package proxy_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/clientaddr"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

const stackKey = "sk-shop-a-0123456789"

// stackHandler is a handler over a real redis-server with the routes
// login (identity none), signup (optional) and orders (required), the key
// stackKey for shop-a, 10.0.0.0/8 as trusted proxies, IETF headers, and
// rs.
func stackHandler(t *testing.T, rs ...snapshot.Rule) (*proxy.Handler, *metrics.Gateway) {
	t.Helper()
	keys, err := identity.ParseMapped([]byte("keys:\n  - tenant: shop-a\n    key: " + stackKey + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	up := okUpstream(t)
	table, err := routes.Parse([]byte("routes:\n" +
		"  - {id: login, path: /login, upstream: " + up.URL + ", identity: none}\n" +
		"  - {id: signup, path: /signup, upstream: " + up.URL + ", identity: optional}\n" +
		"  - {id: orders, pathPrefix: /orders, upstream: " + up.URL + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := rules.NewStore(snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1000, RefillTokens: 1, RefillPeriodMs: 3600_000})
	store.Replace(snapshot.Build(rs, 1))
	c := redistest.Start(t).Client(t)
	ch := limiter.NewChain(limiter.ChainOptions{Client: c, Coalesce: true, EmptyBucketCache: true, Timeout: 30 * time.Second, MaxWait: 30 * time.Second})
	t.Cleanup(func() { _ = ch.Close() })
	trusted, err := clientaddr.Parse("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewGateway(prometheus.NewRegistry())
	h := proxy.New(proxy.Options{
		Router:      func() routing.Router { return table },
		Decider:     decision.New(decision.Options{Rules: store, Limiter: ch}),
		Identity:    keys,
		Metrics:     m,
		Logger:      logr.Discard(),
		ClientAddr:  trusted,
		IETFHeaders: true,
	})
	t.Cleanup(h.Close)
	return h, m
}

func hourly(tenant, route string, capacity int64, by ...snapshot.KeyPart) snapshot.Rule {
	return snapshot.Rule{Tenant: tenant, Route: route, Capacity: capacity, RefillTokens: 1, RefillPeriodMs: 3600_000, By: by,
		Source: "test/" + tenant + "-" + route}
}

var perAddress = snapshot.KeyPart{Kind: snapshot.PartAddress, V4: 32, V6: 64}

// send sends method path from peer with header pairs and returns the
// recorder.
func send(h *proxy.Handler, method, path, peer string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = peer
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestLoginPerAddress: an anonymous route limited per client address, 5
// each; behind a trusted proxy the address is X-Forwarded-For's, from an
// untrusted peer a spoofed header changes nothing.
func TestLoginPerAddress(t *testing.T) {
	h, _ := stackHandler(t, hourly("*", "login", 5, perAddress))
	count := func(peer string, headers ...string) (ok int) {
		for range 7 {
			if w := send(h, "POST", "/login", peer, headers...); w.Code == 200 {
				ok++
			} else if w.Code != 429 {
				t.Fatalf("from %s: %d %s", peer, w.Code, w.Body)
			}
		}
		return ok
	}
	if n := count("198.51.100.7:5000"); n != 5 {
		t.Fatalf("one address admitted %d, want 5", n)
	}
	if n := count("198.51.100.7:5001", "X-Forwarded-For", "192.0.2.1"); n != 0 {
		t.Fatalf("a spoofed X-Forwarded-For from an untrusted peer admitted %d, want 0 (the peer's bucket is empty)", n)
	}
	if n := count("10.0.0.1:5000", "X-Forwarded-For", "6.6.6.6, 192.0.2.1"); n != 5 {
		t.Fatalf("a client behind the trusted proxy admitted %d, want 5", n)
	}
	if n := count("10.0.0.2:5000", "X-Forwarded-For", "192.0.2.1"); n != 0 {
		t.Fatalf("the same client through another proxy admitted %d, want 0", n)
	}
	w := send(h, "POST", "/login", "[2001:db8:1:2::1]:5000")
	if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"login-by-address";q=5;w=18000` || w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Fatalf("headers %v", w.Header())
	}
	w = send(h, "POST", "/login", "[2001:db8:1:2::ffff]:5000")
	if w.Header().Get("X-RateLimit-Remaining") != "3" {
		t.Fatalf("another address of the same /64: remaining %s, want 3", w.Header().Get("X-RateLimit-Remaining"))
	}
}

// TestIdentityPerRoute: none never reads a credential, optional
// identifies a request that carries one (a bad one is 401) and leaves one
// without anonymous, required answers 401 without one.
func TestIdentityPerRoute(t *testing.T) {
	h, _ := stackHandler(t, hourly("shop-a", "*", 2), hourly("*", "signup", 4, perAddress))
	peer := "198.51.100.9:1"
	for _, c := range []struct {
		method, path string
		headers      []string
		want         int
	}{
		{"POST", "/login", []string{"X-Api-Key", "wrong"}, 200},
		{"POST", "/signup", []string{"X-Api-Key", "wrong"}, 401},
		{"POST", "/signup", nil, 200},
		{"POST", "/orders", nil, 401},
		{"POST", "/orders", []string{"X-Api-Key", stackKey}, 200},
	} {
		if w := send(h, c.method, c.path, peer, c.headers...); w.Code != c.want {
			t.Errorf("%s %s %v: %d, want %d (%s)", c.method, c.path, c.headers, w.Code, c.want, w.Body)
		}
	}
	// signup: shop-a's 2 (tenant x route) and the address's 4 stack; the
	// anonymous request above took one of the address's, the two
	// identified ones two more, the third was refused by the tenant's
	// limit before the address's was asked.
	codes := []int{}
	for range 3 {
		codes = append(codes, send(h, "POST", "/signup", peer, "X-Api-Key", stackKey).Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("identified signups %v, want 200 200 429", codes)
	}
	w := send(h, "POST", "/signup", peer)
	if w.Code != 200 {
		t.Fatalf("an anonymous signup after the tenant's refusal: %d, want the address's last token", w.Code)
	}
	if w := send(h, "POST", "/signup", peer); w.Code != 429 {
		t.Fatalf("a 4th from the address: %d", w.Code)
	}
}

// TestStackedHeaders: the limit that binds gives X-RateLimit-*; the IETF
// lists have one item per limit; a refusal names the binding limit.
func TestStackedHeaders(t *testing.T) {
	h, _ := stackHandler(t, hourly("*", "*", 10), hourly("*", "*", 3, snapshot.KeyPart{Kind: snapshot.PartTenant}))
	w := send(h, "GET", "/orders/1", "198.51.100.9:1", "X-Api-Key", stackKey)
	if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "3" || w.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"orders";q=10;w=36000, "all-by-tenant";q=3;w=10800` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"orders";r=9;`) || !strings.Contains(got, `"all-by-tenant";r=2;`) {
		t.Fatalf("RateLimit %q", got)
	}
	send(h, "GET", "/orders/2", "198.51.100.9:1", "X-Api-Key", stackKey)
	send(h, "GET", "/orders/3", "198.51.100.9:1", "X-Api-Key", stackKey)
	w = send(h, "GET", "/orders/4", "198.51.100.9:1", "X-Api-Key", stackKey)
	if w.Code != 429 || w.Header().Get("X-RateLimit-Limit") != "3" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("refused: %d %v", w.Code, w.Header())
	}
	// Both limits in the tenant's slot on one server: one call decided
	// them, and the refusal took nothing from the route's bucket.
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"orders";r=7;`) || !strings.Contains(got, `, "all-by-tenant";r=0;`) {
		t.Fatalf("the refused request's RateLimit %q: want one item per limit, the default kind's bucket holding 7 (nothing taken)", got)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"orders";q=10;w=36000, "all-by-tenant";q=3;w=10800` {
		t.Fatalf("the refused request's RateLimit-Policy %q", got)
	}
}

// TestKeyHeaderMalformed: a header that keys a bucket, sent twice, is 400
// naming it; without it the request shares one bucket.
func TestKeyHeaderMalformed(t *testing.T) {
	h, _ := stackHandler(t, hourly("*", "login", 2, snapshot.KeyPart{Kind: snapshot.PartHeader, Name: "X-Client-Id"}))
	w := send(h, "POST", "/login", "198.51.100.9:1", "X-Client-Id", "a", "X-Client-Id", "b")
	if w.Code != 400 || !strings.Contains(w.Body.String(), "X-Client-Id") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	codes := []int{}
	for range 3 {
		codes = append(codes, send(h, "POST", "/login", "198.51.100.9:1").Code)
	}
	if codes[2] != 429 {
		t.Fatalf("requests without the header: %v, want the third refused", codes)
	}
	if w := send(h, "POST", "/login", "198.51.100.9:1", "X-Client-Id", "c"); w.Code != 200 {
		t.Fatalf("with a value: %d", w.Code)
	}
}

// TestClaimKeyPart: a rule keyed by a verified token's claim (team.id, a
// nested claim) gives every team one bucket whichever tenant sends its
// requests; a number is a value as its JSON text; requests without the
// claim (a token without it, an API key) share one bucket.
func TestClaimKeyPart(t *testing.T) {
	perTeam := snapshot.Rule{Tenant: "*", Route: "*", Capacity: 2, RefillTokens: 1, RefillPeriodMs: 3600_000, Source: "t/per-team",
		By: []snapshot.KeyPart{{Kind: snapshot.PartClaim, Name: "team.id"}}}
	everyone := snapshot.Rule{Tenant: "*", Route: "*", Capacity: 100, RefillTokens: 1, RefillPeriodMs: 3600_000}
	s := newJWTSetup(t, nil, perTeam, everyone)
	token := func(tenant string, team any) string {
		c := s.iss.Claims(tenant)
		if team != nil {
			c["team"] = map[string]any{"id": team}
		}
		return "Bearer " + s.iss.Sign(t, "k1", c)
	}
	codes := func(auth ...string) []int {
		var out []int
		for i := 0; i+1 < len(auth); i += 2 {
			out = append(out, s.send("/orders", "", auth[i], auth[i+1]).Code)
		}
		return out
	}
	got := codes("Authorization", token("shop-b", "t1"), "Authorization", token("shop-c", "t1"), "Authorization", token("shop-d", "t1"))
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("team t1 from three tenants: %v, want one bucket of 2", got)
	}
	got = codes("Authorization", token("shop-b", 7), "Authorization", token("shop-b", "7"), "Authorization", token("shop-b", 7.0))
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("team 7 as a number and as a string: %v, want one bucket", got)
	}
	got = codes("Authorization", token("shop-b", nil), "X-Api-Key", "key-a", "Authorization", token("shop-e", []any{"x"}))
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("without the claim (no team, an API key, an array): %v, want one shared bucket", got)
	}
}
