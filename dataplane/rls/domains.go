package rls

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/lib/strictdecode"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// Default descriptor keys: a descriptor's "tenant" entry names the tenant and
// its "route" entry the route.
const (
	DefaultTenantKey = "tenant"
	DefaultRouteKey  = "route"
)

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
var defaultDomain = &Domain{TenantKey: DefaultTenantKey, RouteKey: DefaultRouteKey, label: "rls"}

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
		return nil, fmt.Errorf(`want a mapping "domains: [{name, tenantKey, routeKey, defaultRoute}]": %w`, err)
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
