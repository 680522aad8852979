package jwtauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
	"github.com/tollgate-dev/tollgate/internal/testutil/jwttest"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// urlVerifier verifies iss's tokens with keys discovered from iss's URL.
func urlVerifier(t *testing.T, iss *jwttest.Issuer, clk *clock, errs *atomic.Int64) (*jwtauth.Verifier, *jwtauth.URLSource) {
	src := jwtauth.NewURLSource(jwtauth.URLOptions{
		Issuer: iss.URL, MinRefetch: 30 * time.Second, Clock: clk.Now,
		SourceOptions: jwtauth.SourceOptions{OnError: func(error) { errs.Add(1) }},
	})
	v, err := jwtauth.New(jwtauth.Options{
		Issuer: iss.URL, Audiences: []string{"api"}, TenantClaim: "org_id", Keys: src, CacheSize: 100, Clock: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v, src
}

// TestURLRotation: discovery, then a token of a key published later (an
// unknown kid) refetches the JWKS and verifies; a key withdrawn stops
// verifying, even for a token the cache holds.
func TestURLRotation(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	clk := &clock{t: time.Now()}
	var errs atomic.Int64
	v, src := urlVerifier(t, iss, clk, &errs)
	if src.Refresh(t.Context()).Len() != 1 || errs.Load() != 0 {
		t.Fatalf("discovery and first fetch: %d keys, %d errors", src.Keys().Len(), errs.Load())
	}
	old := iss.Sign(t, "k1", iss.Claims("shop-a"))
	if _, err := v.Verify(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	k2 := iss.AddKey(t, jose.ES256)
	iss.RemoveKey("k1")
	clk.Add(31 * time.Second)
	id, err := v.Verify(t.Context(), iss.Sign(t, k2, iss.Claims("shop-b")))
	if err != nil || id.Tenant != "shop-b" {
		t.Fatalf("token of the new key: %+v, %v", id, err)
	}
	if _, err := v.Verify(t.Context(), old); reason(err) != jwtauth.ReasonNoKey {
		t.Errorf("token of the withdrawn key, cached before: reason %q, want %q", reason(err), jwtauth.ReasonNoKey)
	}
	if n := iss.JWKSRequests(); n != 2 {
		t.Errorf("%d JWKS requests, want 2", n)
	}
}

// TestURLFetchFailure: a failing issuer leaves the last good keys in
// force and is reported each time; it is tried again.
func TestURLFetchFailure(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	clk := &clock{t: time.Now()}
	var errs atomic.Int64
	v, src := urlVerifier(t, iss, clk, &errs)
	src.Refresh(t.Context())
	token := iss.Sign(t, "k1", iss.Claims("shop-a"))
	iss.SetFailing(true)
	for range 3 {
		clk.Add(time.Minute)
		if src.Refresh(t.Context()).Len() != 1 {
			t.Fatal("keys lost on a failed fetch")
		}
	}
	if errs.Load() != 3 {
		t.Errorf("%d errors reported, want 3", errs.Load())
	}
	if _, err := v.Verify(t.Context(), token); err != nil {
		t.Errorf("token of the last good keys: %v", err)
	}
	// A JWKS that does not parse is a failure too.
	iss.SetFailing(false)
	iss.RemoveKey("k1")
	clk.Add(time.Minute)
	if src.Refresh(t.Context()).Len() != 1 || errs.Load() != 4 {
		t.Errorf("an empty JWKS: %d keys, %d errors; want 1 and 4", src.Keys().Len(), errs.Load())
	}
}

// TestUnknownKidFlood: thousands of tokens with random kids, from many
// goroutines, cost one JWKS fetch per MinRefetch, not one per token.
func TestUnknownKidFlood(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	clk := &clock{t: time.Now()}
	var errs atomic.Int64
	v, src := urlVerifier(t, iss, clk, &errs)
	src.Refresh(t.Context())
	attacker := mustRSA(t)
	claims := iss.Claims("shop-a")
	var tokens []string
	for i := range 200 {
		tokens = append(tokens, jwttest.SignWith(t, jose.RS256, attacker, fmt.Sprintf("random-%d", i), claims))
	}
	flood := func() {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 500 {
					if _, err := v.Verify(context.Background(), tokens[(g*500+i)%len(tokens)]); reason(err) != jwtauth.ReasonNoKey {
						t.Errorf("random kid: reason %q", reason(err))
						return
					}
				}
			})
		}
		wg.Wait()
	}
	before := iss.JWKSRequests()
	flood()
	if n := iss.JWKSRequests() - before; n != 0 {
		t.Errorf("4000 tokens with random kids right after a fetch: %d fetches, want 0", n)
	}
	clk.Add(30 * time.Second)
	flood()
	if n := iss.JWKSRequests() - before; n != 1 {
		t.Errorf("4000 tokens with random kids at once: %d fetches, want 1", n)
	}
	for range 3 {
		clk.Add(30 * time.Second)
		flood()
	}
	if n := iss.JWKSRequests() - before; n != 4 {
		t.Errorf("after 3 more intervals: %d fetches, want 4", n)
	}
	if _, err := v.Verify(t.Context(), iss.Sign(t, "k1", claims)); err != nil {
		t.Errorf("a good token during the flood: %v", err)
	}
}

