package v1alpha1

import "strings"

// Bounds of spec.match.claims; the schema enforces the same.
const (
	// MaxMatchClaims is the most claims one rule matches on.
	MaxMatchClaims = 8
	// MaxClaimPathLength is the longest claim path, in bytes.
	MaxClaimPathLength = 256
	// MaxClaimValueLength is the longest claim value a rule matches, in
	// bytes.
	MaxClaimValueLength = 256
)

// ValidClaimPath reports whether s is a valid claim path: 1 to 256 bytes
// without control characters, where dots separate the names of nested
// claims ("org.plan" is the claim plan inside the object claim org), so
// no name is empty (no leading or trailing dot, no ".."). A claim whose own
// name has dots ("https://example.com/plan") is found by its whole name
// first; see the gateway's claim lookup (docs/jwt.md).
func ValidClaimPath(s string) bool {
	if len(s) == 0 || len(s) > MaxClaimPathLength || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	return !hasControl(s)
}

// ValidClaimValue reports whether s is a valid claim value to match: 1 to
// 256 bytes without control characters.
func ValidClaimValue(s string) bool {
	return len(s) > 0 && len(s) <= MaxClaimValueLength && !hasControl(s)
}

// hasControl reports whether s holds an ASCII control character, which is
// what the schema's [[:cntrl:]] matches.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}
