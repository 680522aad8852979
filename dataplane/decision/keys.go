package decision

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Request is what the key of a bucket is made of (spec.by): who sent a
// request and what it asks. Both front doors fill it: the HTTP proxy from
// the request, the Envoy path from descriptor entries.
type Request struct {
	// Tenant is the caller's tenant; "" for a request without an identity
	// (a route with identity optional or none).
	Tenant string
	// Route is the route id the request matched.
	Route string
	// Claims are the verified token's claims; nil without a token.
	Claims snapshot.Claims
	// Addr is the client address (clientaddr.Resolver.Client); the zero
	// Addr when unknown, which is a value of its own.
	Addr netip.Addr
	// Method is the request method; Path the request path (no query).
	Method, Path string
	// Header gives the values of a request header (an http.Header); nil
	// for none.
	Header interface{ Values(key string) []string }
}

// HeaderError is a request header that cannot key a bucket: sent twice,
// longer than v1alpha1.MaxKeyValueLength bytes or with a control
// character. The HTTP proxy answers it 400; its text names the header and
// quotes nothing of the value.
type HeaderError struct{ Name string }

func (e *HeaderError) Error() string {
	return fmt.Sprintf("header %s: a rate limit is keyed by it: send it at most once, up to %d bytes without control characters", e.Name, v1alpha1.MaxKeyValueLength)
}

// missing is the value of a part whose header or claim the request does
// not have: every such request shares it ("-" is never a Digest).
const missing = "-"

// KeyFor is the name of the bucket of rule for req (before region and
// shards): limiter.Key(tenant, route) for the default kind, exactly as
// before key parts existed; rl:{<rule identity>}:|s for a shared rule;
// else rl:{<first part>}:|<kind id>|[<rule identity>|]<other parts>, where
// the rule identity is there when the key has no route (every route the
// rule matches shares its bucket; two rules never do). Parts are typed
// (t: tenant, r: route, a: address/prefix, h: header, m: method, p: path,
// c: claim, and a first part of tenant is the bare tenant, so that it is
// the hash tag of the tenant's other buckets: one slot); a header, path or
// claim value is a snapshot.Digest, bounded and without the value.
func KeyFor(rule *snapshot.Rule, req *Request) (string, error) {
	if len(rule.By) == 0 {
		if rule.Shared {
			return "rl:{s:" + rule.Identity() + "}:|s", nil
		}
		return limiter.Key(req.Tenant, req.Route), nil
	}
	var b strings.Builder
	b.Grow(64)
	b.WriteString("rl:{")
	if err := writePart(&b, rule.By[0], req, true); err != nil {
		return "", err
	}
	b.WriteString("}:|")
	b.WriteString(rule.KindID())
	if !rule.Keyed(snapshot.PartRoute) {
		b.WriteByte('|')
		b.WriteString(rule.Identity())
	}
	for _, p := range rule.By[1:] {
		b.WriteByte('|')
		if err := writePart(&b, p, req, false); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// writePart writes part p of req's key; first: it is the hash tag.
func writePart(b *strings.Builder, p snapshot.KeyPart, req *Request, first bool) error {
	switch p.Kind {
	case snapshot.PartTenant:
		if !first {
			b.WriteString("t:")
		}
		b.WriteString(req.Tenant)
	case snapshot.PartRoute:
		b.WriteString("r:")
		b.WriteString(req.Route)
	case snapshot.PartAddress:
		b.WriteString("a:")
		b.WriteString(addressPart(req.Addr, p))
	case snapshot.PartHeader:
		v, err := headerPart(req, p.Name)
		if err != nil {
			return err
		}
		b.WriteString("h:")
		b.WriteString(v)
	case snapshot.PartMethod:
		b.WriteString("m:")
		b.WriteString(methodPart(req.Method))
	case snapshot.PartPath:
		b.WriteString("p:")
		b.WriteString(snapshot.Digest(PathPrefix(req.Path, int(p.Segments))))
	case snapshot.PartClaim:
		b.WriteString("c:")
		v, ok := "", false
		if req.Claims != nil {
			v, ok = req.Claims.ClaimValue(p.Name)
		}
		if !ok {
			b.WriteString(missing)
		} else {
			b.WriteString(snapshot.Digest(v))
		}
	}
	return nil
}

// addressPart is a masked to p's prefix length ("198.51.100.0/24",
// "2001:db8:1:2::/64"), or "none" for an unknown address.
func addressPart(a netip.Addr, p snapshot.KeyPart) string {
	if !a.IsValid() {
		return "none"
	}
	a = a.Unmap()
	bits := int(p.V6)
	if a.Is4() {
		bits = int(p.V4)
	}
	pre, err := a.Prefix(bits)
	if err != nil {
		return "none"
	}
	return pre.String()
}

// headerPart is the digest of req's header name, missing without one, or
// a HeaderError.
func headerPart(req *Request, name string) (string, error) {
	var vs []string
	if req.Header != nil {
		vs = req.Header.Values(name)
	}
	switch {
	case len(vs) == 0:
		return missing, nil
	case len(vs) > 1 || len(vs[0]) > v1alpha1.MaxKeyValueLength || hasControl(vs[0]):
		return "", &HeaderError{Name: name}
	}
	return snapshot.Digest(vs[0]), nil
}

// methodPart is m when it is 1 to 16 upper-case letters (every method
// in use), else its digest.
func methodPart(m string) string {
	if len(m) == 0 || len(m) > 16 {
		return snapshot.Digest(m)
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 'A' || m[i] > 'Z' {
			return snapshot.Digest(m)
		}
	}
	return m
}

// PathPrefix is the first n segments of path, empty segments left out:
// PathPrefix("/v1//orders/42", 2) is "/v1/orders"; "/" when path has
// none.
func PathPrefix(path string, n int) string {
	var b strings.Builder
	seen := 0
	for rest := path; seen < n; seen++ {
		rest = strings.TrimLeft(rest, "/")
		if rest == "" {
			break
		}
		seg := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			seg, rest = rest[:j], rest[j:]
		} else {
			rest = ""
		}
		b.WriteByte('/')
		b.WriteString(seg)
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}
