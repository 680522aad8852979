// Package jwtauth verifies the bearer tokens (JWT access tokens of an OAuth
// 2.0 / OIDC issuer) that identify tenants: the signature against the
// issuer's keys (a JWKS from a file, a Kubernetes Secret or the issuer's
// URL, rotating without a restart), the issuer, the audience, exp and nbf
// with a leeway, an allow-list of algorithms, and the tenant claim. The
// signature code is go-jose's; this package chooses the key and checks the
// claims.
//
// A token is a credential: nothing in this package puts a token, or a part
// of one, into an error or a log line. Errors carry a fixed description
// and, for the tenant claim, the claim's name and its value clipped.
package jwtauth

import (
	"errors"
	"net/http"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// MaxTokenLength is the longest bearer token accepted, in bytes.
const MaxTokenLength = 8192

// DefaultAlgorithms are the algorithms accepted unless configured: RS256,
// ES256 and EdDSA. "none" is never accepted, and an HMAC algorithm only
// with a shared secret.
var DefaultAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA}

// ErrMissing: the request carries no bearer token (no Authorization
// header, or one of another scheme).
var ErrMissing = errors.New("jwtauth: no bearer token")

// ErrInvalid is what every InvalidError is (errors.Is).
var ErrInvalid = errors.New("jwtauth: invalid token")

// Reasons of an InvalidError, for metrics.
const (
	ReasonMalformed = "malformed"     // not a compact JWS, or claims not a JSON object
	ReasonAlgorithm = "algorithm"     // an algorithm outside the allow-list
	ReasonNoKey     = "unknown_key"   // no key of the issuer fits the token's kid and algorithm
	ReasonSignature = "signature"     // no fitting key verifies the signature
	ReasonExpired   = "expired"       // exp passed (beyond the leeway), or no exp
	ReasonNotYet    = "not_yet_valid" // nbf or iat in the future (beyond the leeway)
	ReasonIssuer    = "issuer"        // iss is not the issuer
	ReasonAudience  = "audience"      // aud holds none of the audiences
	ReasonTenant    = "tenant"        // the tenant claim is missing or not a valid tenant id
)

// Reasons lists every reason, for metrics that start at zero.
var Reasons = []string{ReasonMalformed, ReasonAlgorithm, ReasonNoKey, ReasonSignature, ReasonExpired, ReasonNotYet, ReasonIssuer, ReasonAudience, ReasonTenant}

// InvalidError is a refused token: Reason (one of the Reason constants)
// and a description for the client (RFC 6750 error_description). It never
// contains the token.
type InvalidError struct {
	Reason      string
	Description string
}

func (e *InvalidError) Error() string { return "jwtauth: invalid token: " + e.Description }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(reason, description string) error {
	return &InvalidError{Reason: reason, Description: description}
}

// BearerToken returns the request's bearer token: the value of an
// "Authorization: Bearer <token>" header (the scheme in any case). It fails
// with ErrMissing when there is no Authorization header or only ones of
// another scheme, and with an InvalidError (ReasonMalformed) when the
// header is repeated, or the token is empty, longer than MaxTokenLength or
// not of the token68 characters.
func BearerToken(h http.Header) (string, error) {
	vs := h.Values("Authorization")
	token, found := "", 0
	for _, v := range vs {
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			token, found = v[7:], found+1
		} else if strings.EqualFold(strings.TrimRight(v, " \t"), "bearer") {
			found++
		}
	}
	switch {
	case found == 0:
		return "", ErrMissing
	case len(vs) > 1:
		return "", invalid(ReasonMalformed, "more than one Authorization header")
	case !validToken(token):
		return "", invalid(ReasonMalformed, "the bearer token is empty, too long or not a token")
	}
	return token, nil
}

// validToken reports whether t is 1 to MaxTokenLength characters of
// token68 (RFC 9110: letters, digits, "-._~+/", then "=" padding).
func validToken(t string) bool {
	if len(t) == 0 || len(t) > MaxTokenLength {
		return false
	}
	pad := false
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '=':
			pad = true
		case pad:
			return false
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("-._~+/", c) >= 0:
		default:
			return false
		}
	}
	return t[0] != '='
}

// Identity is a verified token's caller: its tenant, the claims rules
// match on, and when the token expires. It is shared (the verified-token
// cache hands the same Identity to every request of the token): do not
// modify it.
type Identity struct {
	// Tenant is the tenant claim's value, a valid tenant id.
	Tenant string
	// Claims are the token's claims, for rules with spec.match.claims.
	Claims *Claims
	// Expires is the token's exp.
	Expires time.Time
}
