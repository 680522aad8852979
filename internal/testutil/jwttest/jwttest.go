// Package jwttest is a local token issuer for tests: a net/http server on
// loopback that serves an OIDC discovery document and a JWKS of keys
// generated per test, signs tokens with them, rotates them, and can be
// made to fail. Only _test.go files import it.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Issuer is a token issuer serving /.well-known/openid-configuration and
// /jwks.json.
type Issuer struct {
	// URL is the issuer (the iss of its tokens): http://127.0.0.1:port.
	URL string

	mu      sync.Mutex
	keys    []signingKey // in order
	next    int
	failing atomic.Bool
	jwks    atomic.Int64 // JWKS requests served
}

type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

// NewIssuer starts an issuer with one RS256 key, "k1"; the server stops
// when the test ends.
func NewIssuer(t testing.TB) *Issuer {
	iss := &Issuer{}
	srv := httptest.NewServer(http.HandlerFunc(iss.serve))
	t.Cleanup(srv.Close)
	iss.URL = srv.URL
	iss.AddKey(t, jose.RS256)
	return iss
}

func (i *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	if i.failing.Load() {
		http.Error(w, "down for the test", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/.well-known/openid-configuration":
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": i.URL, "jwks_uri": i.URL + "/jwks.json"})
	case "/jwks.json":
		i.jwks.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(i.JWKS())
	default:
		http.NotFound(w, r)
	}
}

// AddKey generates and publishes a key for alg (RS256, ES256 or EdDSA)
// and returns its kid ("k1", "k2", ...).
func (i *Issuer) AddKey(t testing.TB, alg jose.SignatureAlgorithm) string {
	var priv crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("jwttest: no key for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.next++
	kid := "k" + strconv.Itoa(i.next)
	i.keys = append(i.keys, signingKey{kid: kid, alg: alg, priv: priv})
	return kid
}

// RemoveKey stops publishing kid (its tokens still sign, with Sign).
func (i *Issuer) RemoveKey(kid string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for j, k := range i.keys {
		if k.kid == kid {
			i.keys = append(i.keys[:j:j], i.keys[j+1:]...)
			return
		}
	}
}

// JWKS is the published key set.
func (i *Issuer) JWKS() []byte {
	i.mu.Lock()
	defer i.mu.Unlock()
	set := jose.JSONWebKeySet{}
	for _, k := range i.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		panic(err)
	}
	return b
}

// PrivateKey is kid's private key.
func (i *Issuer) PrivateKey(kid string) crypto.Signer {
	return i.key(kid).priv
}

// PublicKey is kid's public key.
func (i *Issuer) PublicKey(kid string) crypto.PublicKey {
	return i.key(kid).priv.Public()
}

func (i *Issuer) key(kid string) signingKey {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, k := range i.keys {
		if k.kid == kid {
			return k
		}
	}
	panic("jwttest: no key " + kid)
}

// SetFailing makes every request fail with 503 (true) or be served again.
func (i *Issuer) SetFailing(on bool) { i.failing.Store(on) }

// JWKSRequests is the number of JWKS requests served.
func (i *Issuer) JWKSRequests() int64 { return i.jwks.Load() }

// Claims are the claims of a token: iss (the issuer), aud "api", exp in
// an hour, and the tenant claim org_id.
func (i *Issuer) Claims(tenant string) map[string]any {
	return map[string]any{"iss": i.URL, "aud": "api", "exp": time.Now().Add(time.Hour).Unix(), "org_id": tenant}
}

// Sign signs claims with kid's key, naming kid in the header.
func (i *Issuer) Sign(t testing.TB, kid string, claims map[string]any) string {
	k := i.key(kid)
	return SignWith(t, k.alg, k.priv, kid, claims)
}

// SignWith signs claims with key (a crypto.Signer, or []byte for HMAC)
// for alg; kid "" leaves the header without one.
func SignWith(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	token, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}
