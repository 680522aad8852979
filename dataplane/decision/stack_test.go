package decision_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// slow is a rule that refills one token an hour: within a test, its
// capacity is all it admits.
func slow(tenant, route string, capacity int64, by ...snapshot.KeyPart) snapshot.Rule {
	return snapshot.Rule{Tenant: tenant, Route: route, Capacity: capacity, RefillTokens: 1, RefillPeriodMs: 3600_000,
		By: by, Source: "test/" + tenant + "-" + route + fmt.Sprint(len(by))}
}

var (
	byTenant  = snapshot.KeyPart{Kind: snapshot.PartTenant}
	byAddress = snapshot.KeyPart{Kind: snapshot.PartAddress, V4: 32, V6: 64}
)

// stackEngine is an engine over rs with a Redis chain.
func stackEngine(t *testing.T, c limiter.BatchClient, rs ...snapshot.Rule) *decision.Engine {
	t.Helper()
	return countingStackEngine(t, c, nil, rs...)
}

// countingStackEngine is stackEngine counting the stacks it decided in one
// script call into oneCalls (nil: not counted).
func countingStackEngine(t *testing.T, c limiter.BatchClient, oneCalls *atomic.Int64, rs ...snapshot.Rule) *decision.Engine {
	t.Helper()
	store := rules.NewStore(slow("*", "*", 1000))
	store.Replace(snapshot.Build(rs, 1))
	ch := limiter.NewChain(limiter.ChainOptions{Client: c, Coalesce: true, EmptyBucketCache: true, Timeout: 30 * time.Second, MaxWait: 30 * time.Second})
	t.Cleanup(func() { _ = ch.Close() })
	o := decision.Options{Rules: store, Limiter: ch}
	if oneCalls != nil {
		o.Stacked = func(one bool) {
			if one {
				oneCalls.Add(1)
			}
		}
	}
	return decision.New(o)
}

