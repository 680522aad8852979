package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
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

// fixedKeys is a jwtauth.KeySource of the issuer's keys at the time.
type fixedKeys struct{ k *jwtauth.Keys }

func (s fixedKeys) Keys() *jwtauth.Keys                     { return s.k }
func (s fixedKeys) Refresh(_ context.Context) *jwtauth.Keys { return s.k }

// jwtSetup is a handler identifying requests by API key (key-a for
// shop-a) then bearer token (iss's, audience "api", tenant in org_id),
// with a rule of 2 requests for plan gold (or the rules rs), 1 for other
// tenants, routes
// /orders (Authorization stripped) and /fwd (forwarded), and an upstream
// that records the Authorization it got.
type jwtSetup struct {
	h       *proxy.Handler
	iss     *jwttest.Issuer
	mu      sync.Mutex
	gotAuth []string
	logs    *strings.Builder
	reg     *prometheus.Registry
}

func newJWTSetup(t *testing.T, failures *identity.FailureLimiter, rs ...snapshot.Rule) *jwtSetup {
	t.Helper()
	s := &jwtSetup{iss: jwttest.NewIssuer(t), logs: &strings.Builder{}, reg: prometheus.NewRegistry()}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.gotAuth = append(s.gotAuth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	table, err := routes.Parse([]byte("routes:\n  - id: orders\n    path: /orders\n    upstream: " + up.URL +
		"\n  - id: fwd\n    path: /fwd\n    upstream: " + up.URL + "\n    forwardAuthorization: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := jwtauth.ParseJWKS(s.iss.JWKS())
	v, err := jwtauth.New(jwtauth.Options{Issuer: s.iss.URL, Audiences: []string{"api"}, TenantClaim: "org_id", Keys: fixedKeys{keys}, CacheSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	mapped, _ := identity.ParseMapped([]byte("keys:\n  - tenant: shop-a\n    key: key-a\n"))
	store := rules.NewStore(snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1, RefillTokens: 1, RefillPeriodMs: 3600_000})
	if len(rs) == 0 {
		rs = []snapshot.Rule{{Tenant: "*", Route: "*", Capacity: 2, RefillTokens: 1, RefillPeriodMs: 3600_000,
			Claims: []snapshot.ClaimMatch{{Path: "plan", Value: "gold"}}}}
	}
	store.Replace(snapshot.Build(rs, 1))
	var logMu sync.Mutex
	log := funcr.New(func(prefix, args string) { logMu.Lock(); s.logs.WriteString(prefix + args + "\n"); logMu.Unlock() }, funcr.Options{Verbosity: 10})
	s.h = proxy.New(proxy.Options{
		Router:   func() routing.Router { return table },
		Decider:  decision.New(decision.Options{Rules: store, Limiter: limiter.NewLocal(limiter.LocalOptions{})}),
		Chain:    identity.NewChain(identity.APIKeys(mapped), identity.Tokens(v)),
		Metrics:  metrics.NewGateway(s.reg),
		JWT:      metrics.NewJWT(s.reg, jwtauth.Reasons),
		Logger:   log,
		Failures: failures,
	})
	t.Cleanup(s.h.Close)
	return s
}

func (s *jwtSetup) send(path, from string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	if from != "" {
		req.RemoteAddr = from
	}
	for i := 0; i < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, req)
	return w
}

// TestJWTAnswers: the RFC 6750 answers, all 401 and never 5xx, with a body
// and headers that hold nothing of the token.
func TestJWTAnswers(t *testing.T) {
	s := newJWTSetup(t, nil)
	claims := func(k string, v any) map[string]any {
		c := s.iss.Claims("shop-b")
		c[k] = v
		return c
	}
	expired := s.iss.Sign(t, "k1", claims("exp", time.Now().Add(-time.Hour).Unix()))
	cases := []struct {
		name      string
		headers   []string
		challenge []string
	}{
		{"no credential", nil, []string{`ApiKey header="X-Api-Key"`, "Bearer"}},
		{"another scheme", []string{"Authorization", "Basic dTpw"}, []string{`ApiKey header="X-Api-Key"`, "Bearer"}},
		{"expired", []string{"Authorization", "Bearer " + expired}, []string{`Bearer error="invalid_token", error_description="the token has expired"`}},
		{"wrong audience", []string{"Authorization", "Bearer " + s.iss.Sign(t, "k1", claims("aud", "other"))},
			[]string{`Bearer error="invalid_token", error_description="the token's audience (aud) is not this API"`}},
		{"wrong issuer", []string{"Authorization", "Bearer " + s.iss.Sign(t, "k1", claims("iss", "x"))},
			[]string{`Bearer error="invalid_token", error_description="the token's issuer (iss) is not the expected issuer"`}},
		{"bad tenant", []string{"Authorization", "Bearer " + s.iss.Sign(t, "k1", claims("org_id", `a"b`))},
			[]string{`Bearer error="invalid_token", error_description="the tenant claim 'org_id' is not a valid tenant id (1 to 64 characters [A-Za-z0-9._-], starting with a letter or digit): 'a''b'"`}},
		{"malformed", []string{"Authorization", "Bearer not-a-jwt"}, []string{`Bearer error="invalid_token", error_description="the token is not a signed JWT"`}},
		{"unknown API key (the key decides)", []string{"X-Api-Key", "nope", "Authorization", "Bearer " + expired}, []string{`ApiKey header="X-Api-Key"`}},
	}
	for _, c := range cases {
		w := s.send("/orders", "", c.headers...)
		if w.Code != 401 || strings.Join(w.Header().Values("WWW-Authenticate"), "|") != strings.Join(c.challenge, "|") {
			t.Errorf("%s: %d %q, want 401 %q", c.name, w.Code, w.Header().Values("WWW-Authenticate"), c.challenge)
		}
		for i := 1; i < len(c.headers); i += 2 {
			if tok := strings.TrimPrefix(c.headers[i], "Bearer "); len(tok) > 20 && strings.Contains(w.Body.String(), tok[len(tok)-20:]) {
				t.Errorf("%s: the body holds the token: %s", c.name, w.Body)
			}
		}
	}
	if strings.Contains(s.logs.String(), expired[len(expired)-20:]) {
		t.Errorf("a token reached the log: %s", s.logs)
	}
	if got := counterValue(t, s.reg, "tollgate_gateway_jwt_refused_total", "expired"); got != 1 {
		t.Errorf("jwt_refused_total{reason=expired} = %v, want 1", got)
	}
}

// TestJWTForwarding: the Authorization header that identified a request
// is removed unless the route forwards it; one that did not (an API key
// identified the request) goes through.
func TestJWTForwarding(t *testing.T) {
	s := newJWTSetup(t, nil)
	token := "Bearer " + s.iss.Sign(t, "k1", s.iss.Claims("shop-b"))
	for _, c := range []struct {
		path    string
		headers []string
		want    string
	}{
		{"/orders", []string{"Authorization", token}, ""},
		{"/fwd", []string{"Authorization", token}, token},
		{"/orders", []string{"X-Api-Key", "key-a", "Authorization", "Basic dTpw"}, "Basic dTpw"},
	} {
		s.mu.Lock()
		s.gotAuth = nil
		s.mu.Unlock()
		if w := s.send(c.path, "", c.headers...); w.Code != 200 {
			t.Fatalf("%s: %d %s", c.path, w.Code, w.Body)
		}
		s.mu.Lock()
		if len(s.gotAuth) != 1 || s.gotAuth[0] != c.want {
			t.Errorf("%s %v: upstream got Authorization %q, want %q", c.path, c.headers[0], s.gotAuth, c.want)
		}
		s.mu.Unlock()
	}
}

// TestJWTPlanRule: the gold plan's rule gives each tenant a bucket of 2;
// a tenant without the plan gets the "*" default of 1; an API key carries
// no claims.
func TestJWTPlanRule(t *testing.T) {
	s := newJWTSetup(t, nil)
	gold := func(tenant string) string {
		c := s.iss.Claims(tenant)
		c["plan"] = "gold"
		return "Bearer " + s.iss.Sign(t, "k1", c)
	}
	for _, c := range []struct {
		auth []string
		want []int
	}{
		{[]string{"Authorization", gold("shop-g1")}, []int{200, 200, 429}},
		{[]string{"Authorization", gold("shop-g2")}, []int{200, 200, 429}},
		{[]string{"Authorization", "Bearer " + s.iss.Sign(t, "k1", s.iss.Claims("shop-s"))}, []int{200, 429}},
		{[]string{"X-Api-Key", "key-a"}, []int{200, 429}},
	} {
		for i, want := range c.want {
			if w := s.send("/orders", "", c.auth...); w.Code != want {
				t.Errorf("%.40s request %d: %d, want %d", c.auth[1], i+1, w.Code, want)
			}
		}
	}
}

// TestJWTFailedIdentityThrottle: a flood of bad tokens from one address
// spends its failures; then even a good token from it gets 429, while
// another address is served.
func TestJWTFailedIdentityThrottle(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newJWTSetup(t, identity.NewFailureLimiter(identity.FailureOptions{Burst: 5, PerSecond: 1, MaxAddresses: 100, Clock: func() time.Time { return now }}))
	other := jwttest.NewIssuer(t)
	forged := "Bearer " + other.Sign(t, "k1", s.iss.Claims("shop-b"))
	codes := map[int]int{}
	for range 200 {
		codes[s.send("/orders", "192.0.2.1:4000", "Authorization", forged).Code]++
	}
	if codes[401] != 5 || codes[429] != 195 {
		t.Errorf("200 forged tokens: %v, want 5 401s and 195 429s", codes)
	}
	good := "Bearer " + s.iss.Sign(t, "k1", s.iss.Claims("shop-b"))
	if w := s.send("/orders", "192.0.2.1:4000", "Authorization", good); w.Code != 429 {
		t.Errorf("a good token from the flooding address: %d, want 429", w.Code)
	}
	if w := s.send("/orders", "198.51.100.7:4000", "Authorization", good); w.Code != 200 {
		t.Errorf("a good token from another address: %d, want 200", w.Code)
	}
}

// counterValue is the value of the counter name{reason=label} in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
