package v1alpha1_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/config/samples"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
)

// These specs send RateLimitRules to a real kube-apiserver (envtest) with the
// generated CRD and check that the schema refuses bad ones with a message
// that names the field, and accepts the edge cases that are valid.

var (
	testEnv *envtest.Environment
	k8s     client.Client
)

func TestAPIValidation(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "RateLimitRule validation")
}

var _ = BeforeSuite(func() {
	var err error
	testEnv, err = envtestutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(cfg, client.Options{})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

var seq atomic.Int64

// valid is a rule the API server accepts; each row mutates a copy.
func valid() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "RateLimitRule",
		"metadata":   map[string]any{"name": fmt.Sprintf("rule-%d", seq.Add(1)), "namespace": "default"},
		"spec": map[string]any{
			"tenant":          "shop-a",
			"route":           "create-order",
			"capacity":        int64(200),
			"refillPerSecond": int64(100),
		},
	}}
}

// matchClaims sets spec.match.claims (whose keys may hold dots, which set
// would split).
func matchClaims(claims map[string]any) func(*unstructured.Unstructured) {
	return set("spec.match", map[string]any{"claims": claims})
}

// setBy sets spec.by to items.
func setBy(items ...map[string]any) func(*unstructured.Unstructured) {
	list := make([]any, len(items))
	for i, it := range items {
		list[i] = it
	}
	return set("spec.by", list)
}

// nineParts are nine distinct key parts, one more than spec.by holds.
func nineParts() []map[string]any {
	out := []map[string]any{{"tenant": map[string]any{}}, {"route": map[string]any{}}, {"method": map[string]any{}}}
	for _, h := range []string{"X-A", "X-B", "X-C", "X-D", "X-E", "X-F"} {
		out = append(out, map[string]any{"header": map[string]any{"name": h}})
	}
	return out
}

func set(path string, v any) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		Expect(unstructured.SetNestedField(u.Object, v, strings.Split(path, ".")...)).To(Succeed())
	}
}

func unset(path string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		unstructured.RemoveNestedField(u.Object, strings.Split(path, ".")...)
	}
}

func both(fs ...func(*unstructured.Unstructured)) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		for _, f := range fs {
			f(u)
		}
	}
}

// refillBound is the message of the refill time's bound.
const refillBound = v1alpha1.MessageRefillTooSlow

var slowRefill = both(unset("spec.refillPerSecond"), set("spec.refill", map[string]any{"tokens": int64(10), "period": "1m"}))

