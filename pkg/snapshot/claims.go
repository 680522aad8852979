package snapshot

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// ClaimMatch is one entry of spec.match.claims: the claim at Path must have
// Value.
type ClaimMatch struct {
	Path  string `json:"k"`
	Value string `json:"v"`
}

// Claims are the claims a request's identity carries (a verified token's),
// as far as rules match on them. Implementations must be safe for
// concurrent use and must not log what they hold.
type Claims interface {
	// HasClaim reports whether the claim at path (see
	// v1alpha1.ValidClaimPath) matches value: a string equal to it, a
	// number or boolean whose JSON text equals it, or an array holding
	// such an element.
	HasClaim(path, value string) bool
	// ClaimValue is the text of the claim at path when it is a string, a
	// number or a boolean (as HasClaim compares it); false when it is
	// missing, an array or an object. A key part (spec.by claim) is made
	// of it.
	ClaimValue(path string) (string, bool)
}

// claimsFromSpec compiles spec.match.claims, sorted by path. A match
// without claims is an error: the rule would apply to every tenant.
func claimsFromSpec(m *v1alpha1.RuleMatch, source string) ([]ClaimMatch, error) {
	if m == nil {
		return nil, nil
	}
	if len(m.Claims) == 0 {
		return nil, fmt.Errorf("%s: spec.match needs at least one claim in spec.match.claims", source)
	}
	out := make([]ClaimMatch, 0, len(m.Claims))
	for k, v := range m.Claims {
		out = append(out, ClaimMatch{Path: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// validateClaims checks a rule's claims: tenant "*", at most
// MaxMatchClaims, valid paths and values, sorted by path without
// duplicates.
func (r *Rule) validateClaims() error {
	if len(r.Claims) == 0 {
		return nil
	}
	switch {
	case r.Tenant != v1alpha1.Wildcard:
		return fmt.Errorf("rule %s/%s: claims need tenant %q", r.Tenant, r.Route, v1alpha1.Wildcard)
	case len(r.Claims) > v1alpha1.MaxMatchClaims:
		return fmt.Errorf("rule %s/%s: %d claims, at most %d", r.Tenant, r.Route, len(r.Claims), v1alpha1.MaxMatchClaims)
	}
	for i, c := range r.Claims {
		switch {
		case !v1alpha1.ValidClaimPath(c.Path):
			return fmt.Errorf("rule %s/%s: claim path %q is invalid", r.Tenant, r.Route, clip.String(c.Path))
		case !v1alpha1.ValidClaimValue(c.Value):
			return fmt.Errorf("rule %s/%s: claim %q: value %q is invalid", r.Tenant, r.Route, clip.String(c.Path), clip.String(c.Value))
		case i > 0 && r.Claims[i-1].Path >= c.Path:
			return fmt.Errorf("rule %s/%s: claims not sorted by path, or claim %q twice", r.Tenant, r.Route, clip.String(c.Path))
		}
	}
	return nil
}

// ClaimsKey is the rule's claims written in order, "path=value" joined by
// newlines (neither may hold a control character): "" for a rule without
// claims. Two rules of one tenant and route conflict when their keys are
// equal.
func (r *Rule) ClaimsKey() string {
	if len(r.Claims) == 0 {
		return ""
	}
	var b strings.Builder
	for i, c := range r.Claims {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(c.Path)
		b.WriteByte('=')
		b.WriteString(c.Value)
	}
	return b.String()
}

// kindNote describes r's kind for a message: "" for the default kind,
// else " keyed by <parts>" (or " shared").
func kindNote(r *Rule) string {
	switch k := r.Kind(); k {
	case "":
		return ""
	case KindShared:
		return " (shared)"
	default:
		return " keyed by " + clip.String(k)
	}
}

// claimsNote describes r's claims for a message: "" without claims, else
// " with claims {path=value, ...}" (values clipped).
func claimsNote(r *Rule) string {
	if len(r.Claims) == 0 {
		return ""
	}
	parts := make([]string, len(r.Claims))
	for i, c := range r.Claims {
		parts[i] = clip.String(c.Path) + "=" + clip.String(c.Value)
	}
	return " with claims {" + strings.Join(parts, ", ") + "}"
}

// matchesClaims reports whether c carries every claim of r.
func (r *Rule) matchesClaims(c Claims) bool {
	for _, m := range r.Claims {
		if !c.HasClaim(m.Path, m.Value) {
			return false
		}
	}
	return true
}

// claimRules are a snapshot's rules with claims, by kind and route, in
// precedence order.
type claimRules map[kindRoute][]*Rule

// kindRoute is a rule's kind and route.
type kindRoute struct{ kind, route string }

// add indexes r.
func (cr claimRules) add(r *Rule) {
	k := kindRoute{r.Kind(), r.Route}
	cr[k] = append(cr[k], r)
}

// sort puts each route's rules in precedence order: more claims first,
// then by ClaimsKey.
func (cr claimRules) sort() {
	for _, rs := range cr {
		sort.SliceStable(rs, func(i, j int) bool {
			if len(rs[i].Claims) != len(rs[j].Claims) {
				return len(rs[i].Claims) > len(rs[j].Claims)
			}
			return rs[i].ClaimsKey() < rs[j].ClaimsKey()
		})
	}
}

// match is the first rule of kind on route that c matches, or nil.
func (cr claimRules) match(kind, route string, c Claims) *Rule {
	for _, r := range cr[kindRoute{kind, route}] {
		if r.matchesClaims(c) {
			return r
		}
	}
	return nil
}
