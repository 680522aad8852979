package jwtauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// KeySource serves the issuer's keys; FileSource, SecretSource and
// URLSource implement it.
type KeySource interface {
	// Keys is the key set in force: nil before the first one loaded. Safe
	// for concurrent use and cheap (an atomic load): Verify calls it for
	// every request.
	Keys() *Keys
	// Refresh is called by Verify for a token whose kid the set in force
	// lacks (a rotation the source has not seen yet, or an attacker's
	// random kid). A source that fetches refetches at most once per its
	// interval, however many calls arrive, and returns the set then in
	// force; the others return Keys(). It may block for one fetch.
	Refresh(ctx context.Context) *Keys
}

// Options configure a Verifier. Issuer, Audiences, TenantClaim and Keys
// are required.
type Options struct {
	// Issuer is the iss every token must have.
	Issuer string
	// Audiences: a token's aud must hold at least one of them.
	Audiences []string
	// Algorithms are the signature algorithms accepted; default
	// DefaultAlgorithms. An HMAC algorithm (HS256, HS384, HS512) needs
	// Secret, and the others need Keys; "none" is refused.
	Algorithms []jose.SignatureAlgorithm
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway time.Duration
	// TenantClaim is the path of the claim that holds the tenant id (see
	// Lookup).
	TenantClaim string
	// Keys are the issuer's public keys.
	Keys KeySource
	// Secret, with an HMAC algorithm, returns the shared secret in force
	// (nil: none yet).
	Secret func() *Secret
	// CacheSize bounds the verified-token cache, in tokens; 0 disables it.
	CacheSize int
	// Clock defaults to time.Now.
	Clock func() time.Time
}

// Verifier verifies bearer tokens. Safe for concurrent use.
type Verifier struct {
	opts  Options
	hmac  bool // an HMAC algorithm is allowed
	cache *cache
}

// New checks opts and returns a Verifier.
func New(opts Options) (*Verifier, error) {
	if len(opts.Algorithms) == 0 {
		opts.Algorithms = DefaultAlgorithms
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	v := &Verifier{opts: opts}
	for _, a := range opts.Algorithms {
		switch a {
		case jose.HS256, jose.HS384, jose.HS512:
			v.hmac = true
		case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384, jose.ES512, jose.EdDSA:
		default:
			return nil, fmt.Errorf("algorithm %q is not accepted: want RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA, HS256, HS384 or HS512", a)
		}
	}
	switch {
	case opts.Issuer == "":
		return nil, errors.New("an issuer is required")
	case len(opts.Audiences) == 0:
		return nil, errors.New("at least one audience is required")
	case opts.TenantClaim == "":
		return nil, errors.New("a tenant claim is required")
	case opts.Leeway < 0:
		return nil, errors.New("the leeway must not be negative")
	case v.hmac && opts.Secret == nil:
		return nil, errors.New("an HMAC algorithm needs a shared secret")
	case !v.hmac && opts.Secret != nil:
		return nil, errors.New("a shared secret needs an HMAC algorithm (HS256, HS384 or HS512) in the algorithms")
	case opts.Keys == nil && (!v.hmac || len(opts.Algorithms) > countHMAC(opts.Algorithms)):
		return nil, errors.New("asymmetric algorithms need a key source (JWKS file, Secret or URL)")
	}
	if opts.CacheSize > 0 {
		v.cache = newCache(opts.CacheSize)
	}
	return v, nil
}

func countHMAC(algs []jose.SignatureAlgorithm) int {
	n := 0
	for _, a := range algs {
		if a == jose.HS256 || a == jose.HS384 || a == jose.HS512 {
			n++
		}
	}
	return n
}

// Verify returns the identity of token (as BearerToken returns it), or an
// InvalidError. A token verified before, still unexpired and verified
// against the keys still in force, comes from the cache: one SHA-256 and
// a map lookup.
func (v *Verifier) Verify(ctx context.Context, token string) (*Identity, error) {
	sum := sha256.Sum256([]byte(token))
	now := v.opts.Clock()
	keys, secret := v.keys(), v.secret()
	if id := v.cache.get(sum, now, keys, secret); id != nil {
		return id, nil
	}
	id, keys, err := v.verify(ctx, token, now, keys, secret)
	if err != nil {
		return nil, err
	}
	v.cache.put(sum, id, keys, secret)
	return id, nil
}

func (v *Verifier) keys() *Keys {
	if v.opts.Keys == nil {
		return nil
	}
	return v.opts.Keys.Keys()
}

func (v *Verifier) secret() *Secret {
	if v.opts.Secret == nil {
		return nil
	}
	return v.opts.Secret()
}

// verify checks token's signature and claims; it returns the key set it
// verified with (refreshed for an unknown kid).
func (v *Verifier) verify(ctx context.Context, token string, now time.Time, keys *Keys, secret *Secret) (*Identity, *Keys, error) {
	jws, err := jose.ParseSignedCompact(token, v.opts.Algorithms)
	if err != nil {
		if alg := headerAlg(token); alg != "" && !v.allowed(alg) {
			return nil, keys, invalid(ReasonAlgorithm, fmt.Sprintf("the token's algorithm %q is not accepted", alg))
		}
		return nil, keys, invalid(ReasonMalformed, "the token is not a signed JWT")
	}
	h := jws.Signatures[0].Header
	alg := jose.SignatureAlgorithm(h.Algorithm)
	var payload []byte
	if alg == jose.HS256 || alg == jose.HS384 || alg == jose.HS512 {
		payload, err = v.verifyHMAC(jws, secret)
	} else {
		payload, keys, err = v.verifyKeys(ctx, jws, h.KeyID, alg, keys)
	}
	if err != nil {
		return nil, keys, err
	}
	id, err := v.claims(payload, now)
	return id, keys, err
}

func (v *Verifier) allowed(alg string) bool {
	for _, a := range v.opts.Algorithms {
		if string(a) == alg {
			return true
		}
	}
	return false
}

// headerAlg is the alg of token's header, "" when it does not decode.
func headerAlg(token string) string {
	head, _, _ := strings.Cut(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	return h.Alg
}

// verifyHMAC verifies an HMAC signature with the shared secret, and only
// with it: no JWKS key (an RSA public key, say) is ever an HMAC secret.
func (v *Verifier) verifyHMAC(jws *jose.JSONWebSignature, secret *Secret) ([]byte, error) {
	if secret == nil {
		return nil, invalid(ReasonNoKey, "no shared secret is loaded")
	}
	payload, err := jws.Verify(secret.b)
	if err != nil {
		return nil, invalid(ReasonSignature, "the token's signature does not verify")
	}
	return payload, nil
}

// verifyKeys verifies an asymmetric signature with the keys that fit the
// token's kid and alg; a kid the set lacks asks the source for fresh keys
// once.
func (v *Verifier) verifyKeys(ctx context.Context, jws *jose.JSONWebSignature, kid string, alg jose.SignatureAlgorithm, keys *Keys) ([]byte, *Keys, error) {
	if kid != "" && !keys.hasKid(kid) && v.opts.Keys != nil {
		keys = v.opts.Keys.Refresh(ctx)
	}
	cands := keys.candidates(kid, alg)
	if len(cands) == 0 {
		if keys.Len() == 0 {
			return nil, keys, invalid(ReasonNoKey, "no signing keys of the issuer are loaded")
		}
		return nil, keys, invalid(ReasonNoKey, "no key of the issuer fits the token's key id and algorithm")
	}
	for _, k := range cands {
		if payload, err := jws.Verify(k.pub); err == nil {
			return payload, keys, nil
		}
	}
	return nil, keys, invalid(ReasonSignature, "the token's signature does not verify")
}

// registered are the claims Verify checks.
type registered struct {
	Iss *string         `json:"iss"`
	Aud json.RawMessage `json:"aud"`
	Exp *json.Number    `json:"exp"`
	Nbf *json.Number    `json:"nbf"`
	Iat *json.Number    `json:"iat"`
}

// claims decodes and checks a verified payload.
func (v *Verifier) claims(payload []byte, now time.Time) (*Identity, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
		return nil, invalid(ReasonMalformed, "the token's claims are not a JSON object")
	}
	var r registered
	dec = json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return nil, invalid(ReasonMalformed, "the token's registered claims (iss, aud, exp, nbf, iat) have the wrong types")
	}
	exp, err := v.checkTimes(&r, now)
	if err != nil {
		return nil, err
	}
	if r.Iss == nil || *r.Iss != v.opts.Issuer {
		return nil, invalid(ReasonIssuer, "the token's issuer (iss) is not the expected issuer")
	}
	if !v.audienceOK(r.Aud) {
		return nil, invalid(ReasonAudience, "the token's audience (aud) is not this API")
	}
	tenant, err := tenantOf(m, v.opts.TenantClaim)
	if err != nil {
		return nil, err
	}
	return &Identity{Tenant: tenant, Claims: &Claims{m: m}, Expires: exp}, nil
}

