// Package identity finds out which tenant a request belongs to: it reads the
// API key from the X-Api-Key header (APIKey) and maps it to a tenant id with a
// Resolver (Direct, Mapped or MappedWatcher), or verifies a bearer token
// (Tokens, through jwtauth); a Chain picks the method by the credential the
// request carries.
//
// An API key is a credential. Nothing in this package puts a key, or any part
// of one, into an error; use Fingerprint to correlate clients in logs. Every
// tenant id a Resolver returns satisfies v1alpha1.ValidIdentifier, so it can be
// used in the bucket name rl:{tenant}:route (a field of the Redis hash
// rl:{tenant}) as is.
package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
)

// HeaderName is the request header that carries the API key.
const HeaderName = "X-Api-Key"

// MaxKeyLength is the longest accepted API key, in bytes.
const MaxKeyLength = 512

// The errors of this package. They never contain key material; test for them
// with errors.Is and map them to an HTTP status with Status.
var (
	// ErrMissingKey: the request has no API key, or an empty one (401).
	ErrMissingKey = errors.New("identity: missing API key")
	// ErrInvalidKey: the API key is malformed, for example too long, not
	// printable ASCII, sent more than once, or (Direct) not a valid tenant id
	// (400).
	ErrInvalidKey = errors.New("identity: invalid API key")
	// ErrUnknownKey: the API key is well-formed but belongs to no tenant (401).
	ErrUnknownKey = errors.New("identity: unknown API key")
)

// Status is the HTTP status code to answer a request that failed with err:
// 401 for ErrMissingKey, ErrUnknownKey and the bearer token errors
// (jwtauth.ErrMissing, jwtauth.ErrInvalid), 400 for ErrInvalidKey, 200 for
// nil and 500 for any other error.
func Status(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrMissingKey), errors.Is(err, ErrUnknownKey), errors.Is(err, jwtauth.ErrMissing), errors.Is(err, jwtauth.ErrInvalid):
		return http.StatusUnauthorized
	case errors.Is(err, ErrInvalidKey):
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}

// APIKey returns the request's API key: the single value of the X-Api-Key
// header. It fails with ErrMissingKey if there is none or it is empty, and with
// ErrInvalidKey if the header is repeated, or the value is longer than
// MaxKeyLength or holds bytes outside printable ASCII (0x21-0x7e; so no
// spaces, control characters or UTF-8).
func APIKey(h http.Header) (string, error) {
	vs := h.Values(HeaderName)
	switch {
	case len(vs) == 0:
		return "", ErrMissingKey
	case len(vs) > 1:
		return "", ErrInvalidKey
	}
	k := vs[0]
	if k == "" {
		return "", ErrMissingKey
	}
	if !validKey(k) {
		return "", ErrInvalidKey
	}
	return k, nil
}

// validKey reports whether k is 1 to MaxKeyLength printable ASCII bytes.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLength {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// Fingerprint is a short label of s for logs: "sha256:" and the first 12 hex
// digits of the SHA-256 of s. It lets logs correlate requests of one client
// without showing its key (or, in Direct mode, the tenant id that is the key).
// It cannot be reversed for random keys, but a guessable s (a short tenant
// name) can be found by trying candidates, so treat it as a pseudonym, not as
// encryption.
func Fingerprint(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// Resolver maps an API key, as returned by APIKey, to a tenant id.
//
// Tenant is called on every request from many goroutines: implementations
// must be safe for concurrent use, fast, and must not block. On success the
// tenant satisfies v1alpha1.ValidIdentifier. Failures are ErrInvalidKey or
// ErrUnknownKey (see Status), and never contain the key.
type Resolver interface {
	// Tenant returns the tenant id of key.
	Tenant(key string) (string, error)
}

// Direct is the default Resolver: the API key is the tenant id
// ("X-Api-Key: shop-a" is tenant shop-a). Anything that is not a valid tenant
// id is ErrInvalidKey. Direct does not authenticate anybody; use Mapped when
// keys must be secret.
type Direct struct{}

// Tenant returns key if it is a valid tenant id, else ErrInvalidKey. It does
// not allocate.
func (Direct) Tenant(key string) (string, error) {
	if !v1alpha1.ValidIdentifier(key) {
		return "", ErrInvalidKey
	}
	return key, nil
}

var (
	_ Resolver = Direct{}
	_ Resolver = (*Mapped)(nil)
	_ Resolver = (*MappedWatcher)(nil)
)