func TestDiscoveryChecks(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	var got []string
	src := jwtauth.NewURLSource(jwtauth.URLOptions{
		Issuer: iss.URL + "/other", SourceOptions: jwtauth.SourceOptions{OnError: func(err error) { got = append(got, err.Error()) }},
	})
	src.Refresh(t.Context())
	if len(got) != 1 || src.Keys() != nil {
		t.Fatalf("discovery of a missing document: %v", got)
	}
	for _, u := range []string{"http://example.com/jwks", "ftp://127.0.0.1/x", "jwks.json"} {
		if jwtauth.CheckURL(u) == nil {
			t.Errorf("CheckURL(%q) accepted", u)
		}
	}
	for _, u := range []string{"https://example.com/jwks", "http://127.0.0.1:8080/jwks", "http://[::1]/jwks", "http://localhost/x"} {
		if err := jwtauth.CheckURL(u); err != nil {
			t.Errorf("CheckURL(%q): %v", u, err)
		}
	}
}

// TestFileSource: a rewritten JWKS file is picked up at the next poll; a
// broken one keeps the last good keys.
func TestFileSource(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	path := filepath.Join(t.TempDir(), "jwks.json")
	write := func(data []byte) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(iss.JWKS())
	var loads, errs atomic.Int64
	src, err := jwtauth.NewFileSource(path, time.Hour, jwtauth.SourceOptions{
		OnLoad: func(*jwtauth.Keys) { loads.Add(1) }, OnError: func(error) { errs.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := jwtauth.New(jwtauth.Options{Issuer: iss.URL, Audiences: []string{"api"}, TenantClaim: "org_id", Keys: src, CacheSize: 10})
	k2 := iss.AddKey(t, jose.EdDSA)
	token := iss.Sign(t, k2, iss.Claims("shop-a"))
	if _, err := v.Verify(t.Context(), token); reason(err) != jwtauth.ReasonNoKey {
		t.Fatalf("before the file changed: %v", err)
	}
	write(iss.JWKS())
	src.Poll()
	if _, err := v.Verify(t.Context(), token); err != nil || loads.Load() != 1 {
		t.Fatalf("after the file changed: %v, %d loads", err, loads.Load())
	}
	write([]byte(`{"keys": [`))
	src.Poll()
	if _, err := v.Verify(t.Context(), token); err != nil || errs.Load() != 1 {
		t.Errorf("after a broken file: %v, %d errors", err, errs.Load())
	}
}

// TestParseJWKS: what a key set may and may not hold.
func TestParseJWKS(t *testing.T) {
	iss := jwttest.NewIssuer(t)
	var doc struct{ Keys []map[string]any }
	if err := json.Unmarshal(iss.JWKS(), &doc); err != nil {
		t.Fatal(err)
	}
	rsaPub := doc.Keys[0]
	jwkOf := func(k any, use string) map[string]any {
		b, err := json.Marshal(jose.JSONWebKey{Key: k, KeyID: "x", Use: use})
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set := func(keys ...map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"keys": keys})
		return b
	}
	cases := []struct {
		name    string
		data    []byte
		keys    int
		skipped int
		err     string
	}{
		{"one RSA key", set(rsaPub), 1, 0, ""},
		{"an encryption key is skipped", set(rsaPub, jwkOf(&ec.PublicKey, "enc")), 1, 1, ""},
		{"an RSA key of 1024 bits is skipped", set(rsaPub, jwkOf(&small.PublicKey, "sig")), 1, 1, ""},
		{"an unknown key type is skipped", set(rsaPub, map[string]any{"kty": "XYZ", "kid": "q"}), 1, 1, ""},
		{"only skipped keys", set(jwkOf(&small.PublicKey, "sig")), 0, 0, "no usable signing key"},
		{"a private key", set(jwkOf(ec, "sig")), 0, 0, "private key material"},
		{"a symmetric key", set(jwkOf([]byte(strings.Repeat("k", 32)), "sig")), 0, 0, "symmetric"},
		{"not a JWKS", []byte(`[1]`), 0, 0, "not a JWKS"},
		{"no keys field", []byte(`{}`), 0, 0, "not a JWKS"},
		{"too many keys", set(func() []map[string]any {
			ks := make([]map[string]any, 101)
			for i := range ks {
				ks[i] = rsaPub
			}
			return ks
		}()...), 0, 0, "at most 100"},
	}
	for _, c := range cases {
		k, err := jwtauth.ParseJWKS(c.data)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && (k.Len() != c.keys || k.Skipped != c.skipped):
			t.Errorf("%s: %d keys, %d skipped; want %d, %d", c.name, k.Len(), k.Skipped, c.keys, c.skipped)
		}
		if err != nil && strings.Contains(err.Error(), "\"d\"") {
			t.Errorf("%s: error quotes key material: %v", c.name, err)
		}
	}
}