// pass sends one request through every limit that applies, as the proxy
// does, and reports whether it passed.
func pass(t *testing.T, e *decision.Engine, req *decision.Request) bool {
	t.Helper()
	var primary *snapshot.Rule
	if req.Tenant != "" {
		primary = e.RuleFor(req.Tenant, req.Route, nil)
	}
	limits, err := e.Limits(*req, primary)
	if err != nil {
		t.Fatal(err)
	}
	if limits == nil {
		if primary == nil {
			return true
		}
		d, err := e.DecideRule(context.Background(), req.Tenant, req.Route, primary, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	costs := make([]int64, len(limits))
	for i := range costs {
		costs[i] = 1
	}
	st, err := e.DecideStack(context.Background(), *req, limits, costs)
	if err != nil {
		t.Fatal(err)
	}
	return !st.Refused
}

// TestStackedLimitsAdmitTheMinimum: a tenant's per-route limit of 3, its
// budget across routes of 10 and a per-address limit of 5: every limit
// admits exactly what it allows, and a refused request takes nothing from
// the others, for limits in the tenant's slot (tenant x route and the
// tenant's budget) and in another (the address's).
func TestStackedLimitsAdmitTheMinimum(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := stackEngine(t, c,
		slow("*", "*", 3),
		slow("*", "*", 10, byTenant),
		slow("*", "login", 5, byAddress),
	)
	addr := netip.MustParseAddr("198.51.100.7")
	admitted := map[string]int{}
	// 4 routes x 5 requests: each route admits 3 (its own limit) until
	// the budget of 10 is spent.
	for i := range 20 {
		route := fmt.Sprintf("r%d", i%4)
		if pass(t, e, &decision.Request{Tenant: "shop-a", Route: route, Addr: addr}) {
			admitted[route]++
		}
	}
	total := 0
	for _, n := range admitted {
		total += n
	}
	if total != 10 {
		t.Fatalf("admitted %v (%d), want 10: the tenant's budget", admitted, total)
	}
	// The budget is spent: the per-route buckets of r0..r3 refused only
	// what they had to. r0..r2 admitted 3 each, r3 1: r3 has 2 left.
	st, err := limiter.Peek(context.Background(), c, limiter.Key("shop-a", "r3"))
	if err != nil || int(st.Tokens+0.5) != 3-admitted["r3"] {
		t.Fatalf("r3's bucket holds %v (%v), want %d: a request refused by the budget took a token from it", st.Tokens, err, 3-admitted["r3"])
	}
	// login: per address 5, and the tenant's own limits. Tenant shop-b
	// (fresh budget) from one address: 3 pass (its route limit), and the
	// address keeps 2.
	for range 5 {
		pass(t, e, &decision.Request{Tenant: "shop-b", Route: "login", Addr: addr})
	}
	// Anonymous requests from the same address: only the address limit
	// applies: 2 left.
	anon := 0
	for range 5 {
		if pass(t, e, &decision.Request{Route: "login", Addr: addr}) {
			anon++
		}
	}
	if anon != 2 {
		t.Fatalf("anonymous requests admitted %d, want the address's 2 left after shop-b's 3", anon)
	}
	// Another address is a bucket of its own.
	other := 0
	for range 7 {
		if pass(t, e, &decision.Request{Route: "login", Addr: netip.MustParseAddr("2001:db8::1")}) {
			other++
		}
	}
	if other != 5 {
		t.Fatalf("another address admitted %d, want 5", other)
	}
	// An anonymous request on a route no address rule limits is limited
	// by nothing.
	if !pass(t, e, &decision.Request{Route: "r0", Addr: addr}) {
		t.Fatal("an anonymous request without any applicable rule was refused")
	}
}

// TestStackedRefusalTakesNothing: after a refusal by the last limit, every
// bucket holds what it held before the request.
func TestStackedRefusalTakesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := stackEngine(t, c, slow("*", "*", 10), slow("*", "*", 10, byTenant), slow("*", "*", 1, byAddress))
	addr := netip.MustParseAddr("198.51.100.7")
	req := &decision.Request{Tenant: "shop-a", Route: "r", Addr: addr}
	if !pass(t, e, req) {
		t.Fatal("first request refused")
	}
	before := redisState(t, c)
	if pass(t, e, req) {
		t.Fatal("second request passed the address limit of 1")
	}
	if after := redisState(t, c); !sameState(before, after, 10) {
		t.Fatalf("a refused request changed Redis:\nbefore %v\nafter  %v", before, after)
	}
}

// TestStackedLocalFallbackShares: the local fallback, as each of 3
// gateways enforces it while Redis cannot answer, applies 1/N to each
// limit: a per-address 6 admits 2 per address, a tenant's budget of 9 across
// routes 3, a per-route 30 does not bind.
func TestStackedLocalFallbackShares(t *testing.T) {
	store := rules.NewStore(slow("*", "*", 1000))
	store.Replace(snapshot.Build([]snapshot.Rule{slow("*", "*", 30), slow("*", "*", 9, byTenant), slow("*", "login", 6, byAddress)}, 1))
	local := limiter.NewLocal(limiter.LocalOptions{Replicas: func() int { return 3 }})
	e := decision.New(decision.Options{Rules: store, Limiter: local, Replicas: func() int { return 3 }})
	perAddress := map[string]int{}
	for i := range 12 {
		a := netip.AddrFrom4([4]byte{198, 51, 100, byte(i % 3)})
		if pass(t, e, &decision.Request{Route: "login", Addr: a}) {
			perAddress[a.String()]++
		}
	}
	for a, n := range perAddress {
		if n != 2 {
			t.Errorf("address %s admitted %d, want 6/3 = 2", a, n)
		}
	}
	budget := 0
	for i := range 8 {
		if pass(t, e, &decision.Request{Tenant: "shop-a", Route: fmt.Sprintf("r%d", i%4), Addr: netip.MustParseAddr("192.0.2.1")}) {
			budget++
		}
	}
	if budget != 3 {
		t.Errorf("shop-a across routes admitted %d, want 9/3 = 3", budget)
	}
}
