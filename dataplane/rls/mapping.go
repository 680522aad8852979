package rls

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// Bounds of one request. A request beyond them is refused whole, before any
// decision, with codes.InvalidArgument.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = 64
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = 32
	// MaxCost is the largest hits_addend.
	MaxCost = 1_000_000
)

// ChargeKey is the descriptor entry that makes a descriptor a charge: its
// cost is charged whatever the bucket holds, into debt down to the rule's
// spec.cost.response.maxDebt (0 without a response cost), and the answer is
// always OK. It is meant for the rate limits Envoy sends when a stream is
// done (apply_on_stream_done), with the response's cost as hits_addend.
// Its value is not read.
const ChargeKey = "tollgate.dev/charge"

// Target is what one descriptor asks for: cost tokens from the bucket of
// tenant on route, or (Charge) a charge of cost tokens after the response.
type Target struct {
	// Tenant is "" for an anonymous descriptor (Domain.TenantOptional).
	Tenant, Route string
	Cost          int64
	Charge        bool
	// Addr, Method, Path and Header are what the descriptor's entries give
	// for rules keyed by clientAddress, method, path and header
	// (Domain.AddressKey, Domain.Headers); zero when absent.
	Addr         netip.Addr
	Method, Path string
	Header       http.Header
}

// requestError is a malformed request; its text goes back to the caller.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

// AppendTargets checks a request and maps each of its descriptors to a Target, in
// order, and returns the domain's mapping. It refuses the whole request
// (a *requestError) if any descriptor is malformed, so a bad descriptor never
// lets the good ones before it take tokens. The tenant and route of every
// Target are valid ids (v1alpha1.ValidIdentifier): no '{', '}' or ':', so
// they can never make two buckets share a Redis key.
//
// Rules:
//   - the domain selects the keys (Domains); an unknown domain is refused
//     when domains are configured;
//   - the entry with the domain's tenant key gives the tenant (required),
//     the one with its route key the route (else the domain's default
//     route, else refused); each key at most once per descriptor; other
//     entries are ignored;
//   - the cost is the descriptor's hits_addend if set, else the request's;
//     0 counts as 1; above MaxCost is refused; is_negative_hits is refused;
//   - a descriptor with the entry ChargeKey is a charge (Target.Charge);
//   - a descriptor's rate limit override (limit) is ignored: tollgate's
//     rules decide.
//
// The targets are appended to dst, so that a caller can keep them in a
// buffer of its own (on its stack for one descriptor).
func (ds *Domains) AppendTargets(dst []Target, req *rlsv3.RateLimitRequest) ([]Target, *Domain, error) {
	dom, err := ds.lookup(req.GetDomain())
	if err != nil {
		return nil, nil, &requestError{msg: err.Error()}
	}
	descs := req.GetDescriptors()
	switch {
	case len(descs) == 0:
		return nil, dom, badRequest("no descriptors: a request needs at least one")
	case len(descs) > MaxDescriptors:
		return nil, dom, badRequest("%d descriptors: at most %d per request", len(descs), MaxDescriptors)
	}
	reqCost := int64(req.GetHitsAddend())
	if reqCost > MaxCost {
		return nil, dom, badRequest("hits_addend too large: %d, at most %d", reqCost, MaxCost)
	}
	out := slices.Grow(dst[:0], len(descs))
	for i, d := range descs {
		t, err := dom.target(d, reqCost)
		if err != nil {
			return nil, dom, badRequest("descriptors[%d]: %s", i, err.Error())
		}
		out = append(out, t)
	}
	return out, dom, nil
}

