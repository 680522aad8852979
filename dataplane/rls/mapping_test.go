package rls

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func req(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: ds}
}

func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func mustDomains(t *testing.T, yaml string) *Domains {
	t.Helper()
	ds, err := ParseDomains([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestMapDefaultKeys(t *testing.T) {
	var ds *Domains // none configured: every domain, default keys
	got, dom, err := ds.Map(req("whatever", 0,
		desc("tenant", "shop-a", "route", "create-order", "remote_address", "10.0.0.1"),
		withHits(desc("route", "list-orders", "tenant", "shop-b"), 7),
		withHits(desc("route", "chat", "tenant", "shop-c", ChargeKey, "response"), 250),
	))
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{{Tenant: "shop-a", Route: "create-order", Cost: 1, Addr: netip.MustParseAddr("10.0.0.1")}, {Tenant: "shop-b", Route: "list-orders", Cost: 7}, {Tenant: "shop-c", Route: "chat", Cost: 250, Charge: true}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if dom.label != "rls" {
		t.Errorf("label %q, want rls", dom.label)
	}
}

func TestMapCost(t *testing.T) {
	var ds *Domains
	for _, tc := range []struct {
		name    string
		reqHits uint32
		d       *ratelimitv3.RateLimitDescriptor
		want    int64
	}{
		{"request 0 means 1", 0, desc("tenant", "a", "route", "r"), 1},
		{"request addend", 5, desc("tenant", "a", "route", "r"), 5},
		{"descriptor overrides", 5, withHits(desc("tenant", "a", "route", "r"), 2), 2},
		{"descriptor 0 means 1", 5, withHits(desc("tenant", "a", "route", "r"), 0), 1},
		{"at the cap", 0, withHits(desc("tenant", "a", "route", "r"), MaxCost), MaxCost},
	} {
		got, _, err := ds.Map(req("d", tc.reqHits, tc.d))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got[0].Cost != tc.want {
			t.Errorf("%s: cost %d, want %d", tc.name, got[0].Cost, tc.want)
		}
	}
}

func TestMapConfiguredDomains(t *testing.T) {
	ds := mustDomains(t, `
domains:
  - name: edge
    tenantKey: api_key
    routeKey: generic_key
    defaultRoute: api
  - name: internal
`)
	got, dom, err := ds.Map(req("edge", 0, desc("api_key", "shop-a", "generic_key", "create-order"), desc("api_key", "shop-b")))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []Target{{Tenant: "shop-a", Route: "create-order", Cost: 1}, {Tenant: "shop-b", Route: "api", Cost: 1}}) {
		t.Errorf("got %+v", got)
	}
	if dom.label != "rls:edge" {
		t.Errorf("label %q", dom.label)
	}
	if got, _, err := ds.Map(req("internal", 0, desc("tenant", "x", "route", "y"))); err != nil || !reflect.DeepEqual(got[0], Target{Tenant: "x", Route: "y", Cost: 1}) {
		t.Errorf("internal: %+v %v", got, err)
	}
	_, _, err = ds.Map(req("other", 0, desc("tenant", "x", "route", "y")))
	if err == nil || !strings.Contains(err.Error(), `unknown domain "other"`) {
		t.Errorf("unknown domain: %v", err)
	}
	_, _, err = ds.Map(req("internal", 0, desc("tenant", "x")))
	if err == nil || !strings.Contains(err.Error(), `no "route" entry`) || !strings.Contains(err.Error(), "no defaultRoute") {
		t.Errorf("missing route: %v", err)
	}
}

func TestMapRefusesMalformed(t *testing.T) {
	var ds *Domains
	many := make([]*ratelimitv3.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = desc("tenant", "a", "route", "r")
	}
	wide := desc("tenant", "a", "route", "r")
	for len(wide.Entries) <= MaxEntries {
		wide.Entries = append(wide.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	neg := desc("tenant", "a", "route", "r")
	neg.IsNegativeHits = true
	for _, tc := range []struct {
		name string
		r    *rlsv3.RateLimitRequest
		want string
	}{
		{"nil request", nil, "domain: empty"},
		{"empty domain", req("", 0, desc("tenant", "t", "route", "r")), "domain: empty"},
		{"no descriptors", req("d", 0), "no descriptors"},
		{"too many descriptors", req("d", 0, many...), "65 descriptors: at most 64"},
		{"too many entries", req("d", 0, wide), "descriptors[0]: 33 entries: at most 32"},
		{"huge request addend", req("d", MaxCost+1, desc("tenant", "a", "route", "r")), "hits_addend too large: 1000001"},
		{"huge descriptor addend", req("d", 0, withHits(desc("tenant", "a", "route", "r"), 1<<40)), "descriptors[0]: hits_addend too large"},
		{"negative hits", req("d", 0, neg), "is_negative_hits is not supported"},
		{"nil descriptor", req("d", 0, nil), `descriptors[0]: no "tenant" entry`},
		{"no tenant", req("d", 0, desc("route", "r")), `no "tenant" entry`},
		{"no route", req("d", 0, desc("tenant", "a")), `no "route" entry`},
		{"brace in tenant", req("d", 0, desc("tenant", "a{b", "route", "r")), `not a valid tenant id: character '{' at offset 1`},
		{"colon in route", req("d", 0, desc("tenant", "a", "route", "r:x")), `"route" value "r:x" is not a valid route id: character ':'`},
		{"empty tenant", req("d", 0, desc("tenant", "", "route", "r")), "not a valid tenant id: empty"},
		{"long route", req("d", 0, desc("tenant", "a", "route", strings.Repeat("r", 65))), "longer than 64"},
		{"leading dot", req("d", 0, desc("tenant", ".a", "route", "r")), "must start with a letter or digit"},
		{"duplicate tenant", req("d", 0, desc("tenant", "a", "tenant", "b", "route", "r")), `entry "tenant" appears twice`},
		{"second descriptor bad", req("d", 0, desc("tenant", "a", "route", "r"), desc("tenant", "*", "route", "r")), "descriptors[1]:"},
	} {
		_, _, err := ds.Map(tc.r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestMapNeverEchoesTenant(t *testing.T) {
	var ds *Domains
	secret := "sk_live_{supersecret}"
	_, _, err := ds.Map(req("d", 0, desc("tenant", secret, "route", "r")))
	if err == nil || strings.Contains(err.Error(), "supersecret") {
		t.Fatalf("error %v must not repeat the tenant value", err)
	}
}

func TestParseDomainsErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"", "empty"},
		{"domains: [{name: a, tenantkey: x}]", `unknown field "domains[0].tenantkey"`},
		{"domain: []", `unknown field "domain"`},
		{"domains: [{name: a}, {name: a}]", `domains[1] (name "a"): name: listed twice`},
		{"domains: [{tenantKey: t}]", "domains[0]: name: required"},
		{"domains: [{name: 'a b'}]", "name: required, 1 to 128 printable ASCII characters"},
		{"domains: [{name: a, tenantKey: k, routeKey: k}]", `tenantKey and routeKey are both "k"`},
		{"domains: [{name: a, routeKey: tenant}]", `tenantKey and routeKey are both "tenant"`},
		{"domains: [{name: a, defaultRoute: 'x:y'}]", `defaultRoute "x:y": not a valid route id`},
		{"domains: [{name: a, name: b}]", `key "name" already set`},
		{"domains: {name: a}", "domains"},
		{"domains: [{name: 3}]", "name"},
	} {
		_, err := ParseDomains([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
	ds := mustDomains(t, "domains: []")
	if _, _, err := ds.Map(req("any", 0, desc("tenant", "a", "route", "r"))); err != nil {
		t.Errorf("an empty list configures no domain, so every domain is served: %v", err)
	}
}

func TestRateUnit(t *testing.T) {
	const (
		s = rlsv3.RateLimitResponse_RateLimit_SECOND
		m = rlsv3.RateLimitResponse_RateLimit_MINUTE
		h = rlsv3.RateLimitResponse_RateLimit_HOUR
		d = rlsv3.RateLimitResponse_RateLimit_DAY
	)
	for _, tc := range []struct {
		tokens, periodMs int64
		n                uint32
		unit             rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{100, 1000, 100, s},
		{10, 60_000, 10, m},
		{1000, 3_600_000, 1000, h},
		{1, 10_000, 6, m},
		{7, 3000, 140, m},
		{1, 86_400_000, 1, d},
		{1, 7000, 12343, d},                 // 12342.86 per day, rounded
		{1, 168 * 3_600_000, 1, d},          // 1/7 per day: at least 1
		{1_000_000_000, 1000, 1e9, s},       // the largest rate
		{1_000_000_000, 7000, 142857143, s}, // rounded, per day would overflow 32 bits
		{50 * 10, 1000 * 100, 5, s},         // a 50% region share of 10/s
	} {
		n, unit := RateUnit(tc.tokens, tc.periodMs)
		if n != tc.n || unit != tc.unit {
			t.Errorf("RateUnit(%d, %d) = %d %v, want %d %v", tc.tokens, tc.periodMs, n, unit, tc.n, tc.unit)
		}
	}
}

// okDecider admits everything; for tests that never reach Redis.
type okDecider struct{}

func (okDecider) Decide(_ context.Context, tenant, route string, cost int64) (decision.Decision, *snapshot.Rule, error) {
	rule := &snapshot.Rule{Tenant: tenant, Route: route, Capacity: 10, RefillTokens: 1, RefillPeriodMs: 1000}
	return decision.Decision{Outcome: limiter.Outcome{Allowed: true, Remaining: 10 - cost}, Limit: 10}, rule, nil
}

func (okDecider) Rule(tenant, route string) *snapshot.Rule {
	return &snapshot.Rule{Tenant: tenant, Route: route, Capacity: 10, RefillTokens: 1, RefillPeriodMs: 1000}
}

func (okDecider) Limits(decision.Request, *snapshot.Rule) ([]decision.Limit, error) { return nil, nil }

func (okDecider) DecideStack(context.Context, decision.Request, []decision.Limit, []int64) (decision.Stacked, error) {
	return decision.Stacked{}, errors.New("okDecider stacks no limits")
}

func TestServerRefusesWithInvalidArgument(t *testing.T) {
	s := New(Options{Decider: okDecider{}})
	for _, r := range []*rlsv3.RateLimitRequest{nil, {}, req("d", 0, nil)} {
		_, err := s.ShouldRateLimit(t.Context(), r)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: got %v, want InvalidArgument", r, err)
		}
	}
}

// FuzzMap: arbitrary domains, keys and values never panic, and whatever is
// accepted maps to valid ids and a cost in [1, MaxCost].
func FuzzMap(f *testing.F) {
	f.Add("edge", "api_key", "shop-a", "generic_key", "create-order", uint32(0), uint64(0), true, false)
	f.Add("", "tenant", "a{b}", "route", "r:1", uint32(5), uint64(2_000_000), false, true)
	f.Add("internal", "tenant", "x", "tenant", "y", uint32(1<<31), uint64(1), false, false)
	f.Add("edge", "api_key", "", "", "", uint32(1), uint64(1), true, true)
	configured := mustDomainsF(f, `
domains:
  - {name: edge, tenantKey: api_key, routeKey: generic_key, defaultRoute: api}
  - {name: internal}
`)
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, reqHits uint32, descHits uint64, setHits, negative bool) {
		d := desc(k1, v1, k2, v2)
		if setHits {
			d.HitsAddend = wrapperspb.UInt64(descHits)
		}
		d.IsNegativeHits = negative
		for _, ds := range []*Domains{nil, configured} {
			r := req(domain, reqHits, d, desc(k2, v2, k1, v1))
			targets, _, err := ds.Map(r)
			if err != nil {
				if _, ok := err.(*requestError); !ok {
					t.Fatalf("error of type %T", err)
				}
				continue
			}
			if len(targets) != 2 {
				t.Fatalf("%d targets for 2 descriptors", len(targets))
			}
			for _, tg := range targets {
				if !v1alpha1.ValidIdentifier(tg.Tenant) || !v1alpha1.ValidIdentifier(tg.Route) {
					t.Fatalf("accepted invalid ids %q %q", tg.Tenant, tg.Route)
				}
				if tg.Cost < 1 || tg.Cost > MaxCost {
					t.Fatalf("cost %d", tg.Cost)
				}
			}
		}
	})
}

func mustDomainsF(f *testing.F, yaml string) *Domains {
	ds, err := ParseDomains([]byte(yaml))
	if err != nil {
		f.Fatal(err)
	}
	return ds
}

// FuzzParseDomains: any file content is either refused with an error or
// yields domains whose keys and default routes are valid.
func FuzzParseDomains(f *testing.F) {
	f.Add("domains: [{name: edge, tenantKey: api_key, routeKey: generic_key, defaultRoute: api}]")
	f.Add("domains: [{name: a}, {name: a}]")
	f.Add("domains:\n- name: x\n  defaultRoute: '{'\n")
	f.Add("{}")
	f.Fuzz(func(t *testing.T, yaml string) {
		ds, err := ParseDomains([]byte(yaml))
		if err != nil {
			return
		}
		for name, d := range ds.byName {
			if name != d.Name || !validName(d.TenantKey) || !validName(d.RouteKey) || d.TenantKey == d.RouteKey ||
				(d.DefaultRoute != "" && !v1alpha1.ValidIdentifier(d.DefaultRoute)) {
				t.Fatalf("accepted an invalid domain %+v", d)
			}
		}
	})
}

// failingDecider stands for a limiter without a failure mode.
type failingDecider struct{ okDecider }

func (failingDecider) Decide(context.Context, string, string, int64) (decision.Decision, *snapshot.Rule, error) {
	return decision.Decision{}, nil, context.DeadlineExceeded
}

func TestServerLimiterErrorIsUnavailable(t *testing.T) {
	s := New(Options{Decider: failingDecider{}})
	_, err := s.ShouldRateLimit(t.Context(), req("d", 0, desc("tenant", "a", "route", "r")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable (Envoy then applies failure_mode_deny)", err)
	}
}

func TestServerChargeWithoutChargerIsUnimplemented(t *testing.T) {
	s := New(Options{Decider: okDecider{}})
	_, err := s.ShouldRateLimit(t.Context(), req("d", 5, desc("tenant", "a", "route", "r", ChargeKey, "")))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("got %v, want Unimplemented", err)
	}
}

// Map is AppendTargets into a new slice.
func (ds *Domains) Map(req *rlsv3.RateLimitRequest) ([]Target, *Domain, error) {
	return ds.AppendTargets(nil, req)
}