var _ = Describe("RateLimitRule schema", func() {
	DescribeTable("refuses invalid rules with a message naming the field",
		func(mutate func(*unstructured.Unstructured), wantField, wantMsg string) {
			u := valid()
			mutate(u)
			err := k8s.Create(context.Background(), u)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(wantField))
			Expect(err.Error()).To(ContainSubstring(wantMsg))
		},
		// Each entry: mutation, field named in the error, message fragment.
		Entry("zero capacity", set("spec.capacity", int64(0)), "spec.capacity", "greater than or equal to 1"),
		Entry("negative capacity", set("spec.capacity", int64(-5)), "spec.capacity", "greater than or equal to 1"),
		Entry("capacity that would overflow", set("spec.capacity", int64(1)<<62), "spec.capacity", "less than or equal to 1000000000"),
		Entry("capacity as a string", set("spec.capacity", "200"), "spec.capacity", "must be of type integer"),
		Entry("zero rate", set("spec.refillPerSecond", int64(0)), "spec.refillPerSecond", "greater than or equal to 1"),
		Entry("negative rate", set("spec.refillPerSecond", int64(-1)), "spec.refillPerSecond", "greater than or equal to 1"),
		Entry("huge rate", set("spec.refillPerSecond", int64(1)<<40), "spec.refillPerSecond", "less than or equal to 1000000000"),
		Entry("fractional rate", set("spec.refillPerSecond", 0.5), "spec.refillPerSecond", "must be of type integer"),
		Entry("no rate", unset("spec.refillPerSecond"), "spec", "exactly one of spec.refillPerSecond and spec.refill must be set"),
		Entry("both rates", set("spec.refill", map[string]any{"tokens": int64(1), "period": "1s"}), "spec", "exactly one of spec.refillPerSecond and spec.refill must be set"),
		Entry("zero refill tokens", both(slowRefill, set("spec.refill.tokens", int64(0))), "spec.refill.tokens", "greater than or equal to 1"),
		Entry("refill period too short", both(slowRefill, set("spec.refill.period", "0s")), "spec.refill.period", "must be between 1s and 168h"),
		Entry("refill period too long", both(slowRefill, set("spec.refill.period", "169h")), "spec.refill.period", "must be between 1s and 168h"),
		Entry("refill period in milliseconds", both(slowRefill, set("spec.refill.period", "1500ms")), "spec.refill.period", "should match"),
		Entry("refill period not a duration", both(slowRefill, set("spec.refill.period", "daily")), "spec.refill.period", "should match"),
		Entry("refill period missing", both(slowRefill, unset("spec.refill.period")), "spec.refill.period", "Required value"),
		Entry("missing tenant", unset("spec.tenant"), "spec.tenant", "Required value"),
		Entry("missing route (and no targetRef)", unset("spec.route"), "spec.route", "exactly one of spec.route and spec.targetRef must be set"),
		Entry("route and targetRef", set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders"}),
			"spec.targetRef", "exactly one of spec.route and spec.targetRef must be set"),
		Entry("targetRef of another group", both(unset("spec.route"), set("spec.targetRef", map[string]any{"group": "example.com", "kind": "HTTPRoute", "name": "orders"})),
			"spec.targetRef.group", "Unsupported value"),
		Entry("by item with no part", setBy(map[string]any{}), "spec.by[0]", "each item sets exactly one of"),
		Entry("by item with two parts", setBy(map[string]any{"tenant": map[string]any{}, "method": map[string]any{}}), "spec.by[0]", "each item sets exactly one of"),
		Entry("by with a part twice", setBy(map[string]any{"tenant": map[string]any{}}, map[string]any{"tenant": map[string]any{}}), "spec.by", "each part appears at most once"),
		Entry("by with a header twice", setBy(map[string]any{"header": map[string]any{"name": "X-A"}}, map[string]any{"header": map[string]any{"name": "x-a"}}), "spec.by", "each part appears at most once"),
		Entry("by empty", set("spec.by", []any{}), "spec.by", "at least 1 items"),
		Entry("by with 9 items", setBy(nineParts()...), "spec.by", "must have at most 8 items"),
		Entry("an IPv4 prefix too short", setBy(map[string]any{"clientAddress": map[string]any{"ipv4Prefix": int64(7)}}), "spec.by[0].clientAddress.ipv4Prefix", "greater than or equal to 8"),
		Entry("an IPv6 prefix too long", setBy(map[string]any{"clientAddress": map[string]any{"ipv6Prefix": int64(129)}}), "spec.by[0].clientAddress.ipv6Prefix", "less than or equal to 128"),
		Entry("a header key without name", setBy(map[string]any{"header": map[string]any{}}), "spec.by[0].header.name", "Required value"),
		Entry("a header key with a bad name", setBy(map[string]any{"header": map[string]any{"name": "X Client"}}), "spec.by[0].header.name", "should match"),
		Entry("the API key header as a key", setBy(map[string]any{"header": map[string]any{"name": "X-API-Key"}}), "spec.by[0].header.name", "a credential header"),
		Entry("path segments 0", setBy(map[string]any{"path": map[string]any{"segments": int64(0)}}), "spec.by[0].path.segments", "greater than or equal to 1"),
		Entry("path segments 17", setBy(map[string]any{"path": map[string]any{"segments": int64(17)}}), "spec.by[0].path.segments", "less than or equal to 16"),
		Entry("a claim key with a bad path", setBy(map[string]any{"claim": map[string]any{"path": "org..id"}}), "spec.by[0].claim.path", "names separated by single dots"),
		Entry("shared and by", both(set("spec.shared", true), setBy(map[string]any{"tenant": map[string]any{}})), "spec", "spec.shared makes one bucket"),
		Entry("by and concurrency", both(setBy(map[string]any{"tenant": map[string]any{}}), set("spec.concurrency", map[string]any{"maxInFlight": int64(2)})), "spec", "cannot be combined with spec.concurrency"),
		Entry("targetRef of another kind", both(unset("spec.route"), set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "Service", "name": "orders"})),
			"spec.targetRef.kind", "Unsupported value"),
		Entry("targetRef without name", both(unset("spec.route"), set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"})),
			"spec.targetRef.name", "Required value"),
		Entry("targetRef of another kind", both(unset("spec.route"), set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "TCPRoute", "name": "orders"})),
			"spec.targetRef.kind", `supported values: "HTTPRoute", "GRPCRoute"`),
		Entry("targetRef with a bad sectionName", both(unset("spec.route"), set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders", "sectionName": "Bad_Name"})),
			"spec.targetRef.sectionName", "should match"),
		Entry("missing capacity", unset("spec.capacity"), "spec.capacity", "Required value"),
		Entry("missing spec", unset("spec"), "spec", "Required value"),
		Entry("empty tenant", set("spec.tenant", ""), "spec.tenant", "should be at least 1 chars long"),
		Entry("overlong tenant", set("spec.tenant", strings.Repeat("a", 65)), "spec.tenant", "may not be more than 64"),
		Entry("overlong route", set("spec.route", strings.Repeat("r", 65)), "spec.route", "may not be more than 64"),
		Entry("hash tag brace in tenant", set("spec.tenant", "{shop}"), "spec.tenant", "should match"),
		Entry("colon in tenant", set("spec.tenant", "shop:a"), "spec.tenant", "should match"),
		Entry("colon in route", set("spec.route", "orders:create"), "spec.route", "should match"),
		Entry("control character in tenant", set("spec.tenant", "shop\x01"), "spec.tenant", "should match"),
		Entry("space in route", set("spec.route", "create order"), "spec.route", "should match"),
		Entry("leading dot in tenant", set("spec.tenant", ".shop"), "spec.tenant", "should match"),
		Entry("wildcard inside a name", set("spec.tenant", "shop-*"), "spec.tenant", "should match"),
		Entry("unicode tenant", set("spec.tenant", "shöp"), "spec.tenant", "should match"),
		Entry("unknown mode", set("spec.mode", "DryRun"), "spec.mode", "Unsupported value"),
		Entry("unknown failure mode", set("spec.failureMode", "Retry"), "spec.failureMode", "Unsupported value"),
		Entry("unknown prefetch mode", set("spec.hotKey", map[string]any{"prefetch": "Always"}), "spec.hotKey.prefetch", "Unsupported value"),
		Entry("fixed prefetch without a batch", set("spec.hotKey", map[string]any{"prefetch": "Fixed"}), "spec.hotKey", "batch is required with prefetch Fixed"),
		Entry("batch without prefetch", set("spec.hotKey", map[string]any{"batch": int64(10)}), "spec.hotKey", "batch needs prefetch Fixed or Auto"),
		Entry("batch of one", set("spec.hotKey", map[string]any{"prefetch": "Fixed", "batch": int64(1)}), "spec.hotKey.batch", "greater than or equal to 2"),
		Entry("error budget above 50%", set("spec.hotKey", map[string]any{"prefetch": "Auto", "errorBudgetPercent": int64(80)}), "spec.hotKey.errorBudgetPercent", "less than or equal to 50"),
		Entry("65 shards", set("spec.hotKey", map[string]any{"shards": int64(65)}), "spec.hotKey.shards", "less than or equal to 64"),
		Entry("more shards than capacity", both(set("spec.capacity", int64(3)), set("spec.hotKey", map[string]any{"shards": int64(4)})), "spec", "capacity must be at least spec.hotKey.shards"),
		Entry("region shares not adding up to 100", set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(70)}, map[string]any{"name": "us", "percent": int64(20)}}),
			"spec.regions", "percentages must add up to 100"),
		Entry("a region listed twice", set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(50)}, map[string]any{"name": "eu", "percent": int64(50)}}),
			"spec.regions", "Duplicate value"),
		Entry("region name with a colon", set("spec.regions", []any{map[string]any{"name": "eu:1", "percent": int64(100)}}),
			"spec.regions[0].name", "should match"),
		Entry("region share below one token", both(set("spec.capacity", int64(1)), set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(50)}, map[string]any{"name": "us", "percent": int64(50)}})),
			"spec", "must hold at least one token per shard"),
		Entry("region share below one token per shard", both(both(set("spec.capacity", int64(4)), set("spec.hotKey", map[string]any{"shards": int64(4)})),
			set("spec.regions", []any{map[string]any{"name": "eu", "percent": int64(50)}, map[string]any{"name": "us", "percent": int64(50)}})),
			"spec", "must hold at least one token per shard"),
		Entry("maxInFlight of zero", set("spec.concurrency", map[string]any{"maxInFlight": int64(0)}), "spec.concurrency.maxInFlight", "greater than or equal to 1"),
		Entry("maxInFlight too large", set("spec.concurrency", map[string]any{"maxInFlight": int64(100_001)}), "spec.concurrency.maxInFlight", "less than or equal to 100000"),
		Entry("concurrency without maxInFlight", set("spec.concurrency", map[string]any{"leaseSeconds": int64(5)}), "spec.concurrency.maxInFlight", "Required value"),
		Entry("lease of zero", set("spec.concurrency", map[string]any{"maxInFlight": int64(5), "leaseSeconds": int64(0)}), "spec.concurrency.leaseSeconds", "greater than or equal to 1"),
		Entry("lease over an hour", set("spec.concurrency", map[string]any{"maxInFlight": int64(5), "leaseSeconds": int64(3601)}), "spec.concurrency.leaseSeconds", "less than or equal to 3600"),
		Entry("region share below one request", both(set("spec.concurrency", map[string]any{"maxInFlight": int64(1)}), set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(50)}, map[string]any{"name": "us", "percent": int64(50)}})),
			"spec", "share of spec.concurrency.maxInFlight (maxInFlight x percent / 100) must be at least one request"),
		Entry("quota period not a calendar period", set("spec.quota", map[string]any{"limit": int64(10), "period": "Year"}), "spec.quota.period", "Unsupported value"),
		Entry("quota without a period", set("spec.quota", map[string]any{"limit": int64(10)}), "spec.quota.period", "Required value"),
		Entry("quota of zero", set("spec.quota", map[string]any{"limit": int64(0), "period": "Day"}), "spec.quota.limit", "greater than or equal to 1"),
		Entry("quota time zone with a path", set("spec.quota", map[string]any{"limit": int64(10), "period": "Day", "timeZone": "../../etc/passwd"}),
			"spec.quota.timeZone", "must be an IANA time zone name"),
		Entry("quota time zone as an offset", set("spec.quota", map[string]any{"limit": int64(10), "period": "Day", "timeZone": "+02:00"}),
			"spec.quota.timeZone", "must be an IANA time zone name"),
		Entry("quota time zone Local", set("spec.quota", map[string]any{"limit": int64(10), "period": "Week", "timeZone": "Local"}),
			"spec.quota.timeZone", "must be an IANA time zone name"),
		Entry("regionSplit without regions", set("spec.regionSplit", "Fixed"), "spec", "spec.regionSplit needs spec.regions"),
		Entry("unknown regionSplit", both(set("spec.regionSplit", "Sometimes"), set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(50)}, map[string]any{"name": "us", "percent": int64(50)}})),
			"spec.regionSplit", "Unsupported value"),
		Entry("region floors over 100", set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(50), "minPercent": int64(60)}, map[string]any{"name": "us", "percent": int64(50), "minPercent": int64(50)}}),
			"spec.regions", "the minPercent floors must add up to at most 100"),
		Entry("region floor of zero", set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(50), "minPercent": int64(0)}, map[string]any{"name": "us", "percent": int64(50)}}),
			"spec.regions[0].minPercent", "greater than or equal to 1"),
		Entry("region floor below one token", both(set("spec.capacity", int64(10)), set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(50), "minPercent": int64(5)}, map[string]any{"name": "us", "percent": int64(50)}})),
			"spec", "every region's minPercent of spec.capacity must hold at least one token per shard"),
		Entry("region share of zero", set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(0)}, map[string]any{"name": "us", "percent": int64(100)}}),
			"spec.regions[0].percent", "greater than or equal to 1"),
		Entry("empty cost", set("spec.cost", map[string]any{}), "spec.cost", "spec.cost needs request or response"),
		Entry("fixed and header request cost", set("spec.cost.request", map[string]any{"fixed": int64(2), "header": "X-Cost"}),
			"spec.cost.request", "set exactly one of fixed and header"),
		Entry("zero fixed cost", set("spec.cost.request", map[string]any{"fixed": int64(0)}), "spec.cost.request.fixed", "greater than or equal to 1"),
		Entry("fixed cost above capacity", set("spec.cost.request", map[string]any{"fixed": int64(201)}), "spec", "spec.cost.request.fixed must not exceed spec.capacity"),
		Entry("cost header with a colon", set("spec.cost.request", map[string]any{"header": "X-Cost:"}), "spec.cost.request.header", "should match"),
		Entry("default cost without a header", set("spec.cost.request", map[string]any{"fixed": int64(2), "default": int64(3)}),
			"spec.cost.request", "default and spec.cost.request.max need spec.cost.request.header"),
		Entry("default cost above max", set("spec.cost.request", map[string]any{"header": "X-Cost", "default": int64(30), "max": int64(10)}),
			"spec.cost.request", "default must not exceed spec.cost.request.max"),
		Entry("huge max cost", set("spec.cost.request", map[string]any{"header": "X-Cost", "max": int64(1) << 40}),
			"spec.cost.request.max", "less than or equal to 1000000000"),
		Entry("response cost from header and body", set("spec.cost.response", map[string]any{"header": "X-Usage", "jsonField": "usage.total_tokens"}),
			"spec.cost.response", "set exactly one of header and jsonField"),
		Entry("response cost from nothing", set("spec.cost.response", map[string]any{"default": int64(1)}),
			"spec.cost.response", "set exactly one of header and jsonField"),
		Entry("json field with an empty key", set("spec.cost.response", map[string]any{"jsonField": "usage..total"}), "spec.cost.response.jsonField", "should match"),
		Entry("negative response default", set("spec.cost.response", map[string]any{"header": "X-Usage", "default": int64(-1)}),
			"spec.cost.response.default", "greater than or equal to 0"),
		Entry("negative debt", set("spec.cost.response", map[string]any{"header": "X-Usage", "maxDebt": int64(-5)}),
			"spec.cost.response.maxDebt", "greater than or equal to 0"),
		Entry("onError above max", set("spec.cost.response", map[string]any{"header": "X-Usage", "max": int64(10), "onError": int64(11)}),
			"spec.cost.response", "must not exceed spec.cost.response.max"),
		Entry("onClientGone above max", set("spec.cost.response", map[string]any{"jsonField": "usage.total_tokens", "max": int64(10), "onClientGone": int64(11)}),
			"spec.cost.response", "default, onError and onClientGone must not exceed spec.cost.response.max"),
		Entry("negative onClientGone", set("spec.cost.response", map[string]any{"jsonField": "usage.total_tokens", "onClientGone": int64(-1)}),
			"spec.cost.response.onClientGone", "greater than or equal to 0"),
		Entry("huge onClientGone", set("spec.cost.response", map[string]any{"header": "X-Usage", "onClientGone": int64(1000000001)}),
			"spec.cost.response.onClientGone", "less than or equal to 1000000000"),
		Entry("response cost with shards", both(set("spec.cost.response", map[string]any{"header": "X-Usage"}), set("spec.hotKey", map[string]any{"shards": int64(4)})),
			"spec", "spec.cost.response cannot be combined with spec.hotKey.prefetch or spec.hotKey.shards"),
		Entry("expiresAt not a time", set("spec.expiresAt", "tomorrow"), "spec.expiresAt", "must be of type date-time"),
		Entry("expiresAt without a time zone", set("spec.expiresAt", "2030-07-01T18:00:00"), "spec.expiresAt", "must be of type date-time"),
		Entry("expiresAt as a number", set("spec.expiresAt", int64(1893456000)), "spec.expiresAt", "must be of type date-time"),
		Entry("response cost with prefetch", both(set("spec.cost.response", map[string]any{"header": "X-Usage"}), set("spec.hotKey", map[string]any{"prefetch": "Auto"})),
			"spec", "spec.cost.response cannot be combined with spec.hotKey.prefetch or spec.hotKey.shards"),
		// Refill from empty (or from -maxDebt) to full: at most 2^53 ms.
		Entry("a billion tokens refilled one a day (issue 27)", both(set("spec.capacity", int64(1_000_000_000)), both(slowRefill,
			set("spec.refill", map[string]any{"tokens": int64(1), "period": "24h"}))), "spec", refillBound),
		Entry("a refill just over 2^53 ms", both(set("spec.capacity", int64(14_892_856)), both(slowRefill,
			set("spec.refill", map[string]any{"tokens": int64(1), "period": "168h"}))), "spec", refillBound),
		Entry("a debt that takes over 2^53 ms to refill", both(set("spec.capacity", int64(7_446_427)), both(both(slowRefill,
			set("spec.refill", map[string]any{"tokens": int64(1), "period": "168h"})),
			set("spec.cost.response", map[string]any{"header": "X-Usage", "maxDebt": int64(7_446_429)}))), "spec", refillBound),
		Entry("a default debt (capacity) that takes over 2^53 ms to refill", both(set("spec.capacity", int64(7_446_428)), both(both(slowRefill,
			set("spec.refill", map[string]any{"tokens": int64(1), "period": "168h"})),
			set("spec.cost.response", map[string]any{"header": "X-Usage"}))), "spec", refillBound),
		Entry("claims for one tenant", matchClaims(map[string]any{"plan": "gold"}),
			"spec", `spec.match needs tenant "*"`),
		Entry("match without claims", both(set("spec.tenant", "*"), set("spec.match", map[string]any{})), "spec.match.claims", "Required value"),
		Entry("empty claims", both(set("spec.tenant", "*"), matchClaims(map[string]any{})), "spec.match.claims", "should have at least 1 properties"),
		Entry("nine claims", both(set("spec.tenant", "*"), matchClaims(map[string]any{"a": "1", "b": "1", "c": "1", "d": "1", "e": "1", "f": "1", "g": "1", "h": "1", "i": "1"})),
			"spec.match.claims", "must have at most 8 items"),
		Entry("claim path with an empty name", both(set("spec.tenant", "*"), matchClaims(map[string]any{"org..plan": "gold"})),
			"spec.match.claims", "a claim path is 1 to 256 bytes"),
		Entry("claim path with a trailing dot", both(set("spec.tenant", "*"), matchClaims(map[string]any{"plan.": "gold"})),
			"spec.match.claims", "a claim path is 1 to 256 bytes"),
		Entry("claim path with a control character", both(set("spec.tenant", "*"), matchClaims(map[string]any{"pl\nan": "gold", "pl\x01an": "gold"})),
			"spec.match.claims", "a claim path is 1 to 256 bytes"),
		Entry("overlong claim path", both(set("spec.tenant", "*"), matchClaims(map[string]any{strings.Repeat("p", 257): "gold"})),
			"spec.match.claims", "a claim path is 1 to 256 bytes"),
		Entry("empty claim value", both(set("spec.tenant", "*"), matchClaims(map[string]any{"plan": ""})),
			"spec.match.claims", "a claim value is 1 to 256 bytes"),
		Entry("overlong claim value", both(set("spec.tenant", "*"), matchClaims(map[string]any{"plan": strings.Repeat("g", 257)})),
			"spec.match.claims", "a claim value is 1 to 256 bytes"),
		Entry("claim value with a control character", both(set("spec.tenant", "*"), matchClaims(map[string]any{"plan": "gold\t"})),
			"spec.match.claims", "a claim value is 1 to 256 bytes"),
		Entry("claim value not a string", both(set("spec.tenant", "*"), matchClaims(map[string]any{"level": int64(3)})),
			"spec.match.claims.level", "must be of type string"),
	)

	DescribeTable("accepts valid edge cases",
		func(mutate func(*unstructured.Unstructured)) {
			u := valid()
			mutate(u)
			Expect(k8s.Create(context.Background(), u)).To(Succeed())
		},
		Entry("the example rule", func(*unstructured.Unstructured) {}),
		Entry("wildcard tenant and route", both(set("spec.tenant", "*"), set("spec.route", "*"))),
		Entry("64-character ids", both(set("spec.tenant", strings.Repeat("a", 64)), set("spec.route", "r"+strings.Repeat("-", 63)))),
		Entry("one-character ids", both(set("spec.tenant", "a"), set("spec.route", "9"))),
		Entry("by client address with default prefixes", setBy(map[string]any{"clientAddress": map[string]any{}})),
		Entry("by every part", setBy(map[string]any{"tenant": map[string]any{}}, map[string]any{"route": map[string]any{}},
			map[string]any{"clientAddress": map[string]any{"ipv4Prefix": int64(24), "ipv6Prefix": int64(48)}}, map[string]any{"header": map[string]any{"name": "X-Client-Id"}},
			map[string]any{"method": map[string]any{}}, map[string]any{"path": map[string]any{"segments": int64(16)}}, map[string]any{"claim": map[string]any{"path": "org.id"}})),
		Entry("shared", set("spec.shared", true)),
		Entry("regions that follow the traffic, with floors", both(set("spec.regionSplit", "FollowTraffic"), set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(50), "minPercent": int64(10)}, map[string]any{"name": "us", "percent": int64(50), "minPercent": int64(90)}}))),
		Entry("fixed regions", both(set("spec.regionSplit", "Fixed"), set("spec.regions", []any{
			map[string]any{"name": "eu", "percent": int64(70)}, map[string]any{"name": "us", "percent": int64(30)}}))),
		Entry("targetRef to a Gateway listener", both(unset("spec.route"), set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "sectionName": "https"}))),
		Entry("targetRef instead of route", both(unset("spec.route"), set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders.v2"}))),
		Entry("targetRef to a GRPCRoute rule", both(unset("spec.route"), set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "GRPCRoute", "name": "echo", "sectionName": "unary"}))),
		Entry("targetRef with a sectionName", both(unset("spec.route"),
			set("spec.targetRef", map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders", "sectionName": "create-order"}))),
		Entry("dots, dashes and underscores", set("spec.tenant", "Shop_A.eu-1")),
		Entry("capacity and rate at their maximum", both(set("spec.capacity", int64(1_000_000_000)), set("spec.refillPerSecond", int64(1_000_000_000)))),
		Entry("capacity and rate of one", both(set("spec.capacity", int64(1)), set("spec.refillPerSecond", int64(1)))),
		Entry("10 per minute", slowRefill),
		Entry("1000 per hour", both(slowRefill, set("spec.refill", map[string]any{"tokens": int64(1000), "period": "1h"}))),
		Entry("one per week", both(slowRefill, set("spec.refill", map[string]any{"tokens": int64(1), "period": "168h"}))),
		Entry("compound period", both(slowRefill, set("spec.refill.period", "1h30m15s"))),
		Entry("Go's own duration form", both(slowRefill, set("spec.refill.period", "1m0s"))),
		Entry("shadow mode, fail open", both(set("spec.mode", "Shadow"), set("spec.failureMode", "FailOpen"))),
		Entry("fail closed", set("spec.failureMode", "FailClosed")),
		Entry("automatic prefetch", set("spec.hotKey", map[string]any{"prefetch": "Auto"})),
		Entry("fixed prefetch and shards", set("spec.hotKey", map[string]any{"prefetch": "Fixed", "batch": int64(50), "shards": int64(8)})),
		Entry("shards equal to capacity", both(set("spec.capacity", int64(4)), set("spec.hotKey", map[string]any{"shards": int64(4)}))),
		Entry("monthly quota in Paris", set("spec.quota", map[string]any{"limit": int64(1_000_000), "period": "Month", "timeZone": "Europe/Paris"})),
		Entry("daily quota, default zone", set("spec.quota", map[string]any{"limit": int64(1), "period": "Day"})),
		Entry("weekly quota in a three-part zone", set("spec.quota", map[string]any{"limit": int64(1_000_000_000_000), "period": "Week", "timeZone": "America/Argentina/Buenos_Aires"})),
		Entry("quota in Etc/GMT+5", set("spec.quota", map[string]any{"limit": int64(5), "period": "Day", "timeZone": "Etc/GMT+5"})),
		Entry("70/30 region shares", set("spec.regions", []any{
			map[string]any{"name": "eu-west", "percent": int64(70)}, map[string]any{"name": "us-east", "percent": int64(30)}})),
		Entry("a concurrency limit", set("spec.concurrency", map[string]any{"maxInFlight": int64(5)})),
		Entry("concurrency at its maximum", set("spec.concurrency", map[string]any{"maxInFlight": int64(100_000), "leaseSeconds": int64(3600)})),
		Entry("concurrency of one with a one-second lease", set("spec.concurrency", map[string]any{"maxInFlight": int64(1), "leaseSeconds": int64(1)})),
		Entry("concurrency split 70/30", both(set("spec.concurrency", map[string]any{"maxInFlight": int64(4)}), set("spec.regions", []any{
			map[string]any{"name": "eu-west", "percent": int64(70)}, map[string]any{"name": "us-east", "percent": int64(30)}}))),
		Entry("fixed cost equal to capacity", set("spec.cost.request", map[string]any{"fixed": int64(200)})),
		Entry("header cost with default and max", set("spec.cost.request", map[string]any{"header": "X-Cost", "default": int64(5), "max": int64(500)})),
		Entry("response cost from a JSON field, with request cost", set("spec.cost", map[string]any{
			"request":  map[string]any{"fixed": int64(1)},
			"response": map[string]any{"jsonField": "usage.total_tokens", "default": int64(100), "onError": int64(0), "max": int64(100000), "maxDebt": int64(0)}})),
		Entry("onClientGone 0", set("spec.cost.response", map[string]any{"jsonField": "usage.total_tokens", "default": int64(5), "onClientGone": int64(0)})),
		Entry("onClientGone at max", set("spec.cost.response", map[string]any{"header": "X-Usage", "max": int64(10), "onClientGone": int64(10)})),
		Entry("a temporary rule", set("spec.expiresAt", "2030-07-01T18:00:00Z")),
		Entry("a temporary rule with an offset and fractions", set("spec.expiresAt", "2030-07-01T20:00:00.5+02:00")),
		// The API server cannot compare a time with the present: the
		// controller refuses this one (Accepted=False, reason ExpiryInPast).
		Entry("an expiry in the past", set("spec.expiresAt", "2001-01-01T00:00:00Z")),
		Entry("response cost from a header, with a hotKey left Off", both(set("spec.cost.response", map[string]any{"header": "X-Usage-Tokens"}),
			set("spec.hotKey", map[string]any{"prefetch": "Off"}))),
		Entry("a refill just under 2^53 ms", both(set("spec.capacity", int64(14_892_855)), both(slowRefill,
			set("spec.refill", map[string]any{"tokens": int64(1), "period": "168h"})))),
		Entry("capacity and debt refilled just under 2^53 ms", both(set("spec.capacity", int64(7_446_427)), both(both(slowRefill,
			set("spec.refill", map[string]any{"tokens": int64(1), "period": "168h"})),
			set("spec.cost.response", map[string]any{"header": "X-Usage", "maxDebt": int64(7_446_428)})))),
		Entry("the largest capacity and debt at one token a second", both(both(set("spec.capacity", int64(1_000_000_000)), set("spec.refillPerSecond", int64(1))),
			set("spec.cost.response", map[string]any{"header": "X-Usage", "maxDebt": int64(1_000_000_000)}))),
		Entry("a plan rule", both(set("spec.tenant", "*"), matchClaims(map[string]any{"plan": "gold"}))),
		Entry("a plan rule for every route", both(both(set("spec.tenant", "*"), set("spec.route", "*")), matchClaims(map[string]any{"plan": "gold"}))),
		Entry("eight claims, nested, namespaced and long", both(set("spec.tenant", "*"), matchClaims(map[string]any{
			"org.plan": "gold", "https://example.com/tier": "1", "a.b.c.d": "true", "roles": "admin",
			"e": "é ü", "f": "x y", "g": strings.Repeat("v", 256), strings.Repeat("p", 256): "1"}))),
	)

	It("defaults spec.concurrency.leaseSeconds to 10", func() {
		u := valid()
		set("spec.concurrency", map[string]any{"maxInFlight": int64(5)})(u)
		Expect(k8s.Create(context.Background(), u)).To(Succeed())
		lease, found, err := unstructured.NestedInt64(u.Object, "spec", "concurrency", "leaseSeconds")
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeTrue())
		Expect(lease).To(Equal(int64(10)))
	})

	It("accepts every sample of config/samples", func() {
		entries, err := fs.ReadDir(samples.Files, ".")
		Expect(err).NotTo(HaveOccurred())
		n := 0
		for _, e := range entries {
			data, err := samples.Files.ReadFile(e.Name())
			Expect(err).NotTo(HaveOccurred())
			u := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal(data, &u.Object)).To(Succeed(), e.Name())
			u.SetNamespace("default")
			u.SetName(fmt.Sprintf("sample-%d", seq.Add(1)))
			Expect(k8s.Create(context.Background(), u)).To(Succeed(), e.Name())
			n++
		}
		Expect(n).To(BeNumerically(">=", 12))
	})

	It("defaults a clientAddress part to /32 and /64", func() {
		u := valid()
		set("spec.by", []any{map[string]any{"clientAddress": map[string]any{}}})(u)
		Expect(k8s.Create(context.Background(), u)).To(Succeed())
		parts, _, _ := unstructured.NestedSlice(u.Object, "spec", "by")
		Expect(parts).To(Equal([]any{map[string]any{"clientAddress": map[string]any{"ipv4Prefix": int64(32), "ipv6Prefix": int64(64)}}}))
	})
})
