package snapshot

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func rule(tenant, route string, capacity int64) Rule {
	return Rule{Tenant: tenant, Route: route, Capacity: capacity, RefillTokens: 10, RefillPeriodMs: 1000}
}

func buildSet(t *testing.T, count int, version int64, rules ...Rule) *Set {
	t.Helper()
	var shards []*Shard
	for i, part := range Partition(rules, count) {
		shards = append(shards, NewShard(i, count, version, part))
	}
	s, err := NewSet(shards)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLookupPrecedence(t *testing.T) {
	set := buildSet(t, 4, 1,
		rule("shop-a", "create-order", 1),
		rule("shop-a", "*", 2),
		rule("*", "create-order", 3),
		rule("*", "*", 4),
		rule("shop-b", "list", 5),
	)
	cases := []struct {
		tenant, route string
		want          int64 // capacity of the expected rule; 0 = no rule
	}{
		{"shop-a", "create-order", 1}, // exact
		{"shop-a", "list", 2},         // tenant + *
		{"shop-c", "create-order", 3}, // * + route
		{"shop-c", "list", 4},         // * + *
		{"shop-b", "list", 5},         // exact in another shard
		{"shop-b", "create-order", 3}, // * + route beats * + *
	}
	for _, c := range cases {
		got := set.Lookup(c.tenant, c.route)
		if got == nil || got.Capacity != c.want {
			t.Errorf("Lookup(%s, %s) = %+v, want capacity %d", c.tenant, c.route, got, c.want)
		}
	}
	if r := buildSet(t, 2, 1, rule("x", "y", 1)).Lookup("a", "b"); r != nil {
		t.Errorf("no default rule: got %+v, want nil", r)
	}
}

func TestRoundTripThroughConfigMap(t *testing.T) {
	rules := make([]Rule, 0, 3000)
	for i := range 3000 {
		rules = append(rules, rule(fmt.Sprintf("tenant-%d", i), "route", int64(i+1)))
	}
	count := ShardCount(len(rules), 0)
	var decoded []*Shard
	for i, part := range Partition(rules, count) {
		sh := NewShard(i, count, 7, part)
		cm, err := sh.ConfigMap("ns", "tollgate-rules")
		if err != nil {
			t.Fatal(err)
		}
		if cm.Name != ConfigMapName("tollgate-rules", i, count) || cm.Labels[LabelSnapshot] != "tollgate-rules" {
			t.Fatalf("unexpected name/labels %s %v", cm.Name, cm.Labels)
		}
		back, err := FromConfigMap(cm)
		if err != nil {
			t.Fatal(err)
		}
		if back.Checksum != sh.Checksum || len(back.Rules) != len(sh.Rules) || back.Version != 7 {
			t.Fatalf("shard %d changed in the round trip", i)
		}
		decoded = append(decoded, back)
	}
	set, err := Select(decoded)
	if err != nil {
		t.Fatal(err)
	}
	if set.Len() != len(rules) || set.Version() != 7 {
		t.Fatalf("Len %d Version %d", set.Len(), set.Version())
	}
	if r := set.Lookup("tenant-1234", "route"); r == nil || r.Capacity != 1235 {
		t.Fatalf("lookup after round trip: %+v", r)
	}
}

func TestShardCount(t *testing.T) {
	cases := []struct {
		rules, current, want int
	}{
		{0, 0, 1},
		{1, 0, 1},
		{TargetRulesPerShard, 0, 1},
		{TargetRulesPerShard + 1, 0, 2},
		{20_000, 0, 8},
		{100_000, 0, 32},
		{100, 8, 1},       // far too many shards: shrink
		{9_000, 4, 4},     // still fits: keep
		{9_000, 8, 8},     // within hysteresis: keep
		{17_000, 4, 8},    // grew past the target: grow
		{100_000, 64, 64}, // keep while under four times the need
	}
	for _, c := range cases {
		if got := ShardCount(c.rules, c.current); got != c.want {
			t.Errorf("ShardCount(%d, %d) = %d, want %d", c.rules, c.current, got, c.want)
		}
	}
}

func TestSelectPicksNewestCompleteLayout(t *testing.T) {
	rules := []Rule{rule("a", "r", 1), rule("b", "r", 2), rule("c", "r", 3)}
	old := Partition(rules, 2)
	next := Partition(rules, 4)
	var shards []*Shard
	for i, p := range old {
		shards = append(shards, NewShard(i, 2, 5, p))
	}
	// The new layout is only partly written: the old one must be used.
	shards = append(shards, NewShard(0, 4, 6, next[0]))
	set, err := Select(shards)
	if err != nil || set.Count() != 2 {
		t.Fatalf("partial new layout: got %v, %v; want the 2-shard layout", set, err)
	}
	for i := 1; i < 4; i++ {
		shards = append(shards, NewShard(i, 4, 6, next[i]))
	}
	set, err = Select(shards)
	if err != nil || set.Count() != 4 || set.Version() != 6 {
		t.Fatalf("complete new layout: got %v, %v; want the 4-shard layout", set, err)
	}
	if _, err := Select(shards[2:3]); err == nil {
		t.Fatal("an incomplete layout alone must be an error")
	}
}

func gz(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return b.Bytes()
}

func TestDecodeRejectsMalformed(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		want string // substring of the error
	}{
		{"not gzip", []byte("hello"), "not gzip"},
		{"not json", gz("{"), "decoding shard JSON"},
		{"unknown field", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[],"x":1}`), "unknown field"},
		{"wrong format", gz(`{"format":3,"index":0,"count":1,"version":1,"rules":[]}`), "format 3"},
		{"count not power of two", gz(`{"format":1,"index":0,"count":3,"version":1,"rules":[]}`), "power of two"},
		{"index out of range", gz(`{"format":1,"index":4,"count":4,"version":1,"rules":[]}`), "out of range"},
		{"negative version", gz(`{"format":1,"index":0,"count":1,"version":-1,"rules":[]}`), "out of range"},
		{"version over MaxVersion", gz(`{"format":1,"index":0,"count":1,"version":9223372036854775807,"rules":[]}`), "out of range"},
		{"bad tenant", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a:b","r":"x","c":1,"n":1,"p":1000}]}`), "tenant"},
		{"zero capacity", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":0,"n":1,"p":1000}]}`), "capacity"},
		{"short period", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":10}]}`), "period"},
		{"negative maxInFlight", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"mi":-1}]}`), "maxInFlight"},
		{"lease without maxInFlight", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"mil":5000}]}`), "lease without maxInFlight"},
		{"short lease", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"mi":2,"mil":10}]}`), "lease 10ms"},
		{"duplicate", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000},{"t":"a","r":"x","c":2,"n":1,"p":1000}]}`), "duplicate"},
		{"wrong shard", gz(fmt.Sprintf(`{"format":1,"index":%d,"count":2,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000}]}`, 1-tenantShardIndex("a", 2))), "belongs in shard"},
		{"wrong shard, format 2", gz(fmt.Sprintf(`{"format":2,"index":%d,"count":2,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000}]}`, 1-ShardIndex("a", "x", 2))), "belongs in shard"},
		{"cost with neither fixed nor header", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"co":{}}]}`), "exactly one of fixed and header"},
		{"cost header with CR LF", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"co":{"h":"X\r\nY"}}]}`), "not a valid header name"},
		{"negative response default", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"co":{"f":1,"r":{"h":"U","d":-1}}}]}`), "default -1"},
		{"negative onClientGone", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"co":{"f":1,"r":{"h":"U","g":-1}}}]}`), "onClientGone -1"},
		{"huge debt", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"co":{"f":1,"r":{"h":"U","x":9000000000000}}}]}`), "maxDebt"},
		{"response cost from nothing", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"co":{"f":1,"r":{}}}]}`), "exactly one of header and jsonField"},
		{"json path too deep", gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[{"t":"a","r":"x","c":1,"n":1,"p":1000,"co":{"f":1,"r":{"j":"` + strings.Repeat("a.", 16) + `a"}}}]}`), "1 to 16 keys"},
		{"zip bomb", gz(`{"format":1,"rules":"` + strings.Repeat("a", MaxDecodedBytes) + `"}`), "more than"},
	}
	// A valid shard padded with 40 MiB of JSON whitespace: about 40 KiB
	// compressed, well under MaxShardBytes, yet 80 times what the writer
	// ever produces uncompressed.
	bomb := gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[]}` + strings.Repeat(" ", 40<<20))
	if len(bomb) > MaxShardBytes {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	cases = append(cases, struct {
		name string
		data []byte
		want string
	}{"valid JSON inflating past the writer's bound", bomb, "more than"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.data)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestFromConfigMapChecksAnnotations(t *testing.T) {
	sh := NewShard(0, 1, 3, []Rule{rule("a", "b", 1)})
	mutate := map[string]func(m map[string]string){
		"version":  func(m map[string]string) { m[AnnotationVersion] = "4" },
		"count":    func(m map[string]string) { m[AnnotationCount] = "2" },
		"checksum": func(m map[string]string) { m[AnnotationChecksum] = "deadbeef" },
	}
	for name, f := range mutate {
		cm, err := sh.ConfigMap("ns", "p")
		if err != nil {
			t.Fatal(err)
		}
		f(cm.Annotations)
		if _, err := FromConfigMap(cm); err == nil {
			t.Errorf("%s annotation mismatch accepted", name)
		}
	}
	cm, _ := sh.ConfigMap("ns", "p")
	cm.Name = "p-0-of-2"
	if _, err := FromConfigMap(cm); err == nil {
		t.Error("name that disagrees with the payload accepted")
	}
	delete(cm.BinaryData, DataKey)
	if _, err := FromConfigMap(cm); err == nil {
		t.Error("missing data accepted")
	}
}

func TestConfigMapTooLarge(t *testing.T) {
	// Random-looking tenants compress badly; enough of them overflow a shard.
	var rules []Rule
	for i := range 40_000 {
		rules = append(rules, rule(fmt.Sprintf("t%x", uint64(i)*0x9E3779B97F4A7C15), fmt.Sprintf("r%x", uint64(i)*0xBF58476D1CE4E5B9), int64(i+1)))
	}
	_, err := NewShard(0, 1, 1, rules).ConfigMap("ns", "p")
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := NewShard(0, 1, 1, []Rule{rule("a", "b", 1), rule("*", "*", 2)}).Encode()
	f.Add(good)
	f.Add(gz(`{"format":1,"index":0,"count":1,"version":1,"rules":[]}`))
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, data []byte) {
		sh, err := Decode(data)
		if err != nil {
			return
		}
		// Whatever decodes is valid and round-trips.
		for i := range sh.Rules {
			if err := sh.Rules[i].Validate(); err != nil {
				t.Fatalf("decoded an invalid rule: %v", err)
			}
		}
		again, err := sh.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(again)
		if err != nil || back.Checksum != sh.Checksum {
			t.Fatalf("re-encoded shard does not decode the same: %v", err)
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	var rules []Rule
	for i := range 100_000 {
		rules = append(rules, rule(fmt.Sprintf("tenant-%d", i), "route", 10))
	}
	rules = append(rules, rule("*", "*", 5))
	count := ShardCount(len(rules), 0)
	var shards []*Shard
	for i, p := range Partition(rules, count) {
		shards = append(shards, NewShard(i, count, 1, p))
	}
	set, _ := NewSet(shards)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if set.Lookup("tenant-4242", "other") == nil {
			b.Fatal("no rule")
		}
	}
}

// The hand-written encoder must agree with encoding/json for any rule.
func FuzzAppendRule(f *testing.F) {
	f.Add("shop-a", "create-order", int64(200), int64(100), int64(1000), false, uint8(0), "ns/name")
	f.Add("a\"b\\c\x00\x7f\xff", "é\u2028", int64(-1), int64(0), int64(1<<62), true, uint8(2), "")
	f.Fuzz(func(t *testing.T, tenant, route string, c, n, p int64, shadow bool, fm uint8, src string) {
		r := Rule{Tenant: tenant, Route: route, Capacity: c, RefillTokens: n, RefillPeriodMs: p, Shadow: shadow, FailureMode: FailureMode(fm), Source: src,
			Prefetch: PrefetchMode(fm % 3), Batch: int32(c), ErrorBudgetPercent: int32(n), Shards: int32(p),
			MaxInFlight: int32(n), MaxInFlightLeaseMs: c,
			QuotaLimit: n, QuotaPeriod: QuotaPeriod(fm), QuotaZone: route}
		if shadow {
			r.Regions = []RegionShare{{Name: route, Percent: int32(c)}, {Name: src, Percent: 1}}
			r.Cost = &Cost{Fixed: c, Header: tenant, Max: n, Response: &ResponseCost{JSONField: route, MaxDebt: p, OnClientGone: &n}}
			r.Claims = []ClaimMatch{{Path: tenant, Value: src}, {Path: route, Value: tenant}}
		}
		var back Rule
		if err := json.Unmarshal(appendRule(nil, &r), &back); err != nil {
			t.Fatalf("invalid JSON for %+v: %v", r, err)
		}
		want, _ := json.Marshal(r)
		var viaStd Rule
		_ = json.Unmarshal(want, &viaStd)
		if !reflect.DeepEqual(back, viaStd) {
			t.Fatalf("appendRule decodes to %+v, encoding/json to %+v", back, viaStd)
		}
	})
}

func TestParseConfigMapName(t *testing.T) {
	for _, c := range []struct {
		name         string
		index, count int
		ok           bool
	}{
		{"rules-0-of-1", 0, 1, true},
		{"rules-3-of-4", 3, 4, true},
		{"rules-4-of-4", 0, 0, false},
		{"rules-0-of-3", 0, 0, false},
		{"rules-01-of-4", 0, 0, false},
		{"rules-0-of-8192", 0, 0, false},
		{"rules-x-0-of-1", 0, 0, false},
		{"other-0-of-1", 0, 0, false},
		{"rules-0-of-1-backup", 0, 0, false},
		{"rules", 0, 0, false},
	} {
		i, n, ok := ParseConfigMapName("rules", c.name)
		if i != c.index || n != c.count || ok != c.ok {
			t.Errorf("ParseConfigMapName(rules, %q) = %d, %d, %v; want %d, %d, %v", c.name, i, n, ok, c.index, c.count, c.ok)
		}
		if ok && ConfigMapName("rules", i, n) != c.name {
			t.Errorf("%q does not round-trip", c.name)
		}
	}
}

// TestOwned is the rule both halves apply to a ConfigMap carrying the
// snapshot label: the controller updates and deletes only what it owns, and
// gateways load only that.
func TestOwned(t *testing.T) {
	written, err := NewShard(1, 2, 7, nil).ConfigMap("ns", "rules")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(m *metav1.ObjectMeta) // applied to a copy of the controller's shard
		want bool
	}{
		{"as the controller writes it", func(*metav1.ObjectMeta) {}, true},
		{"snapshot label removed (the controller relabels it by name)", func(m *metav1.ObjectMeta) { delete(m.Labels, LabelSnapshot) }, true},
		{"no managed-by label", func(m *metav1.ObjectMeta) { delete(m.Labels, LabelManagedBy) }, false},
		{"managed by someone else", func(m *metav1.ObjectMeta) { m.Labels[LabelManagedBy] = "helm" }, false},
		{"managed-by value in another case", func(m *metav1.ObjectMeta) { m.Labels[LabelManagedBy] = "Tollgate-Controller" }, false},
		{"no labels at all", func(m *metav1.ObjectMeta) { m.Labels = nil }, false},
		{"not a shard name", func(m *metav1.ObjectMeta) { m.Name = "rules-backup" }, false},
		{"a shard name of another snapshot", func(m *metav1.ObjectMeta) { m.Name = "other-1-of-2" }, false},
		{"a count that is no power of two", func(m *metav1.ObjectMeta) { m.Name = "rules-1-of-3" }, false},
		{"an owner reference does not make it ours", func(m *metav1.ObjectMeta) {
			delete(m.Labels, LabelManagedBy)
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "tollgate-controller", UID: "u"}}
		}, false},
	} {
		cm := written.DeepCopy()
		c.edit(&cm.ObjectMeta)
		if got := Owned("rules", cm); got != c.want {
			t.Errorf("%s: Owned = %v, want %v", c.name, got, c.want)
		}
		// The controller lists metadata only: the same answer.
		meta := &metav1.PartialObjectMetadata{ObjectMeta: cm.ObjectMeta}
		if got := Owned("rules", meta); got != c.want {
			t.Errorf("%s, as metadata: Owned = %v, want %v", c.name, got, c.want)
		}
	}
}

