package jwtauth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
	"github.com/tollgate-dev/tollgate/internal/testutil/jwttest"
)

// staticKeys is a KeySource of fixed keys.
type staticKeys struct{ k *jwtauth.Keys }

func (s staticKeys) Keys() *jwtauth.Keys                   { return s.k }
func (s staticKeys) Refresh(context.Context) *jwtauth.Keys { return s.k }

func keysOf(t *testing.T, iss *jwttest.Issuer) staticKeys {
	k, err := jwtauth.ParseJWKS(iss.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	return staticKeys{k}
}

// verifier verifies iss's tokens for audience "api" with the tenant in
// org_id, at the fixed time now.
func verifier(t *testing.T, iss *jwttest.Issuer, now time.Time, mutate func(*jwtauth.Options)) *jwtauth.Verifier {
	opts := jwtauth.Options{
		Issuer: iss.URL, Audiences: []string{"api"}, TenantClaim: "org_id", Keys: keysOf(t, iss),
		Leeway: 30 * time.Second, Clock: func() time.Time { return now }, CacheSize: 100,
	}
	if mutate != nil {
		mutate(&opts)
	}
	v, err := jwtauth.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func reason(err error) string {
	var ie *jwtauth.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return ""
}

// TestVerifyClaims: each row is a token whose claims (or header) differ
// from a good one in one way, and the reason it is refused ("" accepted).
func TestVerifyClaims(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	now := time.Unix(1_800_000_000, 0)
	v := verifier(t, iss, now, nil)
	good := func() map[string]any {
		return map[string]any{"iss": iss.URL, "aud": "api", "exp": now.Add(time.Hour).Unix(), "org_id": "shop-a"}
	}
	with := func(k string, val any) map[string]any {
		c := good()
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	cases := []struct {
		name   string
		claims map[string]any
		want   string
	}{
		{"good", good(), ""},
		{"audience in a list", with("aud", []string{"other", "api"}), ""},
		{"expired within the leeway", with("exp", now.Add(-20*time.Second).Unix()), ""},
		{"expired beyond the leeway", with("exp", now.Add(-40*time.Second).Unix()), jwtauth.ReasonExpired},
		{"no exp", with("exp", nil), jwtauth.ReasonExpired},
		{"exp not a number", with("exp", "tomorrow"), jwtauth.ReasonMalformed},
		{"nbf within the leeway", with("nbf", now.Add(20*time.Second).Unix()), ""},
		{"nbf in the future", with("nbf", now.Add(time.Minute).Unix()), jwtauth.ReasonNotYet},
		{"iat in the future", with("iat", now.Add(time.Minute).Unix()), jwtauth.ReasonNotYet},
		{"wrong issuer", with("iss", "https://evil.example"), jwtauth.ReasonIssuer},
		{"no issuer", with("iss", nil), jwtauth.ReasonIssuer},
		{"wrong audience", with("aud", "other"), jwtauth.ReasonAudience},
		{"no audience", with("aud", nil), jwtauth.ReasonAudience},
		{"audience a number", with("aud", 7), jwtauth.ReasonAudience},
		{"no tenant claim", with("org_id", nil), jwtauth.ReasonTenant},
		{"tenant not an id", with("org_id", "shop a{x}"), jwtauth.ReasonTenant},
		{"tenant a boolean", with("org_id", true), jwtauth.ReasonTenant},
		{"tenant a number", with("org_id", 4242), ""},
	}
	for _, c := range cases {
		_, err := v.Verify(t.Context(), iss.Sign(t, "k1", c.claims))
		if got := reason(err); got != c.want {
			t.Errorf("%s: reason %q (%v), want %q", c.name, got, err, c.want)
		}
	}
}

// TestTenantErrorNamesClaim: the error names the claim and clips its
// value; it never holds the token.
func TestTenantErrorNamesClaim(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	v := verifier(t, iss, time.Now(), nil)
	c := iss.Claims("x")
	c["org_id"] = "bad value " + strings.Repeat("z", 200)
	token := iss.Sign(t, "k1", c)
	_, err := v.Verify(t.Context(), token)
	msg := err.Error()
	if !strings.Contains(msg, `"org_id"`) || !strings.Contains(msg, "bad value") || strings.Contains(msg, strings.Repeat("z", 100)) {
		t.Errorf("message %q: want the claim named and the value clipped", msg)
	}
	for _, part := range strings.Split(token, ".") {
		if strings.Contains(msg, part) {
			t.Errorf("message %q holds part of the token", msg)
		}
	}
}

// TestVerifyAlgorithms: the allow-list, "none", and the RS256/HS256
// confusion: an RS256 public key used as an HMAC secret never verifies.
func TestVerifyAlgorithms(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	es := iss.AddKey(t, jose.ES256)
	ed := iss.AddKey(t, jose.EdDSA)
	now := time.Now()
	v := verifier(t, iss, now, nil)
	claims := iss.Claims("shop-a")
	for _, kid := range []string{"k1", es, ed} {
		if _, err := v.Verify(t.Context(), iss.Sign(t, kid, claims)); err != nil {
			t.Errorf("key %s: %v", kid, err)
		}
	}
	pubDER, err := x509.MarshalPKIXPublicKey(iss.PublicKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	confused := jwttest.SignWith(t, jose.HS256, pubDER, "k1", claims)
	if got := reason(mustFail(v.Verify(t.Context(), confused))); got != jwtauth.ReasonAlgorithm {
		t.Errorf("HS256 signed with the RSA public key, default algorithms: reason %q", got)
	}
	// With HS256 allowed and a real shared secret, the public key is still
	// no secret.
	secret, _ := jwtauth.ParseSecret([]byte(strings.Repeat("s", 32)))
	hv := verifier(t, iss, now, func(o *jwtauth.Options) {
		o.Algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.HS256}
		o.Secret = func() *jwtauth.Secret { return secret }
	})
	if got := reason(mustFail(hv.Verify(t.Context(), confused))); got != jwtauth.ReasonSignature {
		t.Errorf("HS256 signed with the RSA public key, HS256 allowed: reason %q", got)
	}
	if _, err := hv.Verify(t.Context(), jwttest.SignWith(t, jose.HS256, []byte(strings.Repeat("s", 32)), "", claims)); err != nil {
		t.Errorf("HS256 with the shared secret: %v", err)
	}
	// alg none, handcrafted: go-jose cannot make one.
	none := "eyJhbGciOiJub25lIn0." + strings.Split(iss.Sign(t, "k1", claims), ".")[1] + "."
	if got := reason(mustFail(v.Verify(t.Context(), none))); got != jwtauth.ReasonAlgorithm {
		t.Errorf("alg none: reason %q", got)
	}
	rsOnly := verifier(t, iss, now, func(o *jwtauth.Options) { o.Algorithms = []jose.SignatureAlgorithm{jose.RS256} })
	if got := reason(mustFail(rsOnly.Verify(t.Context(), iss.Sign(t, es, claims)))); got != jwtauth.ReasonAlgorithm {
		t.Errorf("ES256 outside the allow-list: reason %q", got)
	}
}

func mustFail(_ *jwtauth.Identity, err error) error { return err }

// TestVerifySignatures: a forged signature, a key of another issuer under
// a known kid, an unknown kid, no kid, garbage.
func TestVerifySignatures(t *testing.T) {
	iss, other := jwttest.NewIssuer(t), jwttest.NewIssuer(t)
	v := verifier(t, iss, time.Now(), nil)
	claims := iss.Claims("shop-a")
	good := iss.Sign(t, "k1", claims)
	parts := strings.Split(good, ".")
	cases := []struct {
		name, token, want string
	}{
		{"good", good, ""},
		{"another key under kid k1", other.Sign(t, "k1", claims), jwtauth.ReasonSignature},
		{"signature of another token", parts[0] + "." + strings.Split(iss.Sign(t, "k1", iss.Claims("shop-b")), ".")[1] + "." + parts[2], jwtauth.ReasonSignature},
		{"unknown kid", jwttest.SignWith(t, jose.RS256, mustRSA(t), "k9", claims), jwtauth.ReasonNoKey},
		{"no kid: every fitting key is tried", jwttest.SignWith(t, jose.RS256, signerOf(t, iss), "", claims), ""},
		{"two parts", parts[0] + "." + parts[1], jwtauth.ReasonMalformed},
		{"not base64", "a.b.c", jwtauth.ReasonMalformed},
	}
	for _, c := range cases {
		_, err := v.Verify(t.Context(), c.token)
		if got := reason(err); got != c.want {
			t.Errorf("%s: reason %q (%v), want %q", c.name, got, err, c.want)
		}
	}
}

func mustRSA(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signerOf is iss's k1 private key, to sign a token without a kid.
func signerOf(_ *testing.T, iss *jwttest.Issuer) any { return iss.PrivateKey("k1") }

// TestClaimPaths: the tenant and the claims rules match on, by path.
func TestClaimPaths(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	c := iss.Claims("unused")
	c["org"] = map[string]any{"id": "shop-n", "plan": "gold", "deep": map[string]any{"tier": 2}}
	c["https://example.com/plan"] = "silver"
	c["roles"] = []any{"reader", "admin", 7, true}
	c["beta"] = true
	token := iss.Sign(t, "k1", c)
	for path, want := range map[string]string{"org.id": "shop-n", "org_id": "unused", "org.deep.tier": "2"} {
		v := verifier(t, iss, time.Now(), func(o *jwtauth.Options) { o.TenantClaim = path })
		id, err := v.Verify(t.Context(), token)
		if err != nil || id.Tenant != want {
			t.Errorf("tenant claim %q: %+v, %v; want %q", path, id, err, want)
		}
	}
	id, err := verifier(t, iss, time.Now(), nil).Verify(t.Context(), token)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		path, value string
		want        bool
	}{
		{"org.plan", "gold", true}, {"org.plan", "Gold", false}, {"org.deep.tier", "2", true},
		{"https://example.com/plan", "silver", true}, {"roles", "admin", true}, {"roles", "7", true},
		{"roles", "true", true}, {"roles", "writer", false}, {"beta", "true", true}, {"beta", "false", false},
		{"org", "gold", false}, {"missing", "x", false}, {"org.missing", "x", false},
	} {
		if got := id.Claims.HasClaim(m.path, m.value); got != m.want {
			t.Errorf("HasClaim(%q, %q) = %v", m.path, m.value, got)
		}
	}
	// ClaimValue, for a claim key part (spec.by): a scalar's text; an
	// array, an object or a missing claim is no value.
	for path, want := range map[string]string{"org.plan": "gold", "org.deep.tier": "2", "https://example.com/plan": "silver", "beta": "true",
		"roles": "", "org": "", "missing": ""} {
		got, ok := id.Claims.ClaimValue(path)
		if got != want || ok != (want != "") {
			t.Errorf("ClaimValue(%q) = %q, %v; want %q", path, got, ok, want)
		}
	}
	if v, ok := (*jwtauth.Claims)(nil).ClaimValue("x"); ok || v != "" {
		t.Errorf("nil claims: %q %v", v, ok)
	}
	if s := fmt.Sprintf("%v %s %+v", id.Claims, id.Claims, id.Claims); strings.Contains(s, "gold") || strings.Contains(s, "shop") {
		t.Errorf("formatted claims show their content: %s", s)
	}
}

func TestBearerToken(t *testing.T) {
	cases := []struct {
		name    string
		headers []string
		token   string
		err     error
	}{
		{"none", nil, "", jwtauth.ErrMissing},
		{"basic", []string{"Basic dXNlcjpwYXNz"}, "", jwtauth.ErrMissing},
		{"bearer", []string{"Bearer abc.def-_~+/="}, "abc.def-_~+/=", nil},
		{"lower-case scheme", []string{"bearer abc"}, "abc", nil},
		{"empty token", []string{"Bearer "}, "", jwtauth.ErrInvalid},
		{"scheme alone", []string{"Bearer"}, "", jwtauth.ErrInvalid},
		{"two headers", []string{"Bearer a", "Bearer b"}, "", jwtauth.ErrInvalid},
		{"bearer and basic", []string{"Basic x", "Bearer b"}, "", jwtauth.ErrInvalid},
		{"space in token", []string{"Bearer a b"}, "", jwtauth.ErrInvalid},
		{"padding inside", []string{"Bearer a=b"}, "", jwtauth.ErrInvalid},
		{"too long", []string{"Bearer " + strings.Repeat("a", jwtauth.MaxTokenLength+1)}, "", jwtauth.ErrInvalid},
		{"control byte", []string{"Bearer a\x01"}, "", jwtauth.ErrInvalid},
	}
	for _, c := range cases {
		h := http.Header{}
		for _, v := range c.headers {
			h.Add("Authorization", v)
		}
		token, err := jwtauth.BearerToken(h)
		if token != c.token || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: %q, %v; want %q, %v", c.name, token, err, c.token, c.err)
		}
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	keys := keysOf(t, iss)
	base := func() jwtauth.Options {
		return jwtauth.Options{Issuer: iss.URL, Audiences: []string{"api"}, TenantClaim: "org_id", Keys: keys}
	}
	secret := func() *jwtauth.Secret { return nil }
	for name, mutate := range map[string]func(*jwtauth.Options){
		"no issuer":              func(o *jwtauth.Options) { o.Issuer = "" },
		"no audience":            func(o *jwtauth.Options) { o.Audiences = nil },
		"no tenant claim":        func(o *jwtauth.Options) { o.TenantClaim = "" },
		"alg none":               func(o *jwtauth.Options) { o.Algorithms = []jose.SignatureAlgorithm{"none"} },
		"HS256 without a secret": func(o *jwtauth.Options) { o.Algorithms = []jose.SignatureAlgorithm{jose.HS256} },
		"a secret without HS256": func(o *jwtauth.Options) { o.Secret = secret },
		"RS256 without keys":     func(o *jwtauth.Options) { o.Keys = nil },
		"negative leeway":        func(o *jwtauth.Options) { o.Leeway = -time.Second },
	} {
		o := base()
		mutate(&o)
		if _, err := jwtauth.New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
