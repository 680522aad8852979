package rls

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/lib/strictdecode"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// Default descriptor keys: a descriptor's "tenant" entry names the tenant,
// its "route" entry the route and its "remote_address" entry (Envoy's
// remote_address action) the client address.
const (
	DefaultTenantKey  = "tenant"
	DefaultRouteKey   = "route"
	DefaultAddressKey = "remote_address"
)

// maxHeaderKeys bounds a domain's headers map.
const maxHeaderKeys = 16

// checkKeys checks the address key and the headers map: valid names, no
// key used twice.
func (d *Domain) checkKeys() []string {
	var bad []string
	if !validName(d.AddressKey) {
		bad = append(bad, fmt.Sprintf("addressKey: 1 to %d printable ASCII characters without spaces", maxNameLength))
	}
	if len(d.Headers) > maxHeaderKeys {
		bad = append(bad, fmt.Sprintf("headers: %d entries, at most %d", len(d.Headers), maxHeaderKeys))
	}
	for k, h := range d.Headers {
		switch {
		case !validName(k) || k == d.TenantKey || k == d.RouteKey || k == d.AddressKey || k == ChargeKey:
			bad = append(bad, fmt.Sprintf("headers: key %q must be a valid name other than tenantKey, routeKey, addressKey and %s", clip.String(k), ChargeKey))
		case h != ":method" && h != ":path" && !httpguts.ValidHeaderFieldName(h):
			bad = append(bad, fmt.Sprintf("headers[%s]: %q is not a header name (or :method, :path)", clip.String(k), clip.String(h)))
		}
	}
	return bad
}

// Bounds of the domain file.
const (
	maxDomains    = 1000
	maxNameLength = 128
	maxFileSize   = 1 << 20
)

// Domain says how the descriptors of one rate limit domain map to a tenant
// and a route.
type Domain struct {
	// Name is the domain Envoy sends (the rate limit filter's "domain").
	Name string `json:"name"`
	// TenantKey is the descriptor entry key whose value is the tenant id.
	// Default "tenant".
	TenantKey string `json:"tenantKey,omitempty"`
	// RouteKey is the descriptor entry key whose value is the route id.
	// Default "route".
	RouteKey string `json:"routeKey,omitempty"`
	// DefaultRoute is the route of descriptors without a RouteKey entry;
	// empty: such descriptors are refused.
	DefaultRoute string `json:"defaultRoute,omitempty"`
	// TenantOptional makes a descriptor without a TenantKey entry
	// anonymous, as a request on an HTTP route with identity optional:
	// only the rules not keyed by tenant (spec.by clientAddress, header,
	// ..., spec.shared) limit it. Default false: such a descriptor is
	// refused.
	TenantOptional bool `json:"tenantOptional,omitempty"`
	// AddressKey is the descriptor entry key whose value is the client
	// address (Envoy's remote_address action), for rules keyed by
	// clientAddress. Default "remote_address".
	AddressKey string `json:"addressKey,omitempty"`
	// Headers maps descriptor entry keys to request header names (Envoy's
	// request_headers action: descriptor_key -> header_name), for rules
	// keyed by header: {client_id: X-Client-Id} gives the X-Client-Id
	// part the value of the client_id entry. ":method" and ":path" give
	// the method and path parts. At most 16.
	Headers map[string]string `json:"headers,omitempty"`

	// label is the route label of this domain's decisions in
	// tollgate_gateway_decisions_total.
	label string
}

// file is the domain file's format.
type file struct {
	Domains []Domain `json:"domains"`
}

// Domains is a compiled, immutable domain configuration. The nil *Domains,
// like an empty one, maps every domain with the default keys.
type Domains struct {
	byName map[string]*Domain
}

// defaultDomain is the mapping of every domain when none is configured.
var defaultDomain = &Domain{TenantKey: DefaultTenantKey, RouteKey: DefaultRouteKey, AddressKey: DefaultAddressKey, label: "rls"}