// checkTimes enforces exp (required), nbf and iat with the leeway, and
// returns exp.
func (v *Verifier) checkTimes(r *registered, now time.Time) (time.Time, error) {
	if r.Exp == nil {
		return time.Time{}, invalid(ReasonExpired, "the token has no expiry (exp)")
	}
	exp, ok := numericDate(*r.Exp)
	if !ok {
		return time.Time{}, invalid(ReasonMalformed, "the token's exp is not a date")
	}
	if now.Add(-v.opts.Leeway).After(exp) {
		return time.Time{}, invalid(ReasonExpired, "the token has expired")
	}
	for _, d := range []struct {
		n    *json.Number
		name string
	}{{r.Nbf, "nbf"}, {r.Iat, "iat"}} {
		if d.n == nil {
			continue
		}
		t, ok := numericDate(*d.n)
		if !ok {
			return time.Time{}, invalid(ReasonMalformed, "the token's "+d.name+" is not a date")
		}
		if now.Add(v.opts.Leeway).Before(t) {
			return time.Time{}, invalid(ReasonNotYet, "the token is not valid yet ("+d.name+")")
		}
	}
	return exp, nil
}

// numericDate reads a NumericDate (seconds since the epoch, fractions
// allowed) within the years 1970 to 9999.
func numericDate(n json.Number) (time.Time, bool) {
	f, err := n.Float64()
	if err != nil || f < 0 || f > 253402300799 {
		return time.Time{}, false
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)), true
}

// audienceOK reports whether aud (a string or an array of strings) holds
// one of the audiences.
func (v *Verifier) audienceOK(aud json.RawMessage) bool {
	var list []string
	var one string
	if json.Unmarshal(aud, &one) == nil {
		list = []string{one}
	} else if json.Unmarshal(aud, &list) != nil {
		return false
	}
	for _, a := range list {
		for _, want := range v.opts.Audiences {
			if a == want {
				return true
			}
		}
	}
	return false
}