// A snapshot written by an older controller (format 1: rules placed by
// tenant) is still read and looked up correctly during an upgrade.
func TestReadsFormat1(t *testing.T) {
	rules := []Rule{rule("a", "x", 1), rule("a", "*", 2), rule("*", "x", 3), rule("*", "*", 4), rule("b", "y", 5)}
	const count = 4
	parts := make([][]Rule, count)
	for _, r := range rules {
		i := tenantShardIndex(r.Tenant, count)
		parts[i] = append(parts[i], r)
	}
	var shards []*Shard
	for i, part := range parts {
		raw := fmt.Sprintf(`{"format":1,"index":%d,"count":%d,"version":3,"rules":[`, i, count)
		for j := range part {
			if j > 0 {
				raw += ","
			}
			raw += string(appendRule(nil, &part[j]))
		}
		sh, err := Decode(gz(raw + "]}"))
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		if sh.Format != 1 {
			t.Fatalf("shard %d read as format %d", i, sh.Format)
		}
		shards = append(shards, sh)
	}
	set, err := Select(shards)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tenant, route string
		want          int64
	}{{"a", "x", 1}, {"a", "z", 2}, {"c", "x", 3}, {"c", "z", 4}, {"b", "y", 5}, {"b", "x", 3}} {
		if got := set.Lookup(c.tenant, c.route); got == nil || got.Capacity != c.want {
			t.Errorf("Lookup(%s, %s) = %+v, want capacity %d", c.tenant, c.route, got, c.want)
		}
	}
	// A layout mixing formats is not a snapshot.
	mixed := append([]*Shard(nil), shards[:count-1]...)
	mixed = append(mixed, NewShard(count-1, count, 3, nil))
	if _, err := NewSet(mixed); err == nil || !strings.Contains(err.Error(), "format") {
		t.Fatalf("NewSet of mixed formats: %v", err)
	}
}

