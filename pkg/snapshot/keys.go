package snapshot

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// PartKind says what one part of a bucket's key is (spec.by).
type PartKind uint8

// The key parts.
const (
	PartTenant PartKind = iota + 1
	PartRoute
	PartAddress
	PartHeader
	PartMethod
	PartPath
	PartClaim
)

// KeyPart is one compiled item of spec.by.
type KeyPart struct {
	Kind PartKind `json:"k"`
	// V4 and V6 are an address part's prefix lengths.
	V4 int32 `json:"4,omitempty"`
	V6 int32 `json:"6,omitempty"`
	// Name is a header part's canonical header name, or a claim part's
	// path.
	Name string `json:"n,omitempty"`
	// Segments is a path part's number of segments.
	Segments int32 `json:"sg,omitempty"`
}

// text is the part as it appears in a kind's text.
func (p KeyPart) text() string {
	switch p.Kind {
	case PartTenant:
		return "tenant"
	case PartRoute:
		return "route"
	case PartAddress:
		return "address/" + strconv.Itoa(int(p.V4)) + "/" + strconv.Itoa(int(p.V6))
	case PartHeader:
		return "header:" + p.Name
	case PartMethod:
		return "method"
	case PartPath:
		return "path/" + strconv.Itoa(int(p.Segments))
	case PartClaim:
		return "claim:" + p.Name
	}
	return "?"
}

// label is the part in a limit's name (RateLimit-Policy items).
func (p KeyPart) label() string {
	switch p.Kind {
	case PartAddress:
		return "address"
	case PartHeader:
		return "header-" + strings.ToLower(p.Name)
	case PartPath:
		return "path"
	case PartClaim:
		return "claim-" + p.Name
	}
	return p.text()
}

// KindShared is the kind of a spec.shared rule.
const KindShared = "shared"

// Kind is the rule's key shape: "" for the default (tenant and route),
// KindShared for spec.shared, else its key parts written in order. Rules of
// one kind take precedence over each other by tenant and route; every
// kind's rule in force applies to a request.
func (r *Rule) Kind() string {
	if r.named != nil {
		return r.named.kind
	}
	if len(r.By) == 0 && !r.Shared {
		return ""
	}
	return r.kindText()
}

func (r *Rule) kindText() string {
	if r.Shared {
		return KindShared
	}
	parts := make([]string, len(r.By))
	for i, p := range r.By {
		parts[i] = p.text()
	}
	return strings.Join(parts, ",")
}

// KindID is a short stable name of the rule's kind for its Redis keys: ""
// for the default kind, else 8 characters of base64url of the kind's
// SHA-256.
func (r *Rule) KindID() string {
	if r.named != nil {
		return r.named.kindID
	}
	if len(r.By) == 0 && !r.Shared {
		return ""
	}
	return Digest(r.kindText())[:8]
}

// Identity is a short stable name of the RateLimitRule a rule came from, for
// the keys of a rule not keyed by route (every route it matches shares its
// bucket; two rules never do): 11 characters of base64url of the Source's
// SHA-256, or of tenant and route for a rule without a Source.
func (r *Rule) Identity() string {
	if r.named != nil {
		return r.named.identity
	}
	return r.identityText()
}

func (r *Rule) identityText() string {
	src := r.Source
	if src == "" {
		src = "\x00" + r.Tenant + "\x00" + r.Route + "\x00" + r.ClaimsKey()
	}
	return Digest(src)[:11]
}

// Keyed reports whether the rule's buckets are keyed by part kind k (for
// the default kind: tenant and route).
func (r *Rule) Keyed(k PartKind) bool {
	if r.Shared {
		return false
	}
	if len(r.By) == 0 {
		return k == PartTenant || k == PartRoute
	}
	for _, p := range r.By {
		if p.Kind == k {
			return true
		}
	}
	return false
}

// Name is the rule's name in the limit headers (RateLimit-Policy items):
// route for the default kind (the request's route id), else
// <route>-by-<parts> or <route>-shared, the rule's route ("all" for "*").
func (r *Rule) Name(route string) string {
	if len(r.By) == 0 && !r.Shared {
		return route
	}
	if r.named != nil {
		return r.named.name
	}
	return r.nameText()
}

func (r *Rule) nameText() string {
	base := r.Route
	if base == v1alpha1.Wildcard {
		base = "all"
	}
	if r.Shared {
		return base + "-shared"
	}
	parts := make([]string, len(r.By))
	for i, p := range r.By {
		parts[i] = p.label()
	}
	return base + "-by-" + strings.Join(parts, "-")
}

// cacheKind computes what Kind, KindID, Identity and Name return, once,
// when the rule goes into a shard.
func (r *Rule) cacheKind() {
	if len(r.By) == 0 && !r.Shared {
		return
	}
	kind := r.kindText()
	r.named = &ruleNames{kind: kind, kindID: Digest(kind)[:8], identity: r.identityText(), name: r.nameText()}
}