// NewDomains validates and compiles a domain list.
func NewDomains(list []Domain) (*Domains, error) {
	if len(list) > maxDomains {
		return nil, fmt.Errorf("domains: %d entries, at most %d", len(list), maxDomains)
	}
	ds := &Domains{byName: make(map[string]*Domain, len(list))}
	var errs []error
	for i, d := range list {
		at := fmt.Sprintf("domains[%d]", i)
		if d.Name != "" {
			at += fmt.Sprintf(" (name %q)", clip.String(d.Name))
		}
		if d.TenantKey == "" {
			d.TenantKey = DefaultTenantKey
		}
		if d.RouteKey == "" {
			d.RouteKey = DefaultRouteKey
		}
		if d.AddressKey == "" {
			d.AddressKey = DefaultAddressKey
		}
		var bad []string
		if !validName(d.Name) {
			bad = append(bad, fmt.Sprintf("name: required, 1 to %d printable ASCII characters without spaces", maxNameLength))
		} else if _, dup := ds.byName[d.Name]; dup {
			bad = append(bad, "name: listed twice")
		}
		if !validName(d.TenantKey) {
			bad = append(bad, fmt.Sprintf("tenantKey: 1 to %d printable ASCII characters without spaces", maxNameLength))
		}
		if !validName(d.RouteKey) {
			bad = append(bad, fmt.Sprintf("routeKey: 1 to %d printable ASCII characters without spaces", maxNameLength))
		}
		if d.TenantKey == d.RouteKey {
			bad = append(bad, fmt.Sprintf("tenantKey and routeKey are both %q", clip.String(d.TenantKey)))
		}
		bad = append(bad, d.checkKeys()...)
		if d.DefaultRoute != "" && !v1alpha1.ValidIdentifier(d.DefaultRoute) {
			bad = append(bad, fmt.Sprintf("defaultRoute %q: not a valid route id (1-64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit)", clip.String(d.DefaultRoute)))
		}
		for _, b := range bad {
			errs = append(errs, fmt.Errorf("%s: %s", at, b))
		}
		if len(bad) == 0 {
			d.label = "rls:" + d.Name
			ds.byName[d.Name] = &d
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return ds, nil
}

// ParseDomains parses a domain file (YAML or JSON):
//
//	domains:
//	  - name: edge            # the domain Envoy sends
//	    tenantKey: tenant     # default "tenant"
//	    routeKey: route       # default "route"
//	    defaultRoute: api     # optional: route of descriptors without a routeKey entry
//	    tenantOptional: false # optional: true makes descriptors without a tenantKey entry anonymous
//	    addressKey: remote_address  # the entry holding the client address (default)
//	    headers: {client_id: X-Client-Id}  # optional: entries that give request headers (or :method, :path)
//
// Parsing is strict: unknown or misspelt fields (keys are case-sensitive),
// duplicate keys and wrong types are errors.
func ParseDomains(data []byte) (*Domains, error) {
	js, err := strictdecode.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("syntax: %w", err)
	}
	if t := strings.TrimSpace(string(js)); t == "null" || t == "" {
		return nil, errors.New(`empty: want "domains: [...]"`)
	}
	var f file
	if err := strictdecode.Decode(js, &f); err != nil {
		return nil, fmt.Errorf(`want a mapping "domains: [{name, tenantKey, routeKey, defaultRoute, tenantOptional, addressKey, headers}]": %w`, err)
	}
	return NewDomains(f.Domains)
}

// Len is the number of configured domains.
func (ds *Domains) Len() int {
	if ds == nil {
		return 0
	}
	return len(ds.byName)
}

// lookup returns the mapping of a domain: with no domains configured, the
// default one for every domain; otherwise the configured one, or an error
// for an unknown domain.
func (ds *Domains) lookup(name string) (*Domain, error) {
	// Envoy always sends its configured domain; an empty one is a broken or
	// hand-made client, refused like Envoy's reference service does.
	if name == "" {
		return nil, errors.New("domain: empty; every rate limit request must name its domain")
	}
	if ds.Len() == 0 {
		return defaultDomain, nil
	}
	if d, ok := ds.byName[name]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("unknown domain %q; this service only serves the domains of its --rls-domains file", clip.String(name))
}

// validName: 1 to maxNameLength printable ASCII characters, no spaces.
func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
