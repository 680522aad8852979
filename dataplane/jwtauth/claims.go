package jwtauth

import (
	"encoding/json"
	"fmt"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// Claims are a verified token's claims, kept for the rules that match on
// them (snapshot.Claims). Its String and MarshalLog hide the content, so a
// Claims that reaches a log line by mistake shows nothing of the token.
// Safe for concurrent use (read-only).
type Claims struct {
	m map[string]any // decoded with json.Number for numbers
}

// HasClaim reports whether the claim at path matches value: a string equal
// to it, a number or boolean whose JSON text equals it ("3", "true"), or an
// array holding such an element. path is resolved by Lookup.
func (c *Claims) HasClaim(path, value string) bool {
	if c == nil {
		return false
	}
	v, ok := Lookup(c.m, path)
	if !ok {
		return false
	}
	if arr, isArr := v.([]any); isArr {
		for _, e := range arr {
			if s, ok := scalar(e); ok && s == value {
				return true
			}
		}
		return false
	}
	s, ok := scalar(v)
	return ok && s == value
}

// ClaimValue is the text of the claim at path (resolved by Lookup) when it
// is a string, a number or a boolean; false when it is missing, an array
// or an object.
func (c *Claims) ClaimValue(path string) (string, bool) {
	if c == nil {
		return "", false
	}
	v, ok := Lookup(c.m, path)
	if !ok {
		return "", false
	}
	return scalar(v)
}

// String hides the claims.
func (c *Claims) String() string { return "jwtauth.Claims{redacted}" }

// MarshalLog hides the claims from logr.
func (c *Claims) MarshalLog() any { return "redacted" }

// scalar is the text of a string, number or boolean claim value.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return string(x), true
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

// Lookup finds the claim at path (see v1alpha1.ValidClaimPath) in claims:
// the claim named path itself when there is one, else, at each dot from
// left to right, the rest of the path inside the object claim named by
// what comes before it. So "org.plan" is plan inside org, and
// "https://example.com/plan" is the claim of that name.
func Lookup(claims map[string]any, path string) (any, bool) {
	if v, ok := claims[path]; ok {
		return v, true
	}
	for i := 0; i < len(path); i++ {
		if path[i] != '.' {
			continue
		}
		if sub, ok := claims[path[:i]].(map[string]any); ok {
			if v, ok := Lookup(sub, path[i+1:]); ok {
				return v, true
			}
		}
	}
	return nil, false
}

// tenantOf is the tenant in claims at path: a string or an integer's text
// that is a valid tenant id.
func tenantOf(claims map[string]any, path string) (string, error) {
	v, ok := Lookup(claims, path)
	if !ok {
		return "", invalid(ReasonTenant, fmt.Sprintf("the token has no tenant claim %q", clip.String(path)))
	}
	s, ok := scalar(v)
	if _, isBool := v.(bool); !ok || isBool {
		return "", invalid(ReasonTenant, fmt.Sprintf("the tenant claim %q is not a string", clip.String(path)))
	}
	if !v1alpha1.ValidIdentifier(s) {
		return "", invalid(ReasonTenant, fmt.Sprintf("the tenant claim %q is not a valid tenant id (1 to 64 characters [A-Za-z0-9._-], starting with a letter or digit): %q",
			clip.String(path), clip.String(s)))
	}
	return s, nil
}
