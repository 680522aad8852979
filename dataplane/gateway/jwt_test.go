package gateway_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/jwttest"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// sendBearer sends POST /orders with a bearer token and returns the status.
func sendBearer(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestJWTPlanRulesExactAcrossProcesses: three gateway processes on one
// redis-server identify tenants by tokens of a local issuer (keys found by
// discovery) and limit them by plan: each gold tenant gets exactly the gold
// rule's capacity, each silver tenant the silver one's, a tenant without a
// plan the "*" rule's, each in a bucket of its own, whichever gateways the
// requests go to. No token reaches Redis.
func TestJWTPlanRulesExactAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	iss := jwttest.NewIssuer(t)
	e := newEnv(t, up.URL, rule("gold", "*", "create-order", 30, slow, "match: {claims: {plan: gold}}")+
		rule("silver", "*", "*", 10, slow, "match: {claims: {plan: silver}}")+
		rule("default", "*", "*", 3, slow))
	bin := buildTollgate(t)
	var gws []*process
	for i := range 3 {
		gws = append(gws, startProcess(t, bin, "gateway", "--routes", e.routes, "--rules", e.rules,
			"--identity", gateway.IdentityJWT, "--jwt-issuer", iss.URL, "--jwt-audience", "api", "--jwt-tenant-claim", "org_id",
			"--redis-addr", srv.Addr(), "--redis-timeout", "30s", "--redis-max-wait", "30s", "--replicas", "3",
			"--pod-name", "gw-"+string(rune('a'+i))))
	}
	type tenant struct {
		name, plan string
		want       int
	}
	tenants := []tenant{{"gold-1", "gold", 30}, {"gold-2", "gold", 30}, {"silver-1", "silver", 10}, {"none-1", "", 3}}
	tokens := map[string]string{}
	for _, tn := range tenants {
		c := iss.Claims(tn.name)
		if tn.plan != "" {
			c["plan"] = tn.plan
		}
		tokens[tn.name] = iss.Sign(t, "k1", c)
	}
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for _, tn := range tenants {
		for g := range 3 {
			wg.Go(func() {
				for range 20 {
					code := sendBearer(t, gws[g].url, tokens[tn.name])
					if code != 200 && code != 429 {
						t.Errorf("%s via gateway %d: %d", tn.name, g, code)
					}
					mu.Lock()
					admitted[tn.name] += map[bool]int{true: 1}[code == 200]
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, tn := range tenants {
		if admitted[tn.name] != tn.want {
			t.Errorf("%s (plan %q): %d of 60 admitted, want exactly %d", tn.name, tn.plan, admitted[tn.name], tn.want)
		}
	}
	keys := srv.Client(t).Keys(t.Context(), "*").Val()
	if len(keys) != len(tenants) {
		t.Errorf("Redis keys %v, want one bucket hash per tenant", keys)
	}
	for _, k := range keys {
		for _, tok := range tokens {
			if strings.Contains(k, tok[len(tok)-16:]) {
				t.Errorf("Redis key %q holds a token", k)
			}
		}
	}
}

// TestJWTMappedThenTokenLiveRotation: --identity=mapped,jwt with a JWKS
// file: an API key decides when present, else the token; a key added to
// the file is used without a restart.
func TestJWTMappedThenTokenLiveRotation(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	iss := jwttest.NewIssuer(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	writeAtomic(t, e.dir+"/keys.yaml", "keys:\n  - tenant: shop-a\n    key: sk-shop-a-0123456789\n")
	jwks := e.dir + "/jwks.json"
	writeAtomic(t, jwks, string(iss.JWKS()))
	o := e.options(srv.Addr())
	o.Identity, o.APIKeysFile = gateway.IdentityMapped+","+gateway.IdentityJWT, e.dir+"/keys.yaml"
	o.JWT.Issuer, o.JWT.Audiences, o.JWT.TenantClaim, o.JWT.JWKSFile = iss.URL, []string{"api"}, "org_id", jwks
	gw := start(t, o, testLogger(t))
	if res, body := send(t, "POST", gw.url+"/orders", "sk-shop-a-0123456789"); res.StatusCode != 200 {
		t.Fatalf("API key: %d %s", res.StatusCode, body)
	}
	if code := sendBearer(t, gw.url, iss.Sign(t, "k1", iss.Claims("shop-b"))); code != 200 {
		t.Fatalf("token: %d", code)
	}
	kid := iss.AddKey(t, jose.EdDSA)
	token := iss.Sign(t, kid, iss.Claims("shop-c"))
	if code := sendBearer(t, gw.url, token); code != 401 {
		t.Fatalf("token of a key not in the file yet: %d, want 401", code)
	}
	writeAtomic(t, jwks, string(iss.JWKS()))
	waitFor(t, 10e9, "the rotated key", func() bool { return sendBearer(t, gw.url, token) == 200 })
}

// TestJWTOptionErrors: bad --jwt-* combinations refuse to start, naming
// the flags.
func TestJWTOptionErrors(t *testing.T) {
	e := newEnv(t, "http://127.0.0.1:1", rule("r", "*", "*", 100, slow))
	for _, tc := range []struct {
		name   string
		mutate func(*gateway.Options)
		want   string
	}{
		{"jwt without issuer", func(o *gateway.Options) { o.Identity = "jwt" }, "--jwt-issuer, --jwt-audience and --jwt-tenant-claim"},
		{"jwt flags without jwt", func(o *gateway.Options) { o.JWT.Issuer = "https://issuer.example" }, "need jwt in --identity"},
		{"two sources", func(o *gateway.Options) {
			o.Identity = "jwt"
			o.JWT.JWKSFile, o.JWT.JWKSURL = "x", "https://issuer.example/jwks"
		}, "exclude each other"},
		{"http issuer", func(o *gateway.Options) { o.Identity = "jwt"; o.JWT.Issuer = "http://issuer.example" }, "https only"},
		{"HS256 without a secret", func(o *gateway.Options) { o.Identity = "jwt"; o.JWT.Algorithms = []string{"HS256"} }, "go together"},
		{"alg none", func(o *gateway.Options) { o.Identity = "jwt"; o.JWT.Algorithms = []string{"none"} }, `algorithm "none" is not accepted`},
		{"a Secret standalone", func(o *gateway.Options) { o.Identity = "jwt"; o.JWT.JWKSSecret = "jwks" }, "needs Kubernetes"},
		{"jwt twice", func(o *gateway.Options) { o.Identity = "jwt,jwt" }, "jwt twice"},
		{"mapped and header-is-tenant", func(o *gateway.Options) { o.Identity = "mapped,header-is-tenant" }, "exclude each other"},
	} {
		o := e.options("127.0.0.1:1")
		o.JWT.Issuer, o.JWT.Audiences, o.JWT.TenantClaim = "", []string{"api"}, "org_id"
		if tc.name != "jwt without issuer" && tc.name != "jwt flags without jwt" {
			o.JWT.Issuer = "https://issuer.example"
		}
		tc.mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
