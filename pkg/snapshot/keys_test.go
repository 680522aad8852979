package snapshot

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// keyed is rule(tenant, route, capacity) keyed by parts.
func keyed(tenant, route string, capacity int64, parts ...KeyPart) Rule {
	r := rule(tenant, route, capacity)
	r.By = parts
	return r
}

var (
	byTenant  = KeyPart{Kind: PartTenant}
	byAddress = KeyPart{Kind: PartAddress, V4: 32, V6: 64}
)

// TestLookupKindPrecedence: within one kind the precedence is today's
// (each row removes the winner of the row before); rules of other kinds
// never win another kind's lookup, and Kinds lists the kinds present.
func TestLookupKindPrecedence(t *testing.T) {
	all := []Rule{
		keyed("shop-a", "orders", 1, byTenant),
		keyed("shop-a", "*", 2, byTenant),
		keyed("*", "orders", 3, byTenant),
		keyed("*", "*", 4, byTenant),
	}
	others := []Rule{rule("shop-a", "orders", 100), keyed("shop-a", "orders", 200, byAddress)}
	for n := range all {
		for _, format := range []int{FormatTenant, Format} {
			rules := append(append([]Rule(nil), all[n:]...), others...)
			shards := make([]*Shard, 4)
			for i, part := range PartitionFormat(rules, 4, format) {
				shards[i] = NewShardFormat(format, i, 4, 1, part)
			}
			set, err := NewSet(shards)
			if err != nil {
				t.Fatal(err)
			}
			kind := all[0].Kind()
			if got := set.LookupKind(kind, "shop-a", "orders", nil); got == nil || got.Capacity != all[n].Capacity {
				t.Errorf("row %d format %d: got %+v, want capacity %d", n, format, got, all[n].Capacity)
			}
			if got := set.Lookup("shop-a", "orders"); got.Capacity != 100 {
				t.Errorf("row %d: the default kind's lookup found %+v", n, got)
			}
			if got := set.LookupKind(others[1].Kind(), "shop-b", "orders", nil); got != nil {
				t.Errorf("row %d: shop-b found the address rule of shop-a: %+v", n, got)
			}
			if ks := set.Kinds(); len(ks) != 2 || ks[0] != "address/32/64" || ks[1] != "tenant" {
				t.Errorf("row %d: kinds %q", n, ks)
			}
		}
	}
}

// TestKindNamesAndIDs: the default kind has no id and the request's route
// as its name; other kinds have short stable ids and names of their parts.
func TestKindNamesAndIDs(t *testing.T) {
	cases := []struct {
		r          Rule
		kind, name string
	}{
		{rule("shop-a", "orders", 1), "", "orders"},
		{keyed("*", "*", 1, byTenant), "tenant", "all-by-tenant"},
		{keyed("*", "login", 1, byAddress), "address/32/64", "login-by-address"},
		{keyed("*", "*", 1, KeyPart{Kind: PartHeader, Name: "X-Client-Id"}, KeyPart{Kind: PartMethod}), "header:X-Client-Id,method", "all-by-header-x-client-id-method"},
		{Rule{Tenant: "*", Route: "export", Shared: true}, KindShared, "export-shared"},
	}
	ids := map[string]bool{}
	for _, c := range cases {
		if got := c.r.Kind(); got != c.kind {
			t.Errorf("%+v: kind %q, want %q", c.r, got, c.kind)
		}
		if got := c.r.Name("orders"); got != c.name {
			t.Errorf("%+v: name %q, want %q", c.r, got, c.name)
		}
		id := c.r.KindID()
		if (id == "") != (c.kind == "") || ids[id] {
			t.Errorf("%+v: kind id %q (seen: %v)", c.r, id, ids[id])
		}
		ids[id] = true
		cached := c.r
		cached.cacheKind()
		if cached.Kind() != c.r.Kind() || cached.KindID() != id || cached.Name("orders") != c.name || cached.Identity() != c.r.Identity() {
			t.Errorf("%+v: cached names differ", c.r)
		}
	}
}

