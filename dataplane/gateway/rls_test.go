package gateway_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/dataplane/rls"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestRLSAllowedThenOverLimit(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("r", "shop-a", "create-order", 3, "refill: {tokens: 1, period: 10s}"))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	if gw.Addr() != "" {
		t.Fatalf("without --routes no HTTP proxy runs, yet it listens on %s", gw.Addr())
	}
	c := rlsClient(t, gw)
	for i, left := range []string{"2", "1", "0"} {
		res := call(t, c, "envoy", 0, tr("shop-a", "create-order"))
		st := res.Statuses[0]
		if res.OverallCode != ok || st.Code != ok || st.LimitRemaining != uint32(2-i) {
			t.Fatalf("call %d: %v %v remaining %d", i+1, res.OverallCode, st.Code, st.LimitRemaining)
		}
		// 1 token per 10s is 6 per minute.
		if l := st.CurrentLimit; l.RequestsPerUnit != 6 || l.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.Name != "create-order" {
			t.Fatalf("current_limit %v", l)
		}
		if reset := st.DurationUntilReset.AsDuration(); !within(reset, time.Duration(i)*10*time.Second, time.Duration(i+1)*10*time.Second) {
			t.Fatalf("call %d: duration_until_reset %v", i+1, reset)
		}
		expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": left})
	}
	res := call(t, c, "envoy", 0, tr("shop-a", "create-order"))
	if res.OverallCode != over || statusCodes(res) != "OVER_LIMIT" || res.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("4th call: %v %s remaining %d", res.OverallCode, statusCodes(res), res.Statuses[0].LimitRemaining)
	}
	// The next token is 10s away: exactly Retry-After 10.
	expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "Retry-After": "10"})

	// Decisions are counted under route "rls", with no tenant label.
	if v := metricValue(t, gw, `tollgate_gateway_decisions_total{result="allowed",route="rls",source="redis"}`); v != 3 {
		t.Errorf("allowed decisions metric %v, want 3", v)
	}
	if v := metricValue(t, gw, `tollgate_gateway_decisions_total{result="rejected",route="rls",source="redis"}`); v != 1 {
		t.Errorf("rejected decisions metric %v, want 1", v)
	}
	if m := scrape(t, gw); strings.Contains(m, "shop-a") {
		t.Error("a tenant id appears in the metrics")
	}
}

// TestRLSSharesBucketsWithProxy: the HTTP proxy and the rate limit service
// of one gateway decide on the same buckets.
func TestRLSSharesBucketsWithProxy(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "shop-a", "create-order", 3, slow))
	o := e.options(srv.Addr())
	o.RLSListen = "127.0.0.1:0"
	gw := start(t, o, testLogger(t))
	c := rlsClient(t, gw)
	if res, _ := send(t, "POST", gw.url+"/orders", "shop-a"); res.StatusCode != 200 {
		t.Fatalf("proxy: %d", res.StatusCode)
	}
	if res := call(t, c, "envoy", 0, tr("shop-a", "create-order")); res.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("after one proxied request and one RLS call: remaining %d, want 1", res.Statuses[0].LimitRemaining)
	}
	call(t, c, "envoy", 0, tr("shop-a", "create-order"))
	res, _ := send(t, "POST", gw.url+"/orders", "shop-a")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != week {
		t.Fatalf("proxy after the bucket was emptied through the RLS: %d Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
}

func TestRLSMultipleDescriptors(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1",
		rule("a", "a", "r", 1, slow)+
			rule("b", "b", "r", 5, slow)+
			rule("c", "c", "r", 1, "refill: {tokens: 1, period: 10s}"))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	c := rlsClient(t, gw)

	res := call(t, c, "envoy", 0, tr("a", "r"), tr("b", "r"))
	if res.OverallCode != ok || statusCodes(res) != "OK OK" || remainings(res) != "0 4" {
		t.Fatalf("first call: %v %s remaining %s", res.OverallCode, statusCodes(res), remainings(res))
	}
	// The most constrained descriptor: a, with 0 left of 1.
	expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0"})

	// a is empty: OVER_LIMIT overall, but b was still decided and took a
	// token (as in Envoy's reference service).
	res = call(t, c, "envoy", 0, tr("a", "r"), tr("b", "r"))
	if res.OverallCode != over || statusCodes(res) != "OVER_LIMIT OK" || remainings(res) != "0 3" {
		t.Fatalf("second call: %v %s remaining %s", res.OverallCode, statusCodes(res), remainings(res))
	}
	expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "Retry-After": week})

	// Two over the limit: Retry-After is the longer wait (a: a week; c: 10s).
	call(t, c, "envoy", 0, tr("c", "r"))
	res = call(t, c, "envoy", 0, tr("c", "r"), tr("b", "r"), tr("a", "r"))
	if res.OverallCode != over || statusCodes(res) != "OVER_LIMIT OK OVER_LIMIT" || remainings(res) != "0 2 0" {
		t.Fatalf("third call: %v %s remaining %s", res.OverallCode, statusCodes(res), remainings(res))
	}
	expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "Retry-After": week})
	res = call(t, c, "envoy", 0, tr("c", "r"))
	expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "Retry-After": "10"})

	// A descriptor that can never pass (cost above capacity): no Retry-After
	// at all, even next to one that could pass later.
	res = call(t, c, "envoy", 0, tr("c", "r"), hits(tr("b", "r"), 6))
	if res.OverallCode != over || statusCodes(res) != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("never: %v %s", res.OverallCode, statusCodes(res))
	}
	expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0"})
	// The refused cost took nothing from b.
	if res := call(t, c, "envoy", 0, tr("b", "r")); res.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("b remaining %d, want 1", res.Statuses[0].LimitRemaining)
	}
}

