package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/internal/testutil/jwttest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// CPU per forwarded request with JWT identity against the API-key path
// (a mapped key file), same handler, rules, upstream and run. Each reports
// cpu-ns/op: the process's CPU time (user and system, the loopback
// upstream's included) per request.
//
//	go test -run '^$' -bench 'Identity' -benchtime 20000x -count 5 ./dataplane/proxy/
//
// The target (docs/jwt.md): BenchmarkIdentityJWT ≤ 1.3× BenchmarkIdentityAPIKey.

// identityHandler is newHandler's route and 100,000-rule engine plus a
// plan rule (claims plan=gold), identifying by chain.
func identityHandler(b *testing.B, upstream string, chain *identity.Chain) *proxy.Handler {
	table, err := routes.Parse([]byte("routes:\n  - id: create-order\n    methods: [POST]\n    path: /orders\n    upstream: " + upstream + "\n"))
	if err != nil {
		b.Fatal(err)
	}
	var rs []snapshot.Rule
	for i := range 100_000 {
		rs = append(rs, snapshot.Rule{Tenant: fmt.Sprintf("tenant-%d", i), Route: "create-order", Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000})
	}
	rs = append(rs, snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000,
		Claims: []snapshot.ClaimMatch{{Path: "plan", Value: "gold"}}})
	store := rules.NewStore(snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1, RefillTokens: 1, RefillPeriodMs: 3600_000})
	store.Replace(snapshot.Build(rs, 1))
	h := proxy.New(proxy.Options{
		Router:  func() routing.Router { return table },
		Decider: decision.New(decision.Options{Rules: store, Limiter: limiter.NewLocal(limiter.LocalOptions{})}),
		Chain:   chain,
		Metrics: metrics.NewGateway(prometheus.NewRegistry()),
		Logger:  logr.Discard(),
	})
	b.Cleanup(h.Close)
	return h
}

// cpuLoop sends req through h b.N times and reports the process's CPU
// per request. The request's headers are set again each time: the
// handler removes an Authorization header that identified it.
func cpuLoop(b *testing.B, h http.Handler, req *http.Request) {
	headers := req.Header.Clone()
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		for k, v := range headers {
			req.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdentityAPIKey: the API-key path, X-Api-Key mapped through a
// key file (one SHA-256 and a map lookup).
func BenchmarkIdentityAPIKey(b *testing.B) {
	keys, err := identity.ParseMapped([]byte("keys:\n  - tenant: tenant-4242\n    key: sk-tenant-4242-0123456789abcdef\n"))
	if err != nil {
		b.Fatal(err)
	}
	h := identityHandler(b, okUpstream(b).URL, identity.NewChain(identity.APIKeys(keys)))
	req := httptest.NewRequest("POST", "/orders", nil)
	req.Header.Set("X-Api-Key", "sk-tenant-4242-0123456789abcdef")
	cpuLoop(b, h, req)
}

// jwtChain identifies by API key, then by iss's tokens (cacheSize 0: no
// verified-token cache).
func jwtChain(b *testing.B, iss *jwttest.Issuer, cacheSize int) *identity.Chain {
	k, err := jwtauth.ParseJWKS(iss.JWKS())
	if err != nil {
		b.Fatal(err)
	}
	v, err := jwtauth.New(jwtauth.Options{Issuer: iss.URL, Audiences: []string{"api"}, TenantClaim: "org_id", Keys: fixedKeys{k}, CacheSize: cacheSize})
	if err != nil {
		b.Fatal(err)
	}
	return identity.NewChain(identity.APIKeys(identity.Direct{}), identity.Tokens(v))
}

// benchToken is an RS256 access token of a usual size (about 900 bytes).
func benchToken(b *testing.B, iss *jwttest.Issuer, tenant string) string {
	c := iss.Claims(tenant)
	c["sub"], c["iat"], c["jti"] = "user-1234567890", time.Now().Unix(), "0f8e2a9c-4b1d-4e7a-9c3b-5d6e7f8a9b0c"
	c["scope"], c["plan"], c["email"] = "orders:read orders:write profile", "gold", "someone@example.com"
	return iss.Sign(b, "k1", c)
}

func bearerRequest(token string) *http.Request {
	req := httptest.NewRequest("POST", "/orders", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// BenchmarkIdentityJWT: the bearer token path with the verified-token
// cache (the steady state: a client sends one token many times), for a
// tenant with its own rule.
func BenchmarkIdentityJWT(b *testing.B) {
	iss := jwttest.NewIssuer(b)
	h := identityHandler(b, okUpstream(b).URL, jwtChain(b, iss, 10000))
	cpuLoop(b, h, bearerRequest(benchToken(b, iss, "tenant-4242")))
}

// BenchmarkIdentityJWTPlan: as BenchmarkIdentityJWT for a tenant limited
// by the plan rule (the claims are matched).
func BenchmarkIdentityJWTPlan(b *testing.B) {
	iss := jwttest.NewIssuer(b)
	h := identityHandler(b, okUpstream(b).URL, jwtChain(b, iss, 10000))
	cpuLoop(b, h, bearerRequest(benchToken(b, iss, "plan-tenant")))
}

// BenchmarkIdentityJWTUncached: every request verifies the RS256
// signature (no cache), for context.
func BenchmarkIdentityJWTUncached(b *testing.B) {
	iss := jwttest.NewIssuer(b)
	h := identityHandler(b, okUpstream(b).URL, jwtChain(b, iss, 0))
	cpuLoop(b, h, bearerRequest(benchToken(b, iss, "tenant-4242")))
}
