package identity

import (
	"context"
	"errors"
	"net/http"

	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Caller is who a request is: its tenant and, for a verified token, the
// claims rules match on (spec.match.claims). Claims are never logged.
type Caller struct {
	// Tenant satisfies v1alpha1.ValidIdentifier.
	Tenant string
	// Claims are the token's claims; nil for an API key.
	Claims snapshot.Claims
	// Bearer: the identity came from the Authorization header, which the
	// proxy then does not forward unless the route says so.
	Bearer bool
}

// TokenVerifier verifies bearer tokens; *jwtauth.Verifier implements it.
type TokenVerifier interface {
	// Verify returns the identity of token (as jwtauth.BearerToken
	// returns it) or a *jwtauth.InvalidError, which never holds the
	// token. Called on every request from many goroutines: safe for
	// concurrent use, fast for a token seen before; it may block for one
	// key fetch when the token names a key not yet known.
	Verify(ctx context.Context, token string) (*jwtauth.Identity, error)
}

// Method is one way a request carries its tenant: APIKeys or Tokens.
type Method interface {
	// Carries reports whether the request carries this method's
	// credential (its header is there, valid or not).
	Carries(h http.Header) bool
	// Identify returns the caller of a request that Carries the
	// credential. Errors are ErrMissingKey, ErrInvalidKey, ErrUnknownKey,
	// jwtauth.ErrMissing or a *jwtauth.InvalidError.
	Identify(ctx context.Context, h http.Header) (Caller, error)
	// Challenge is this method's WWW-Authenticate value for a 401.
	Challenge() string
}

// APIKeys identifies requests by their X-Api-Key header, resolved by r.
func APIKeys(r Resolver) Method { return apiKeys{r} }

type apiKeys struct{ r Resolver }

func (m apiKeys) Carries(h http.Header) bool { return len(h.Values(HeaderName)) > 0 }

func (m apiKeys) Identify(_ context.Context, h http.Header) (Caller, error) {
	key, err := APIKey(h)
	if err != nil {
		return Caller{}, err
	}
	tenant, err := m.r.Tenant(key)
	return Caller{Tenant: tenant}, err
}

func (apiKeys) Challenge() string { return `ApiKey header="` + HeaderName + `"` }

// Tokens identifies requests by an "Authorization: Bearer" token,
// verified by v.
func Tokens(v TokenVerifier) Method { return tokens{v} }

type tokens struct{ v TokenVerifier }

func (tokens) Carries(h http.Header) bool {
	_, err := jwtauth.BearerToken(h)
	return !errors.Is(err, jwtauth.ErrMissing)
}

func (m tokens) Identify(ctx context.Context, h http.Header) (Caller, error) {
	token, err := jwtauth.BearerToken(h)
	if err != nil {
		return Caller{}, err
	}
	id, err := m.v.Verify(ctx, token)
	if err != nil {
		return Caller{}, err
	}
	return Caller{Tenant: id.Tenant, Claims: id.Claims, Bearer: true}, nil
}

func (tokens) Challenge() string { return "Bearer" }

// Chain identifies a request by the first of its methods whose credential
// the request carries (--identity=mapped,jwt: an X-Api-Key header decides
// when there is one, else the bearer token). A request that carries none
// fails with the first method's missing-credential error; Challenges then
// lists every method.
type Chain struct {
	methods []Method
}

// NewChain returns a Chain of methods, in order; at least one.
func NewChain(methods ...Method) *Chain { return &Chain{methods: methods} }

// Carries reports whether the request carries a credential of any of the
// chain's methods.
func (c *Chain) Carries(h http.Header) bool {
	for _, m := range c.methods {
		if m.Carries(h) {
			return true
		}
	}
	return false
}

// Identify returns the request's caller.
func (c *Chain) Identify(ctx context.Context, h http.Header) (Caller, error) {
	for _, m := range c.methods {
		if m.Carries(h) {
			return m.Identify(ctx, h)
		}
	}
	return Caller{}, errMissingAll
}

// errMissingAll: the request carries no method's credential.
var errMissingAll = &missingError{}

type missingError struct{}

func (*missingError) Error() string { return "identity: no credential" }

// Is makes the error both ErrMissingKey and jwtauth.ErrMissing.
func (*missingError) Is(target error) bool {
	return target == ErrMissingKey || target == jwtauth.ErrMissing
}

// description makes s fit RFC 6750's error_description: printable ASCII
// without '"' and '\\' (which become '\”) or else '?'.
func description(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '"' || c == '\\':
			b[i] = '\''
		case c < 0x20 || c > 0x7e:
			b[i] = '?'
		}
	}
	return string(b)
}

// Challenges are the WWW-Authenticate values of a 401 for err (nil for
// another status): every method's for a request without credentials,
// else the failed method's, for a bad token with RFC 6750's
// error="invalid_token" and the reason.
func (c *Chain) Challenges(err error) []string {
	var ie *jwtauth.InvalidError
	switch {
	case errors.Is(err, errMissingAll):
		out := make([]string, len(c.methods))
		for i, m := range c.methods {
			out[i] = m.Challenge()
		}
		return out
	case errors.As(err, &ie):
		return []string{`Bearer error="invalid_token", error_description="` + description(ie.Description) + `"`}
	case errors.Is(err, ErrMissingKey), errors.Is(err, ErrUnknownKey):
		return []string{apiKeys{}.Challenge()}
	}
	return nil
}
