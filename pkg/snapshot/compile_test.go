package snapshot

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

func TestFromSpec(t *testing.T) {
	base := func() v1alpha1.RateLimitRuleSpec {
		return v1alpha1.RateLimitRuleSpec{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillPerSecond: ptr.To[int64](100)}
	}
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RateLimitRuleSpec)
		want   Rule   // compared when err is ""
		err    string // substring of the error
	}{
		{"per second", func(*v1alpha1.RateLimitRuleSpec) {},
			Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r"}, ""},
		{"10 per minute", func(s *v1alpha1.RateLimitRuleSpec) {
			s.RefillPerSecond, s.Refill = nil, &v1alpha1.Refill{Tokens: 10, Period: metav1.Duration{Duration: time.Minute}}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 10, RefillPeriodMs: 60_000, Source: "ns/r"}, ""},
		{"shadow, fail closed, hot key, regions", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Mode, s.FailureMode = v1alpha1.ModeShadow, v1alpha1.FailureClosed
			s.HotKey = &v1alpha1.HotKey{Prefetch: v1alpha1.PrefetchAuto, ErrorBudgetPercent: 3, Shards: 4}
			s.Regions = []v1alpha1.RegionShare{{Name: "eu", Percent: 70}, {Name: "us", Percent: 30}}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r",
			Shadow: true, FailureMode: FailClosed, Prefetch: PrefetchAuto, ErrorBudgetPercent: 3, Shards: 4,
			Regions: []RegionShare{{"eu", 70}, {"us", 30}}}, ""},
		{"fixed batch", func(s *v1alpha1.RateLimitRuleSpec) {
			s.HotKey = &v1alpha1.HotKey{Prefetch: v1alpha1.PrefetchFixed, Batch: ptr.To[int32](50)}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r",
			Prefetch: PrefetchFixed, Batch: 50}, ""},
		{"no rate", func(s *v1alpha1.RateLimitRuleSpec) { s.RefillPerSecond = nil }, Rule{}, "exactly one"},
		{"match claims", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Tenant, s.Match = "*", &v1alpha1.RuleMatch{Claims: map[string]string{"plan": "gold", "org.tier": "1"}}
		}, Rule{Tenant: "*", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r",
			Claims: []ClaimMatch{{"org.tier", "1"}, {"plan", "gold"}}}, ""},
		{"match without claims (a file: no API server refuses it)", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Tenant, s.Match = "*", &v1alpha1.RuleMatch{}
		}, Rule{}, "at least one claim"},
		{"match for one tenant", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Match = &v1alpha1.RuleMatch{Claims: map[string]string{"plan": "gold"}}
		}, Rule{}, `claims need tenant "*"`},
		{"regions not adding up", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Regions = []v1alpha1.RegionShare{{Name: "eu", Percent: 70}}
		}, Rule{}, "add up to 70"},
		{"more shards than capacity", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Capacity, s.HotKey = 2, &v1alpha1.HotKey{Shards: 4}
		}, Rule{}, "less than shards"},
		{"region share below one token per shard", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Capacity, s.HotKey = 4, &v1alpha1.HotKey{Shards: 4}
			s.Regions = []v1alpha1.RegionShare{{Name: "eu", Percent: 50}, {Name: "us", Percent: 50}}
		}, Rule{}, "less than one token per shard"},
		{"concurrency", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Concurrency = &v1alpha1.Concurrency{MaxInFlight: 5, LeaseSeconds: 30}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r",
			MaxInFlight: 5, MaxInFlightLeaseMs: 30_000}, ""},
		{"concurrency with the default lease (a file: no API server defaults it)", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Concurrency = &v1alpha1.Concurrency{MaxInFlight: 1}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r",
			MaxInFlight: 1}, ""},
		{"maxInFlight 0", func(s *v1alpha1.RateLimitRuleSpec) { s.Concurrency = &v1alpha1.Concurrency{} }, Rule{}, "spec.concurrency.maxInFlight 0"},
		{"maxInFlight too large", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Concurrency = &v1alpha1.Concurrency{MaxInFlight: MaxMaxInFlight + 1}
		}, Rule{}, "maxInFlight 100001 out of range"},
		{"lease too long", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Concurrency = &v1alpha1.Concurrency{MaxInFlight: 5, LeaseSeconds: 3601}
		}, Rule{}, "lease 3601000ms out of range"},
		{"negative lease", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Concurrency = &v1alpha1.Concurrency{MaxInFlight: 5, LeaseSeconds: -1}
		}, Rule{}, "lease -1000ms out of range"},
		{"region share below one request", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Concurrency = &v1alpha1.Concurrency{MaxInFlight: 3}
			s.Regions = []v1alpha1.RegionShare{{Name: "eu", Percent: 70}, {Name: "us", Percent: 30}}
		}, Rule{}, `region "us" gets 30% of maxInFlight 3, less than one request`},
		{"header cost and response cost from a JSON field", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Cost = &v1alpha1.Cost{
				Request:  &v1alpha1.RequestCost{Header: "X-Cost", Default: ptr.To[int64](2), Max: ptr.To[int64](50)},
				Response: &v1alpha1.ResponseCost{JSONField: "usage.total_tokens", OnError: ptr.To[int64](3)},
			}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r",
			Cost: &Cost{Header: "X-Cost", Default: 2, Max: 50, Response: &ResponseCost{JSONField: "usage.total_tokens", OnError: 3, MaxDebt: 200}}}, ""},
		{"response cost alone costs one token up front", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Cost = &v1alpha1.Cost{Response: &v1alpha1.ResponseCost{Header: "X-Usage-Tokens", MaxDebt: ptr.To[int64](0)}}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r",
			Cost: &Cost{Fixed: 1, Response: &ResponseCost{Header: "X-Usage-Tokens"}}}, ""},
		{"onClientGone compiled, 0 kept", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Cost = &v1alpha1.Cost{Response: &v1alpha1.ResponseCost{JSONField: "usage.total_tokens", Default: ptr.To[int64](9), OnClientGone: ptr.To[int64](0)}}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, Source: "ns/r",
			Cost: &Cost{Fixed: 1, Response: &ResponseCost{JSONField: "usage.total_tokens", Default: 9, OnClientGone: ptr.To[int64](0), MaxDebt: 200}}}, ""},
		{"onClientGone above max", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Cost = &v1alpha1.Cost{Response: &v1alpha1.ResponseCost{Header: "X-Usage", Max: ptr.To[int64](10), OnClientGone: ptr.To[int64](11)}}
		}, Rule{}, "onClientGone 11 must be in [0, max 10]"},
		{"fixed cost above capacity", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Cost = &v1alpha1.Cost{Request: &v1alpha1.RequestCost{Fixed: ptr.To[int64](201)}}
		}, Rule{}, "cost fixed 201 out of range"},
		{"response cost with shards", func(s *v1alpha1.RateLimitRuleSpec) {
			s.HotKey = &v1alpha1.HotKey{Shards: 4}
			s.Cost = &v1alpha1.Cost{Response: &v1alpha1.ResponseCost{Header: "X-Usage"}}
		}, Rule{}, "cannot be combined with prefetch or shards"},
		{"unknown failure mode", func(s *v1alpha1.RateLimitRuleSpec) { s.FailureMode = "Maybe" }, Rule{}, "failureMode"},
		// The schema's bound on the refill time (issue 27), for objects
		// stored before it and rule files.
		{"a billion tokens refilled one a day", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Capacity, s.RefillPerSecond, s.Refill = 1_000_000_000, nil, &v1alpha1.Refill{Tokens: 1, Period: metav1.Duration{Duration: 24 * time.Hour}}
		}, Rule{}, v1alpha1.MessageRefillTooSlow + " (this one: 86400000000000 seconds)"},
		{"a debt that takes over 2^53 ms to refill", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Capacity, s.RefillPerSecond, s.Refill = 7_446_427, nil, &v1alpha1.Refill{Tokens: 1, Period: metav1.Duration{Duration: 168 * time.Hour}}
			s.Cost = &v1alpha1.Cost{Response: &v1alpha1.ResponseCost{Header: "X-Usage", MaxDebt: ptr.To[int64](7_446_429)}}
		}, Rule{}, v1alpha1.MessageRefillTooSlow},
		{"just under 2^53 ms, with regions and shards", func(s *v1alpha1.RateLimitRuleSpec) {
			s.Capacity, s.RefillPerSecond, s.Refill = 14_892_855, nil, &v1alpha1.Refill{Tokens: 1, Period: metav1.Duration{Duration: 168 * time.Hour}}
			s.HotKey = &v1alpha1.HotKey{Shards: 64}
			s.Regions = []v1alpha1.RegionShare{{Name: "eu", Percent: 99}, {Name: "us", Percent: 1}}
		}, Rule{Tenant: "shop-a", Route: "create-order", Capacity: 14_892_855, RefillTokens: 1, RefillPeriodMs: 604_800_000, Source: "ns/r",
			Shards: 64, Regions: []RegionShare{{"eu", 99}, {"us", 1}}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := base()
			c.mutate(&spec)
			got, err := FromSpec(&spec, "ns/r")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, %v\nwant %+v", got, err, c.want)
			}
		})
	}
}

