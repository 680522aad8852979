package snapshot

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// claimSet is a token's claims for these tests: path -> values.
type claimSet map[string][]string

func (c claimSet) ClaimValue(path string) (string, bool) {
	if vs := c[path]; len(vs) == 1 {
		return vs[0], true
	}
	return "", false
}

func (c claimSet) HasClaim(path, value string) bool {
	for _, v := range c[path] {
		if v == value {
			return true
		}
	}
	return false
}

// claimed is a rule of tenant "*" on route with claims (path, value, ...).
func claimed(route string, capacity int64, kv ...string) Rule {
	r := Rule{Tenant: "*", Route: route, Capacity: capacity, RefillTokens: 1, RefillPeriodMs: 1000}
	for i := 0; i < len(kv); i += 2 {
		r.Claims = append(r.Claims, ClaimMatch{Path: kv[i], Value: kv[i+1]})
	}
	return r
}

// TestLookupClaimsPrecedence walks the whole precedence order: each row
// removes the rule that won the row before, so every step is seen winning.
func TestLookupClaimsPrecedence(t *testing.T) {
	all := []Rule{
		rule("shop-a", "orders", 1),
		rule("shop-a", "*", 2),
		claimed("orders", 3, "plan", "gold", "region", "eu"), // more claims: before the next
		claimed("orders", 4, "plan", "gold"),
		claimed("orders", 5, "tier", "a"), // ties with plan=gold: "plan=gold" sorts first
		claimed("*", 6, "plan", "gold"),
		rule("*", "orders", 7),
		rule("*", "*", 8),
	}
	gold := claimSet{"plan": {"gold"}, "region": {"eu"}, "tier": {"a"}}
	for n := range all {
		for _, format := range []int{FormatTenant, Format} {
			for _, count := range []int{1, 4} {
				rules := append([]Rule(nil), all[n:]...)
				shards := make([]*Shard, count)
				for i, part := range PartitionFormat(rules, count, format) {
					shards[i] = NewShardFormat(format, i, count, 1, part)
				}
				set, err := NewSet(shards)
				if err != nil {
					t.Fatal(err)
				}
				got := set.LookupClaims("shop-a", "orders", gold)
				if got == nil || got.Capacity != all[n].Capacity {
					t.Errorf("without the first %d rules (format %d, %d shards): got %+v, want capacity %d", n, format, count, got, all[n].Capacity)
				}
			}
		}
	}
}

// TestLookupClaimsMatching: a claims rule needs every claim, never applies
// without claims (an API key, the Envoy path), and a tenant's own rule
// beats it.
func TestLookupClaimsMatching(t *testing.T) {
	set := Build([]Rule{
		claimed("orders", 3, "plan", "gold", "region", "eu"),
		claimed("orders", 4, "plan", "gold"),
		claimed("*", 5, "plan", "silver"),
		rule("shop-b", "*", 9),
		rule("*", "*", 1),
	}, 1)
	cases := []struct {
		name   string
		tenant string
		claims Claims
		want   int64
	}{
		{"both claims", "shop-a", claimSet{"plan": {"gold"}, "region": {"eu", "us"}}, 3},
		{"one of two claims", "shop-a", claimSet{"plan": {"gold"}, "region": {"us"}}, 4},
		{"route * claims rule", "shop-a", claimSet{"plan": {"silver"}}, 5},
		{"no matching claim", "shop-a", claimSet{"plan": {"bronze"}}, 1},
		{"no claims at all", "shop-a", nil, 1},
		{"a tenant's own rule wins", "shop-b", claimSet{"plan": {"gold"}}, 9},
	}
	for _, c := range cases {
		if got := set.LookupClaims(c.tenant, "orders", c.claims); got.Capacity != c.want {
			t.Errorf("%s: capacity %d, want %d", c.name, got.Capacity, c.want)
		}
	}
	if got := set.Lookup("shop-a", "orders"); got.Capacity != 1 {
		t.Errorf("Lookup ignores claims rules: got capacity %d", got.Capacity)
	}
	if !set.HasClaimRules() || Build([]Rule{rule("*", "*", 1)}, 1).HasClaimRules() {
		t.Error("HasClaimRules wrong")
	}
}