// TestCompileConflictsByKind: two rules of one tenant and route conflict
// only when they are of the same kind; by [tenant, route] is the default
// kind.
func TestCompileConflictsByKind(t *testing.T) {
	mk := func(name string, age time.Duration, by ...v1alpha1.KeyPart) v1alpha1.RateLimitRule {
		return v1alpha1.RateLimitRule{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
			Spec:       v1alpha1.RateLimitRuleSpec{Tenant: "*", Route: "login", Capacity: 5, RefillPerSecond: ptr.To[int64](1), By: by},
		}
	}
	addr := v1alpha1.KeyPart{ClientAddress: &v1alpha1.KeyClientAddress{}}
	items := []v1alpha1.RateLimitRule{
		mk("plain", time.Hour),
		mk("explicit-default", time.Minute, v1alpha1.KeyPart{Tenant: &v1alpha1.KeyTenant{}}, v1alpha1.KeyPart{Route: &v1alpha1.KeyRoute{}}),
		mk("per-address", time.Hour, addr),
		mk("per-address-2", time.Minute, addr),
	}
	rules, verdicts := Compile(items)
	if len(rules) != 2 {
		t.Fatalf("%d rules, want 2: %+v", len(rules), rules)
	}
	for i, want := range []bool{true, false, true, false} {
		if verdicts[i].Accepted != want {
			t.Errorf("%s: %+v, want accepted=%v", items[i].Name, verdicts[i], want)
		}
	}
	if m := verdicts[3].Message; !strings.Contains(m, "keyed by address/32/64") || !strings.Contains(m, "a/per-address") {
		t.Errorf("conflict message %q names neither the kind nor the winner", m)
	}
	if r := verdicts[2].Rule; r == nil || len(r.By) != 1 || r.By[0] != byAddress {
		t.Errorf("per-address compiled to %+v, want the default prefixes /32 and /64", r)
	}
}

// TestEncodeDecodeKeyParts: key parts and shared survive a shard's
// encoding, and a shard holding one tenant+route of two kinds decodes.
func TestEncodeDecodeKeyParts(t *testing.T) {
	rules := []Rule{
		rule("*", "login", 1),
		keyed("*", "login", 5, byAddress, KeyPart{Kind: PartHeader, Name: "X-Client-Id"}, KeyPart{Kind: PartPath, Segments: 2}, KeyPart{Kind: PartClaim, Name: "org.id"}),
		{Tenant: "*", Route: "export", Capacity: 50, RefillTokens: 50, RefillPeriodMs: 1000, Shared: true, Source: "ns/export"},
	}
	data, err := NewShard(0, 1, 3, append([]Rule(nil), rules...)).Encode()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	set, err := NewSet([]*Shard{sh})
	if err != nil {
		t.Fatal(err)
	}
	got := set.LookupKind(rules[1].Kind(), "", "login", nil)
	if got == nil || len(got.By) != 4 || got.By[3].Name != "org.id" || got.By[2].Segments != 2 {
		t.Errorf("decoded %+v", got)
	}
	if got := set.LookupKind(KindShared, "x", "export", nil); got == nil || !got.Shared || got.Identity() != rules[2].Identity() {
		t.Errorf("shared rule decoded as %+v", got)
	}
}

// TestValidateBy: the bounds of key parts, each with its message.
func TestValidateBy(t *testing.T) {
	cases := []struct {
		by   []KeyPart
		want string
	}{
		{[]KeyPart{{Kind: PartAddress, V4: 7, V6: 64}}, "prefix lengths"},
		{[]KeyPart{{Kind: PartAddress, V4: 32, V6: 129}}, "prefix lengths"},
		{[]KeyPart{{Kind: PartHeader, Name: "Authorization"}}, "credential"},
		{[]KeyPart{{Kind: PartHeader, Name: "x-client-id"}}, "canonical"},
		{[]KeyPart{{Kind: PartPath, Segments: 17}}, "segments"},
		{[]KeyPart{{Kind: PartClaim, Name: "a..b"}}, "claim path"},
		{[]KeyPart{byTenant, byTenant}, "twice"},
		{[]KeyPart{byAddress, {Kind: PartAddress, V4: 24, V6: 48}}, "twice"},
		{[]KeyPart{{Kind: 99}}, "unknown"},
	}
	for _, c := range cases {
		r := keyed("*", "login", 5, c.by...)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.by, err, c.want)
		}
	}
	r := keyed("*", "login", 5, byAddress)
	r.MaxInFlight = 3
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "concurrency") {
		t.Errorf("by with concurrency: %v", err)
	}
}