// Digest is base64url of the first 16 bytes of s's SHA-256 (22
// characters): how a key part that is not an id (a header's value, a
// path, a claim) appears in a Redis key, bounded and without the value.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// byFromSpec compiles spec.by and spec.shared. By [tenant, route] is the
// default kind and compiles to no parts.
func byFromSpec(spec *v1alpha1.RateLimitRuleSpec, source string) ([]KeyPart, error) {
	if spec.Shared && len(spec.By) > 0 {
		return nil, fmt.Errorf("%s: spec.shared cannot be combined with spec.by", source)
	}
	out := make([]KeyPart, 0, len(spec.By))
	for i, item := range spec.By {
		p, err := partFromSpec(&item)
		if err != nil {
			return nil, fmt.Errorf("%s: spec.by[%d]: %w", source, i, err)
		}
		out = append(out, p)
	}
	if len(out) == 0 || len(out) == 2 && out[0].Kind == PartTenant && out[1].Kind == PartRoute {
		return nil, nil
	}
	return out, nil
}

// partFromSpec compiles one item of spec.by; Validate checks its bounds.
func partFromSpec(item *v1alpha1.KeyPart) (KeyPart, error) {
	var ps []KeyPart
	if item.Tenant != nil {
		ps = append(ps, KeyPart{Kind: PartTenant})
	}
	if item.Route != nil {
		ps = append(ps, KeyPart{Kind: PartRoute})
	}
	if a := item.ClientAddress; a != nil {
		p := KeyPart{Kind: PartAddress, V4: a.IPv4Prefix, V6: a.IPv6Prefix}
		if p.V4 == 0 {
			p.V4 = v1alpha1.DefaultIPv4Prefix
		}
		if p.V6 == 0 {
			p.V6 = v1alpha1.DefaultIPv6Prefix
		}
		ps = append(ps, p)
	}
	if h := item.Header; h != nil {
		ps = append(ps, KeyPart{Kind: PartHeader, Name: http.CanonicalHeaderKey(h.Name)})
	}
	if item.Method != nil {
		ps = append(ps, KeyPart{Kind: PartMethod})
	}
	if p := item.Path; p != nil {
		ps = append(ps, KeyPart{Kind: PartPath, Segments: max(1, p.Segments)})
	}
	if c := item.Claim; c != nil {
		ps = append(ps, KeyPart{Kind: PartClaim, Name: c.Path})
	}
	if len(ps) != 1 {
		return KeyPart{}, fmt.Errorf("set exactly one of tenant, route, clientAddress, header, method, path and claim (%d set)", len(ps))
	}
	return ps[0], nil
}

// validateBy checks a rule's key parts: bounds, each part at most once, no
// credential header, and not with the per-tenant-and-route features
// (concurrency, a response cost) or with spec.shared.
func (r *Rule) validateBy() error {
	if len(r.By) == 0 && !r.Shared {
		return nil
	}
	id := r.Tenant + "/" + r.Route
	switch {
	case r.Shared && len(r.By) > 0:
		return fmt.Errorf("rule %s: shared with key parts", id)
	case len(r.By) > v1alpha1.MaxKeyParts:
		return fmt.Errorf("rule %s: %d key parts, at most %d", id, len(r.By), v1alpha1.MaxKeyParts)
	case r.MaxInFlight > 0 || r.Cost != nil && r.Cost.Response != nil:
		return fmt.Errorf("rule %s: spec.by and spec.shared cannot be combined with concurrency or a response cost", id)
	}
	seen := map[string]bool{}
	for _, p := range r.By {
		if err := p.validate(); err != nil {
			return fmt.Errorf("rule %s: key part %s: %w", id, clip.String(p.text()), err)
		}
		t := strings.ToLower(p.text())
		if p.Kind == PartAddress || p.Kind == PartPath {
			t = p.label()
		}
		if seen[t] {
			return fmt.Errorf("rule %s: key part %s given twice", id, clip.String(p.text()))
		}
		seen[t] = true
	}
	return nil
}

func (p KeyPart) validate() error {
	switch p.Kind {
	case PartTenant, PartRoute, PartMethod:
	case PartAddress:
		if p.V4 < 8 || p.V4 > 32 || p.V6 < 16 || p.V6 > 128 {
			return fmt.Errorf("prefix lengths /%d and /%d: want 8 to 32 and 16 to 128", p.V4, p.V6)
		}
	case PartHeader:
		if len(p.Name) > 64 || !httpguts.ValidHeaderFieldName(p.Name) || p.Name != http.CanonicalHeaderKey(p.Name) {
			return fmt.Errorf("not a canonical header name of at most 64 characters")
		}
		switch p.Name {
		case "X-Api-Key", "Authorization", "Cookie":
			return fmt.Errorf("a credential header cannot key a bucket")
		}
	case PartPath:
		if p.Segments < 1 || p.Segments > v1alpha1.MaxPathSegments {
			return fmt.Errorf("segments %d: want 1 to %d", p.Segments, v1alpha1.MaxPathSegments)
		}
	case PartClaim:
		if !v1alpha1.ValidClaimPath(p.Name) {
			return fmt.Errorf("invalid claim path")
		}
	default:
		return fmt.Errorf("unknown key part %d", p.Kind)
	}
	return nil
}