// TestRLSCostAboveOneShard: hits_addend 3 on a rule of capacity 10 split
// into 4 shards of 2.5 tokens: no shard can hold 3 tokens, yet the rule can
// serve three such requests. It did not (a permanent OVER_LIMIT): now the
// request takes from several shards, and the fourth is over the limit with
// a finite Retry-After.
func TestRLSCostAboveOneShard(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("t", "*", "r", 10, "refill: {tokens: 1, period: 1h}", "hotKey: {shards: 4}"))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	c := rlsClient(t, gw)
	for i := range 3 {
		if res := call(t, c, "envoy", 3, tr("t", "r")); res.OverallCode != ok {
			t.Fatalf("request %d of cost 3: %v, want OK", i+1, res.OverallCode)
		}
	}
	res := call(t, c, "envoy", 3, tr("t", "r"))
	if res.OverallCode != over {
		t.Fatalf("fourth request of cost 3: %v, want OVER_LIMIT", res.OverallCode)
	}
	// 1 token left, 2 missing at 1 per hour: two hours (a second more for
	// the thousandths of a token the shards keep).
	if h := headers(t, res)["Retry-After"]; h != "7200" && h != "7201" {
		t.Fatalf("Retry-After %q, want 7200 (two missing tokens at one per hour)", h)
	}
}

func TestRLSHitsAddend(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("t", "*", "r", 10, slow))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	c := rlsClient(t, gw)
	for i, step := range []struct {
		addend uint32
		d      *ratelimitv3.RateLimitDescriptor
		want   string
	}{
		{3, tr("t", "r"), "7"},           // the request's hits_addend
		{3, hits(tr("t", "r"), 5), "2"},  // the descriptor's overrides it
		{0, tr("t", "r"), "1"},           // 0 means 1
		{7, hits(tr("t", "r"), 0), "0"},  // and so does a descriptor's 0
		{0, hits(tr("t", "r"), 1), "OL"}, // empty
	} {
		res := call(t, c, "envoy", step.addend, step.d)
		got := headers(t, res)["X-RateLimit-Remaining"]
		if res.OverallCode == over {
			got = "OL"
			if h := headers(t, res)["Retry-After"]; h != week {
				t.Fatalf("step %d: Retry-After %q", i+1, h)
			}
		}
		if got != step.want {
			t.Fatalf("step %d: remaining %s, want %s", i+1, got, step.want)
		}
	}
	// Two descriptors with their own costs on one bucket each.
	res := call(t, c, "envoy", 2, tr("u", "r"), hits(tr("v", "r"), 4))
	if remainings(res) != "8 6" {
		t.Fatalf("remaining %s, want 8 6", remainings(res))
	}
	// A cost above the capacity can never pass: no Retry-After, no tokens
	// taken.
	res = call(t, c, "envoy", 11, tr("w", "r"))
	if res.OverallCode != over {
		t.Fatalf("cost 11 of 10: %v", res.OverallCode)
	}
	expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0"})
	if res := call(t, c, "envoy", 10, tr("w", "r")); res.OverallCode != ok {
		t.Fatalf("cost 10 of a full bucket of 10: %v", res.OverallCode)
	}
}