// The rules of one tenant spread over every shard.
func TestPartitionSpreadsOneTenant(t *testing.T) {
	rules := make([]Rule, 10_000)
	for i := range rules {
		rules[i] = rule("*", fmt.Sprintf("route-%d", i), 1)
	}
	for i, part := range Partition(rules, 8) {
		if len(part) < 1000 || len(part) > 1500 {
			t.Errorf("shard %d holds %d of 10,000 rules", i, len(part))
		}
	}
}

func TestRegionShares(t *testing.T) {
	r := Rule{Capacity: 300, RefillTokens: 30, RefillPeriodMs: 60_000,
		Regions: []RegionShare{{Name: "eu", Percent: 25}, {Name: "us", Percent: 75}}}
	for _, c := range []struct {
		region      string
		capacity    float64
		tokens, per int64
		rate        float64
	}{
		{"eu", 75, 750, 6_000_000, 0.125},
		{"us", 225, 2250, 6_000_000, 0.375},
		{"", 300, 30, 60_000, 0.5},   // no region: the whole rule
		{"ap", 300, 30, 60_000, 0.5}, // not listed: the whole rule
	} {
		if got := r.RegionCapacity(c.region); got != c.capacity {
			t.Errorf("RegionCapacity(%q) = %v, want %v", c.region, got, c.capacity)
		}
		tokens, per := r.RegionRefill(c.region)
		if tokens != c.tokens || per != c.per {
			t.Errorf("RegionRefill(%q) = %d per %d ms, want %d per %d ms", c.region, tokens, per, c.tokens, c.per)
		}
		if got := float64(tokens) * 1000 / float64(per); got != c.rate {
			t.Errorf("RegionRefill(%q) rate = %v/s, want %v/s", c.region, got, c.rate)
		}
	}
}