// target maps one descriptor.
func (dom *Domain) target(d *ratelimitv3.RateLimitDescriptor, reqCost int64) (Target, error) {
	entries := d.GetEntries()
	if len(entries) > MaxEntries {
		return Target{}, fmt.Errorf("%d entries: at most %d per descriptor", len(entries), MaxEntries)
	}
	var t Target
	var haveTenant, haveRoute bool
	for _, e := range entries {
		switch e.GetKey() {
		case dom.TenantKey:
			if haveTenant {
				return Target{}, fmt.Errorf("entry %q appears twice", dom.TenantKey)
			}
			haveTenant, t.Tenant = true, e.GetValue()
		case dom.RouteKey:
			if haveRoute {
				return Target{}, fmt.Errorf("entry %q appears twice", dom.RouteKey)
			}
			haveRoute, t.Route = true, e.GetValue()
		case ChargeKey:
			t.Charge = true
		case dom.AddressKey:
			if t.Addr.IsValid() {
				return Target{}, fmt.Errorf("entry %q appears twice", dom.AddressKey)
			}
			a, err := netip.ParseAddr(e.GetValue())
			if err != nil {
				return Target{}, fmt.Errorf("the %q value %q is not an IP address", dom.AddressKey, clip.String(e.GetValue()))
			}
			t.Addr = a.Unmap()
		default:
			dom.headerEntry(&t, e.GetKey(), e.GetValue())
		}
	}
	if !haveTenant && dom.TenantOptional {
		return dom.anonymous(t, d, reqCost)
	}
	if !haveTenant {
		return Target{}, fmt.Errorf("no %q entry: it names the tenant%s", dom.TenantKey, dom.inDomain())
	}
	if why := invalidID(t.Tenant); why != "" {
		// The value itself is not echoed: it may be an API key.
		return Target{}, fmt.Errorf("the %q value is not a valid tenant id: %s", dom.TenantKey, why)
	}
	if !haveRoute {
		if dom.DefaultRoute == "" {
			return Target{}, fmt.Errorf("no %q entry: it names the route%s, which has no defaultRoute", dom.RouteKey, dom.inDomain())
		}
		t.Route = dom.DefaultRoute
	} else if why := invalidID(t.Route); why != "" {
		return Target{}, fmt.Errorf("the %q value %q is not a valid route id: %s", dom.RouteKey, clip.String(t.Route), why)
	}
	return dom.cost(t, d, reqCost)
}

// anonymous completes the target of a descriptor without a tenant entry:
// its route, as for any descriptor, and its cost. It cannot be a charge:
// a response cost is per tenant.
func (dom *Domain) anonymous(t Target, d *ratelimitv3.RateLimitDescriptor, reqCost int64) (Target, error) {
	if t.Charge {
		return Target{}, fmt.Errorf("a charge (%s) needs a %q entry", ChargeKey, dom.TenantKey)
	}
	if t.Route == "" {
		t.Route = dom.DefaultRoute
	}
	if why := invalidID(t.Route); why != "" {
		return Target{}, fmt.Errorf("no valid %q entry: it names the route%s: %s", dom.RouteKey, dom.inDomain(), why)
	}
	return dom.cost(t, d, reqCost)
}

// headerEntry records an entry the domain maps to a request header (or to
// the method or path) in t.
func (dom *Domain) headerEntry(t *Target, key, value string) {
	name, ok := dom.Headers[key]
	switch {
	case !ok:
	case name == ":method":
		t.Method = value
	case name == ":path":
		t.Path = value
	default:
		if t.Header == nil {
			t.Header = http.Header{}
		}
		name = http.CanonicalHeaderKey(name)
		t.Header[name] = append(t.Header[name], value)
	}
}

// cost sets t's cost: the descriptor's hits_addend, else the request's,
// at least 1.
func (dom *Domain) cost(t Target, d *ratelimitv3.RateLimitDescriptor, reqCost int64) (Target, error) {
	if d.GetIsNegativeHits() {
		return Target{}, fmt.Errorf("is_negative_hits is not supported: tollgate never hands tokens back")
	}
	t.Cost = reqCost
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() > MaxCost {
			return Target{}, fmt.Errorf("hits_addend too large: %d, at most %d", h.GetValue(), MaxCost)
		}
		t.Cost = int64(h.GetValue())
	}
	t.Cost = max(1, t.Cost)
	return t, nil
}

func (dom *Domain) inDomain() string {
	if dom.Name == "" {
		return ""
	}
	return fmt.Sprintf(" in domain %q", clip.String(dom.Name))
}

// invalidID says why s is not a valid tenant or route id, or "" when it is
// one. It never repeats s.
func invalidID(s string) string {
	if v1alpha1.ValidIdentifier(s) {
		return ""
	}
	switch {
	case s == "":
		return "empty"
	case len(s) > v1alpha1.MaxIdentifierLength:
		return "longer than " + strconv.Itoa(v1alpha1.MaxIdentifierLength) + " characters"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !ok && (c == '.' || c == '_' || c == '-') {
			if i == 0 {
				return "must start with a letter or digit"
			}
			continue
		}
		if !ok && c >= 0x80 {
			return fmt.Sprintf("non-ASCII byte at offset %d is not allowed (only A-Z a-z 0-9 . _ -)", i)
		}
		if !ok {
			return fmt.Sprintf("character %q at offset %d is not allowed (only A-Z a-z 0-9 . _ -)", rune(c), i)
		}
	}
	return "invalid"
}