func TestRLSIETFHeaders(t *testing.T) {
	srv := redistest.Start(t)
	// Slow refills (one token per 18 s and per 6 s), so the figures do not
	// depend on the time between the calls.
	e := newEnv(t, "http://127.0.0.1:1",
		rule("r", "shop-a", "create-order", 200, "refill: {tokens: 200, period: 1h}")+
			rule("s", "shop-a", "list-orders", 10, "refill: {tokens: 10, period: 1m}"))
	o := e.rlsOptions(srv.Addr())
	o.IETFHeaders = true
	gw := start(t, o, testLogger(t))
	c := rlsClient(t, gw)
	res := call(t, c, "envoy", 0, tr("shop-a", "create-order"))
	expectHeaders(t, res, map[string]string{
		"X-RateLimit-Limit": "200", "X-RateLimit-Remaining": "199",
		// Formatted as the HTTP proxy's (TestIETFHeaders): quota and
		// seconds to refill it; remaining and seconds until full.
		"RateLimit-Policy": `"create-order";q=200;w=3600`,
		"RateLimit":        `"create-order";r=199;t=18`,
	})
	res = call(t, c, "envoy", 0, tr("shop-a", "create-order"), tr("shop-a", "list-orders"))
	expectHeaders(t, res, map[string]string{
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9",
		"RateLimit-Policy": `"create-order";q=200;w=3600, "list-orders";q=10;w=60`,
		"RateLimit":        `"create-order";r=198;t=36, "list-orders";r=9;t=6`,
	})
	if l := res.Statuses[1].CurrentLimit; l.RequestsPerUnit != 10 || l.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("current_limit %v", l)
	}
	if l := res.Statuses[0].CurrentLimit; l.RequestsPerUnit != 200 || l.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("current_limit %v", l)
	}
}