// TestClaimRulesRoundTrip: claims survive encoding and decoding, two rules
// of one tenant and route with different claims coexist, equal ones are a
// duplicate.
func TestClaimRulesRoundTrip(t *testing.T) {
	rules := []Rule{claimed("orders", 4, "plan", "gold"), claimed("orders", 5, "plan", "silver"), rule("*", "orders", 6)}
	sh := NewShard(0, 1, 3, rules)
	data, err := sh.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Checksum != sh.Checksum || len(back.Rules) != 3 {
		t.Fatalf("round trip changed the shard: %+v", back.Rules)
	}
	set, _ := NewSet([]*Shard{back})
	if got := set.LookupClaims("t", "orders", claimSet{"plan": {"silver"}}); got.Capacity != 5 {
		t.Errorf("decoded silver rule: capacity %d", got.Capacity)
	}
	dup := NewShard(0, 1, 3, []Rule{claimed("orders", 4, "plan", "gold"), claimed("orders", 7, "plan", "gold")})
	data, _ = dup.Encode()
	if _, err := Decode(data); err == nil || !strings.Contains(err.Error(), "duplicate") || !strings.Contains(err.Error(), "plan=gold") {
		t.Errorf("duplicate claims rule: err %v", err)
	}
}

func TestValidateClaims(t *testing.T) {
	cases := []struct {
		name string
		r    Rule
		err  string
	}{
		{"ok", claimed("orders", 1, "org.plan", "gold", "roles", "admin"), ""},
		{"tenant not *", func() Rule { r := claimed("orders", 1, "plan", "gold"); r.Tenant = "shop-a"; return r }(), `claims need tenant "*"`},
		{"unsorted", claimed("orders", 1, "z", "1", "a", "2"), "not sorted"},
		{"twice", claimed("orders", 1, "a", "1", "a", "2"), "twice"},
		{"empty name", claimed("orders", 1, "org..plan", "gold"), "path"},
		{"control character", claimed("orders", 1, "plan", "go\nld"), "value"},
		{"too many", claimed("orders", 1, "a", "1", "b", "1", "c", "1", "d", "1", "e", "1", "f", "1", "g", "1", "h", "1", "i", "1"), "at most 8"},
	}
	for _, c := range cases {
		err := c.r.Validate()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
	}
}

// TestCompileClaims: spec.match.claims compiles sorted, and only an equal
// claims set conflicts.
func TestCompileClaims(t *testing.T) {
	item := func(name, plan string, extra map[string]string) v1alpha1.RateLimitRule {
		claims := map[string]string{"plan": plan}
		for k, v := range extra {
			claims[k] = v
		}
		r := v1alpha1.RateLimitRule{Spec: v1alpha1.RateLimitRuleSpec{Tenant: "*", Route: "orders", Capacity: 10, RefillPerSecond: ptr.To[int64](1),
			Match: &v1alpha1.RuleMatch{Claims: claims}}}
		r.Namespace, r.Name = "ns", name
		return r
	}
	rules, verdicts := Compile([]v1alpha1.RateLimitRule{
		item("a", "gold", map[string]string{"region": "eu"}),
		item("b", "gold", nil),
		item("c", "gold", nil),
		item("d", "silver", nil),
	})
	if len(rules) != 3 {
		t.Fatalf("%d rules, want 3: %+v", len(rules), verdicts)
	}
	if got := rules[0].Claims; len(got) != 2 || got[0].Path != "plan" || got[1].Path != "region" {
		t.Errorf("claims not sorted: %+v", got)
	}
	if v := verdicts[2]; v.Accepted || v.Reason != v1alpha1.ReasonConflict || !strings.Contains(v.Message, "plan=gold") || !strings.Contains(v.Message, "ns/b") {
		t.Errorf("equal claims: %+v", v)
	}
}
