package jwtauth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	jose "github.com/go-jose/go-jose/v4"
)

// Bounds of a key set.
const (
	// MaxJWKSBytes bounds a JWKS document (file, Secret value or fetch).
	MaxJWKSBytes = 1 << 20
	// MaxKeys bounds the keys of one set.
	MaxKeys = 100
	// minRSABits is the smallest RSA key accepted.
	minRSABits = 2048
)

// Keys is an immutable set of verification keys: the public signing keys
// of a JWKS. Safe for concurrent use.
type Keys struct {
	keys []key
	sum  [sha256.Size]byte
	// Skipped counts the JWKS's keys left out: for encryption ("use":
	// "enc"), or of a type or curve this gateway does not verify with.
	Skipped int
}

// key is one usable verification key.
type key struct {
	kid string
	alg string // "" when the JWKS gives none
	pub any    // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// Len is the number of usable keys; a nil *Keys has none.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// ParseJWKS parses a JSON Web Key Set ({"keys": [...]}). It keeps the
// public signing keys (RSA of 2048 bits or more, EC on P-256, P-384 or
// P-521, Ed25519) and skips encryption keys and key types it does not
// verify with. It refuses the whole set when a key holds private or
// symmetric material (an HMAC secret comes only from the shared secret
// option), when it has more than MaxKeys keys, and when no key is usable.
// Errors name the key by index, and never quote key material.
func ParseJWKS(data []byte) (*Keys, error) {
	if len(data) > MaxJWKSBytes {
		return nil, fmt.Errorf("JWKS larger than %d bytes", MaxJWKSBytes)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || doc.Keys == nil {
		return nil, errors.New(`not a JWKS: want a JSON object with a "keys" list`)
	}
	if len(doc.Keys) > MaxKeys {
		return nil, fmt.Errorf("JWKS has %d keys, at most %d", len(doc.Keys), MaxKeys)
	}
	out := &Keys{sum: sha256.Sum256(data)}
	for i, raw := range doc.Keys {
		k, ok, err := parseKey(raw)
		if err != nil {
			return nil, fmt.Errorf("keys[%d]: %w", i, err)
		}
		if !ok {
			out.Skipped++
			continue
		}
		out.keys = append(out.keys, k)
	}
	if len(out.keys) == 0 {
		return nil, fmt.Errorf("JWKS has no usable signing key (%d skipped: encryption keys or unsupported types)", out.Skipped)
	}
	return out, nil
}

// parseKey reads one JWK: a usable key, false for one to skip, or an error
// for one that must not be there.
func parseKey(raw json.RawMessage) (key, bool, error) {
	var head struct {
		Kty string `json:"kty"`
		Use string `json:"use"`
		D   any    `json:"d"`
		K   any    `json:"k"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return key{}, false, errors.New("not a JSON object")
	}
	switch {
	case head.Kty == "oct" || head.K != nil:
		return key{}, false, errors.New("a symmetric (oct) key: HMAC secrets come only from the shared secret option, never from a JWKS")
	case head.D != nil:
		return key{}, false, errors.New("holds private key material: publish only the public keys")
	case head.Use != "" && head.Use != "sig":
		return key{}, false, nil
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(raw); err != nil || !jwk.Valid() || !jwk.IsPublic() {
		return key{}, false, nil // a type or curve go-jose does not read
	}
	if !usable(jwk.Key) {
		return key{}, false, nil
	}
	return key{kid: jwk.KeyID, alg: jwk.Algorithm, pub: jwk.Key}, true, nil
}

// usable reports whether pub is a key type and size this package verifies
// with.
func usable(pub any) bool {
	switch p := pub.(type) {
	case *rsa.PublicKey:
		return p.N.BitLen() >= minRSABits
	case *ecdsa.PublicKey:
		return p.Curve == elliptic.P256() || p.Curve == elliptic.P384() || p.Curve == elliptic.P521()
	case ed25519.PublicKey:
		return len(p) == ed25519.PublicKeySize
	}
	return false
}

// fits reports whether k can verify a signature of alg: the key family
// (and curve) of the algorithm, and the JWKS's alg for the key if it gives
// one.
func (k *key) fits(alg jose.SignatureAlgorithm) bool {
	if k.alg != "" && k.alg != string(alg) {
		return false
	}
	switch p := k.pub.(type) {
	case *rsa.PublicKey:
		switch alg {
		case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512:
			return true
		}
	case *ecdsa.PublicKey:
		return alg == jose.ES256 && p.Curve == elliptic.P256() || alg == jose.ES384 && p.Curve == elliptic.P384() || alg == jose.ES512 && p.Curve == elliptic.P521()
	case ed25519.PublicKey:
		return alg == jose.EdDSA
	}
	return false
}

// candidates are the keys that may have signed a token with kid and alg:
// those with that kid (all when the token names none) that fit alg.
func (k *Keys) candidates(kid string, alg jose.SignatureAlgorithm) []*key {
	if k == nil {
		return nil
	}
	var out []*key
	for i := range k.keys {
		c := &k.keys[i]
		if (kid == "" || c.kid == kid) && c.fits(alg) {
			out = append(out, c)
		}
	}
	return out
}

// hasKid reports whether a key of the set has kid.
func (k *Keys) hasKid(kid string) bool {
	if k == nil {
		return false
	}
	for i := range k.keys {
		if k.keys[i].kid == kid {
			return true
		}
	}
	return false
}

// Secret is an HMAC shared secret (HS256, HS384, HS512).
type Secret struct {
	b []byte
}

// MinSecretBytes is the shortest HMAC secret accepted (RFC 7518 3.2: at
// least the hash's size; 32 bytes for HS256).
const MinSecretBytes = 32

// ParseSecret reads a shared secret from a file's content: one trailing
// line break is removed. It must be at least MinSecretBytes long.
func ParseSecret(data []byte) (*Secret, error) {
	b := data
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	if len(b) < MinSecretBytes {
		return nil, fmt.Errorf("the HMAC secret has %d bytes, at least %d are needed", len(b), MinSecretBytes)
	}
	return &Secret{b: append([]byte(nil), b...)}, nil
}