func TestRLSDomains(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("r", "shop-a", "create-order", 5, slow)+rule("s", "shop-a", "api", 5, slow))
	o := e.rlsOptions(srv.Addr())
	o.RLSDomainsFile = e.writeDomains(t, `
domains:
  - name: edge
    tenantKey: api_key
    routeKey: generic_key
    defaultRoute: api
  - name: internal
`)
	gw := start(t, o, testLogger(t))
	c := rlsClient(t, gw)

	res := call(t, c, "edge", 0, entries("generic_key", "create-order", "api_key", "shop-a", "remote_address", "10.1.2.3"))
	if remainings(res) != "4" {
		t.Fatalf("edge: remaining %s", remainings(res))
	}
	// No route entry: the domain's default route.
	if res := call(t, c, "edge", 0, entries("api_key", "shop-a")); remainings(res) != "4" || res.Statuses[0].CurrentLimit.Name != "api" {
		t.Fatalf("edge default route: remaining %s, limit %v", remainings(res), res.Statuses[0].CurrentLimit)
	}
	// A domain without keys configured takes the defaults.
	if res := call(t, c, "internal", 0, tr("shop-a", "create-order")); remainings(res) != "3" {
		t.Fatalf("internal: remaining %s", remainings(res))
	}
	refused(t, c, &rlsv3.RateLimitRequest{Domain: "other", Descriptors: []*ratelimitv3.RateLimitDescriptor{tr("shop-a", "create-order")}},
		`unknown domain "other"`)
	refused(t, c, &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{tr("shop-a", "create-order")}},
		"domain: empty")
	refused(t, c, &rlsv3.RateLimitRequest{Domain: "internal", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("tenant", "shop-a")}},
		`descriptors[0]: no "route" entry: it names the route in domain "internal", which has no defaultRoute`)
	refused(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{tr("shop-a", "create-order")}},
		`no "api_key" entry`)

	// Route labels: "rls:<domain>", bounded by the configuration.
	for series, want := range map[string]float64{
		`tollgate_gateway_decisions_total{result="allowed",route="rls:edge",source="redis"}`:     2,
		`tollgate_gateway_decisions_total{result="allowed",route="rls:internal",source="redis"}`: 1,
		`tollgate_gateway_decisions_total{result="allowed",route="rls",source="redis"}`:          0,
	} {
		if v := metricValue(t, gw, series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}

	// The file is reloaded: a new domain is served, a bad file is refused
	// and the last good one stays.
	e.writeDomains(t, "domains: [{name: late}]\n")
	waitFor(t, 10*time.Second, "domains reloaded", func() bool {
		_, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "late", Descriptors: []*ratelimitv3.RateLimitDescriptor{tr("shop-a", "create-order")}})
		return err == nil
	})
	e.writeDomains(t, "domains: [{name: late, tenantkey: x}]\n")
	waitFor(t, 10*time.Second, "reload error counted", func() bool {
		return metricValue(t, gw, `tollgate_gateway_reload_errors_total{source="rls-domains"}`) == 1
	})
	call(t, c, "late", 0, tr("shop-a", "create-order"))
}

func TestRLSRefusesMalformedRequests(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("t", "*", "*", 5, slow))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	c := rlsClient(t, gw)
	r := func(addend uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "envoy", HitsAddend: addend, Descriptors: ds}
	}
	many := make([]*ratelimitv3.RateLimitDescriptor, rls.MaxDescriptors+1)
	for i := range many {
		many[i] = tr("good", "r")
	}
	wide := tr("good", "r")
	for len(wide.Entries) <= rls.MaxEntries {
		wide.Entries = append(wide.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "x", Value: "y"})
	}
	negative := tr("good", "r")
	negative.IsNegativeHits = true
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{tr("good", "r")}}, "domain: empty"},
		{"no descriptors", r(0), "no descriptors: a request needs at least one"},
		{"too many descriptors", r(0, many...), "65 descriptors: at most 64 per request"},
		{"too many entries", r(0, wide), "descriptors[0]: 33 entries: at most 32 per descriptor"},
		{"huge request addend", r(1_000_001, tr("good", "r")), "hits_addend too large: 1000001, at most 1000000"},
		{"huge descriptor addend", r(0, hits(tr("good", "r"), 1<<62)), "descriptors[0]: hits_addend too large"},
		{"negative hits", r(0, negative), "is_negative_hits is not supported"},
		{"empty descriptor", r(0, entries()), `descriptors[0]: no "tenant" entry`},
		{"no tenant", r(0, entries("route", "r")), `no "tenant" entry`},
		{"no route", r(0, entries("tenant", "good")), `no "route" entry`},
		{"brace in tenant", r(0, tr("sh{op}", "r")), `the "tenant" value is not a valid tenant id: character '{' at offset 2`},
		{"colon in tenant", r(0, tr("a:b", "r")), `character ':' at offset 1`},
		{"colon in route", r(0, tr("good", "r:1")), `the "route" value "r:1" is not a valid route id: character ':'`},
		{"wildcard tenant", r(0, tr("*", "r")), "character '*'"},
		{"space in route", r(0, tr("good", "a b")), "character ' '"},
		{"empty route", r(0, tr("good", "")), "not a valid route id: empty"},
		{"long tenant", r(0, tr(strings.Repeat("a", 65), "r")), "longer than 64 characters"},
		{"non-ASCII tenant", r(0, tr("café", "r")), "non-ASCII byte at offset 3 is not allowed"},
		{"duplicate route", r(0, entries("tenant", "good", "route", "r", "route", "s")), `entry "route" appears twice`},
		// A bad descriptor refuses the whole request: the good one before
		// it takes nothing.
		{"bad second descriptor", r(0, tr("good", "r"), tr("good", "{r}")), "descriptors[1]: "},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, c, tc.req, tc.want) })
	}
	// Nothing was taken, and the service still answers.
	if res := call(t, c, "envoy", 0, tr("good", "r")); res.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("after the refused requests: remaining %d, want 4", res.Statuses[0].LimitRemaining)
	}
	if n := srv.Client(t).Keys(t.Context(), "*").Val(); len(n) != 1 || n[0] != "rl:{good}" {
		t.Fatalf("Redis keys %v, want only rl:{good} (good's buckets)", n)
	}
}