func TestCompileConflicts(t *testing.T) {
	mk := func(ns, name string, age time.Duration, tenant string) v1alpha1.RateLimitRule {
		return v1alpha1.RateLimitRule{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
			Spec:       v1alpha1.RateLimitRuleSpec{Tenant: tenant, Route: "r", Capacity: 1, RefillPerSecond: ptr.To[int64](1)},
		}
	}
	items := []v1alpha1.RateLimitRule{
		mk("b", "young", time.Minute, "x"),
		mk("a", "old", time.Hour, "x"),
		mk("c", "tie-2", 0, "y"),
		mk("c", "tie-1", 0, "y"),
		mk("d", "alone", 0, "z"),
	}
	rules, verdicts := Compile(items)
	if len(rules) != 3 {
		t.Fatalf("%d rules, want 3", len(rules))
	}
	want := []struct {
		accepted bool
		winner   string
	}{{false, "an older RateLimitRule in another namespace"}, {true, ""}, {false, "the older RateLimitRule c/tie-1"}, {true, ""}, {true, ""}}
	for i, w := range want {
		v := verdicts[i]
		if v.Accepted != w.accepted || (w.winner != "" && !strings.Contains(v.Message, w.winner)) {
			t.Errorf("%s: %+v, want accepted=%v winner %q", items[i].Name, v, w.accepted, w.winner)
		}
		if strings.Contains(v.Message, "a/old") {
			t.Errorf("%s: the message names a rule of another namespace: %s", items[i].Name, v.Message)
		}
		if v.Accepted && v.Rule == nil {
			t.Errorf("%s: accepted without a rule", items[i].Name)
		}
	}
}