// The writer produces format 1 (what gateways of the previous version read)
// as well as format 2, and both read back to the same lookups.
func TestWritesBothFormats(t *testing.T) {
	var rules []Rule
	for i := range 300 {
		rules = append(rules, rule(fmt.Sprintf("t%d", i%5), fmt.Sprintf("r%d", i), int64(i+1)))
	}
	rules = append(rules, rule("*", "*", 999))
	const count = 8
	for _, format := range ReadFormats() {
		var shards []*Shard
		for i, part := range PartitionFormat(append([]Rule(nil), rules...), count, format) {
			cm, err := NewShardFormat(format, i, count, 4, part).ConfigMap("ns", "snap")
			if err != nil {
				t.Fatal(err)
			}
			sh, err := FromConfigMap(cm)
			if err != nil {
				t.Fatalf("format %d shard %d: %v", format, i, err)
			}
			if sh.Format != format {
				t.Fatalf("format %d shard %d read back as format %d", format, i, sh.Format)
			}
			shards = append(shards, sh)
		}
		set, err := Select(shards)
		if err != nil {
			t.Fatal(err)
		}
		if set.Format() != format || set.Len() != len(rules) {
			t.Fatalf("format %d: set of format %d with %d rules", format, set.Format(), set.Len())
		}
		for _, r := range rules {
			if got := set.Lookup(r.Tenant, r.Route); got == nil || got.Capacity != r.Capacity {
				t.Errorf("format %d: Lookup(%s, %s) = %+v", format, r.Tenant, r.Route, got)
			}
		}
		if got := set.Lookup("nobody", "nowhere"); got == nil || got.Capacity != 999 {
			t.Errorf("format %d: wildcard lookup = %+v", format, got)
		}
	}
	// Format 1 keeps a tenant in one shard; format 2 spreads it.
	used := map[int]bool{}
	for i, part := range PartitionFormat(append([]Rule(nil), rules...), count, FormatTenant) {
		for _, r := range part {
			if r.Tenant == "t1" {
				used[i] = true
			}
		}
	}
	if len(used) != 1 {
		t.Errorf("format 1 placed tenant t1 in shards %v", used)
	}
	// A format this build does not know is refused, naming the way out.
	_, err := Decode(gz(`{"format":3,"index":0,"count":1,"version":1,"rules":[]}`))
	if err == nil || !strings.Contains(err.Error(), "shard format 3") || !strings.Contains(err.Error(), "--snapshot-format") {
		t.Errorf("format 3: %v", err)
	}
}