func TestRLSShadowRule(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1",
		rule("s", "shadowed", "r", 1, slow, "mode: Shadow")+rule("e", "enforced", "r", 5, slow))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	c := rlsClient(t, gw)
	res := call(t, c, "envoy", 0, tr("shadowed", "r"))
	expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0"})
	for range 3 {
		res = call(t, c, "envoy", 0, tr("shadowed", "r"))
		if res.OverallCode != ok || statusCodes(res) != "OK" {
			t.Fatalf("a Shadow rule rejected: %v", res.OverallCode)
		}
		expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Shadow": "would-reject"})
	}
	// Next to an enforced descriptor: still OK, still marked.
	res = call(t, c, "envoy", 0, tr("enforced", "r"), tr("shadowed", "r"))
	if res.OverallCode != ok || statusCodes(res) != "OK OK" {
		t.Fatalf("%v %s", res.OverallCode, statusCodes(res))
	}
	if headers(t, res)["X-RateLimit-Shadow"] != "would-reject" {
		t.Fatal("no X-RateLimit-Shadow")
	}
	if v := metricValue(t, gw, `tollgate_gateway_decisions_total{result="shadow_rejected",route="rls",source="redis"}`); v != 4 {
		t.Fatalf("shadow_rejected metric %v, want 4", v)
	}
}

func TestRLSFailureModesWithRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1",
		rule("open", "open", "r", 1, slow, "failureMode: FailOpen")+
			rule("closed", "closed", "r", 1000, "refillPerSecond: 1000", "failureMode: FailClosed")+
			rule("local", "local", "r", 3, slow))
	o := e.rlsOptions(srv.Addr())
	o.RedisTimeout = time.Second
	gw := start(t, o, testLogger(t))
	c := rlsClient(t, gw)
	if res := call(t, c, "envoy", 0, tr("closed", "r")); res.OverallCode != ok {
		t.Fatalf("with Redis up: %v", res.OverallCode)
	}
	srv.Kill()
	for i := range 10 {
		res := call(t, c, "envoy", 0, tr("open", "r"))
		if res.OverallCode != ok {
			t.Fatalf("FailOpen, call %d with Redis down: %v", i+1, res.OverallCode)
		}
		res = call(t, c, "envoy", 0, tr("closed", "r"))
		if res.OverallCode != over {
			t.Fatalf("FailClosed, call %d with Redis down: %v", i+1, res.OverallCode)
		}
		expectHeaders(t, res, map[string]string{"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "0", "Retry-After": "1"})
	}
	// Both in one request: OVER_LIMIT, the FailOpen descriptor OK.
	res := call(t, c, "envoy", 0, tr("open", "r"), tr("closed", "r"))
	if res.OverallCode != over || statusCodes(res) != "OK OVER_LIMIT" {
		t.Fatalf("%v %s", res.OverallCode, statusCodes(res))
	}
	// LocalFallback: the local bucket (1 replica: the whole rule).
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, ok, over} {
		if res := call(t, c, "envoy", 0, tr("local", "r")); res.OverallCode != want {
			t.Fatalf("LocalFallback call %d: %v, want %v", i+1, res.OverallCode, want)
		}
	}
	for series, want := range map[string]float64{
		`tollgate_gateway_decisions_total{result="allowed",route="rls",source="fail-open"}`:    11,
		`tollgate_gateway_decisions_total{result="rejected",route="rls",source="fail-closed"}`: 11,
		`tollgate_gateway_decisions_total{result="allowed",route="rls",source="local"}`:        3,
	} {
		if v := metricValue(t, gw, series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
}

// TestRLSExactUnderConcurrency: 1,000 concurrent calls against a bucket of
// C admit exactly C, over one shared connection, as Envoy sends them.
func TestRLSExactUnderConcurrency(t *testing.T) {
	const calls, capacity = 1000, 137
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("t", "hot", "r", capacity, slow)+rule("u", "hot2", "r", 2*capacity, slow))
	for _, batching := range []bool{true, false} {
		t.Run(map[bool]string{true: "batching", false: "classic"}[batching], func(t *testing.T) {
			_ = srv.Client(t).FlushAll(t.Context())
			o := e.rlsOptions(srv.Addr())
			o.Batching = batching
			gw := start(t, o, testLogger(t))
			c := rlsClient(t, gw)
			var mu sync.Mutex
			admitted := map[string]int{}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range calls {
				wg.Go(func() {
					<-start
					// Half single, half with a second descriptor of cost 2.
					ds := []*ratelimitv3.RateLimitDescriptor{tr("hot", "r")}
					if i%2 == 1 {
						ds = append(ds, hits(tr("hot2", "r"), 2))
					}
					res, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "envoy", Descriptors: ds})
					if err != nil {
						t.Errorf("call %d: %v", i, err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					for j, st := range res.Statuses {
						if st.Code == ok {
							admitted[ds[j].Entries[0].Value]++
						}
					}
				})
			}
			close(start)
			wg.Wait()
			if admitted["hot"] != capacity || admitted["hot2"] != capacity {
				t.Fatalf("admitted %v of %d concurrent calls, want exactly %d each", admitted, calls, capacity)
			}
		})
	}
}

func TestRLSHealthService(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("t", "a", "r", 5, slow))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	h := healthpb.NewHealthClient(rlsConn(t, gw))
	for _, svc := range []string{"", rls.ServiceName} {
		res, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v, want SERVING", svc, res, err)
		}
	}
	// Shutting down: calls stop, the listener closes.
	gw.stop()
	_, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err == nil {
		t.Fatal("health check answered after the gateway stopped")
	}
}

func TestRLSOptions(t *testing.T) {
	e := newEnv(t, "http://127.0.0.1:1", "")
	for _, tc := range []struct {
		name string
		edit func(*gateway.Options)
		want string
	}{
		{"neither routes nor RLS", func(o *gateway.Options) { o.RoutesFile = "" }, "--routes is required (or --gateway-api, or --rls-listen"},
		{"Gateway API and routes", func(o *gateway.Options) { o.GatewayAPI, o.RouteTable = true, "t" }, "--gateway-api and --routes exclude each other"},
		{"Gateway API standalone", func(o *gateway.Options) { o.GatewayAPI, o.RouteTable, o.RoutesFile, o.RulesPath = true, "t", "", "x" },
			"--gateway-api needs Kubernetes"},
		{"domains without RLS", func(o *gateway.Options) { o.RLSDomainsFile = "x.yaml" }, "--rls-domains needs --rls-listen"},
		{"missing domains file", func(o *gateway.Options) {
			o.RLSListen, o.RLSDomainsFile = "127.0.0.1:0", e.dir+"/none.yaml"
		}, "--rls-domains: open"},
		{"bad domains file", func(o *gateway.Options) {
			o.RLSListen, o.RLSDomainsFile = "127.0.0.1:0", e.writeDomains(t, "domains: [{name: a, routeKey: tenant}]")
		}, `domains[0] (name "a"): tenantKey and routeKey are both "tenant"`},
		{"bad listen address", func(o *gateway.Options) { o.RLSListen = "127.0.0.1:-1" }, "--rls-listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := e.options("127.0.0.1:1")
			tc.edit(&o)
			_, err := gateway.New(o, testLogger(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