func TestInFlightLimit(t *testing.T) {
	r := Rule{MaxInFlight: 7, Regions: []RegionShare{{"eu", 70}, {"us", 30}}}
	for _, c := range []struct {
		region string
		want   int64
	}{{"", 7}, {"eu", 4}, {"us", 2}, {"ap", 7}} {
		if got := r.InFlightLimit(c.region); got != c.want {
			t.Errorf("InFlightLimit(%q) = %d, want %d", c.region, got, c.want)
		}
	}
	if got := (&Rule{}).InFlightLimit(""); got != 0 {
		t.Errorf("a rule without concurrency: limit %d, want 0", got)
	}
	if got := (&Rule{MaxInFlight: 1}).Lease(); got != 10*time.Second {
		t.Errorf("default lease %v, want 10s", got)
	}
}

// TestRefillTimeOfEveryBucket: a rule just under the bound on the refill
// time keeps it in every bucket a gateway makes of it: a region's share
// and a shard divide capacity and rate alike.
func TestRefillTimeOfEveryBucket(t *testing.T) {
	r := Rule{Tenant: "t", Route: "r", Capacity: 14_892_855, RefillTokens: 1, RefillPeriodMs: 604_800_000,
		Shards: 64, Regions: []RegionShare{{"eu", 99}, {"us", 1}}}
	if got := r.FullRefillSeconds(); got != 9_007_198_704_000 || got > v1alpha1.MaxRefillSeconds {
		t.Fatalf("FullRefillSeconds = %d, want 9007198704000, under %d", got, v1alpha1.MaxRefillSeconds)
	}
	for _, region := range []string{"", "eu", "us"} {
		tokens, periodMs := r.RegionRefill(region)
		// A shard: capacity / shards, period x shards (decision.Engine).
		capacity := r.RegionCapacity(region) / float64(r.Shards)
		periodMs *= int64(r.Shards)
		if ms := capacity * float64(periodMs) / float64(tokens); ms > v1alpha1.MaxRefillSeconds*1000 {
			t.Errorf("region %q: a shard refills in %.0f ms, over the bound", region, ms)
		}
	}
}

// TestDecodeKeepsASlowRule: a shard that an older controller published with
// a rule over the refill bound still decodes (the scripts handle it); only
// compiling refuses the rule.
func TestDecodeKeepsASlowRule(t *testing.T) {
	slow := Rule{Tenant: "a", Route: "x", Capacity: 1_000_000_000, RefillTokens: 1, RefillPeriodMs: 86_400_000}
	cm, err := NewShard(0, 1, 3, []Rule{slow}).ConfigMap("ns", "tollgate-rules")
	if err != nil {
		t.Fatal(err)
	}
	back, err := FromConfigMap(cm)
	if err != nil || len(back.Rules) != 1 || back.Rules[0].RefillPeriodMs != slow.RefillPeriodMs {
		t.Fatalf("decoded %+v, %v; want the shard with its rule", back, err)
	}
}

// TestClientGone: onClientGone when set (0 included), else the default.
func TestClientGone(t *testing.T) {
	for _, c := range []struct {
		rc   ResponseCost
		want int64
	}{
		{ResponseCost{Default: 5}, 5},
		{ResponseCost{Default: 5, OnClientGone: ptr.To[int64](0)}, 0},
		{ResponseCost{Default: 5, OnError: 1, OnClientGone: ptr.To[int64](7)}, 7},
	} {
		if got := c.rc.ClientGone(); got != c.want {
			t.Errorf("%+v: ClientGone %d, want %d", c.rc, got, c.want)
		}
	}
}
