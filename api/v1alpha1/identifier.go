package v1alpha1

// Wildcard is the tenant or route value that matches every tenant or route.
const Wildcard = "*"

// MaxIdentifierLength is the longest tenant or route id.
const MaxIdentifierLength = 64

// ValidIdentifier reports whether s is a concrete tenant or route id: 1 to 64
// characters from [A-Za-z0-9._-], starting with a letter or digit. It is the
// same rule as the schema's pattern (without the wildcard), written as a loop
// because the gateway checks every request's tenant with it.
//
// Ids never contain '{', '}' or ':', so the bucket name rl:{tenant}:route
// (stored as the field route of the Redis hash rl:{tenant}) is unambiguous
// for every valid pair.
func ValidIdentifier(s string) bool {
	if len(s) == 0 || len(s) > MaxIdentifierLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// ValidSelector reports whether s is a valid tenant or route field of a rule:
// a concrete id or the wildcard.
func ValidSelector(s string) bool {
	return s == Wildcard || ValidIdentifier(s)
}
