package decision_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/procs/cluster"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// byClient keys a bucket by the X-Client header.
var byClient = snapshot.KeyPart{Kind: snapshot.PartHeader, Name: "X-Client"}

// scriptCalls is the number of script calls Redis has run (EVALSHA and
// EVAL, not counting those refused NOSCRIPT) since its statistics were
// last reset. The commands a script calls count in their own entries.
func scriptCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			x, _ := strconv.Atoi(v)
			switch k {
			case "calls":
				n += x
			case "failed_calls":
				n -= x
			}
		}
	}
	return n
}

// TestStackedRefusalIsOneScriptCall: a request of a tenant on a route
// refused by its tenant's budget (both buckets in the tenant's slot) is
// decided by one script call that leaves the route's bucket as it was:
// no take, no refund.
func TestStackedRefusalIsOneScriptCall(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := stackEngine(t, c, slow("*", "*", 10), slow("*", "*", 1, byTenant))
	req := &decision.Request{Tenant: "shop-a", Route: "r"}
	if !pass(t, e, req) {
		t.Fatal("first request refused")
	}
	route, err := limiter.Peek(context.Background(), c, limiter.Key("shop-a", "r"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if pass(t, e, req) {
		t.Fatal("second request passed the tenant's budget of 1")
	}
	if n := scriptCalls(t, c); n != 1 {
		t.Errorf("the refused request made %d script calls, want 1 (both buckets are in the tenant's slot)", n)
	}
	after, err := limiter.Peek(context.Background(), c, limiter.Key("shop-a", "r"))
	if err != nil {
		t.Fatal(err)
	}
	if after != route {
		t.Errorf("the route's bucket changed from %+v to %+v: the refused request took from it", route, after)
	}
}

// TestStackedRefusalNeverHoldsTokens: requests of one tenant on one route
// with exactly k tokens left, of two kinds: a client whose own budget is
// spent (every request of it is refused) and k fresh clients. With both
// limits in the tenant's slot, a refused request never takes the route's
// tokens even for a moment, so the k fresh clients all pass, however
// many refused requests run beside them (taken and refunded one after
// the other, the refused ones would hold the route's tokens while their
// budget says no, and refuse fresh clients for it).
func TestStackedRefusalNeverHoldsTokens(t *testing.T) {
	const k = 5
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := stackEngine(t, c, slow("*", "r", k+1), slow("*", "*", 1, byTenant, byClient))
	client := func(name string) *decision.Request {
		return &decision.Request{Tenant: "shop-a", Route: "r", Header: http.Header{"X-Client": {name}}}
	}
	if !pass(t, e, client("spent")) {
		t.Fatal("the spent client's first request refused")
	}
	// The route's bucket holds k: the fresh clients' k requests fit.
	var refused, admittedSpent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if pass(t, e, client("spent")) {
					admittedSpent.Add(1)
				}
				refused.Add(1)
			}
		}()
	}
	for refused.Load() < 100 {
		time.Sleep(time.Millisecond) // the refused requests run first
	}
	admitted := 0
	for i := range k {
		if pass(t, e, client(fmt.Sprintf("fresh-%d", i))) {
			admitted++
		}
	}
	close(stop)
	wg.Wait()
	if admittedSpent.Load() != 0 {
		t.Fatalf("the spent client was admitted %d times", admittedSpent.Load())
	}
	if admitted != k {
		t.Errorf("%d of %d fresh clients admitted with %d tokens on the route: a refused request held the route's tokens", admitted, k, k)
	}
}

// TestStackedExactWhileTheSlotMoves: three engines on a Redis Cluster of
// three masters decide a tenant's stacked limits (its route's 30 and its
// budget of 100, one slot) while that slot moves to another master with
// its keys: calls refused during the move (ASK, TRYAGAIN) are decided in
// order instead, and the counts stay exact: 30 admitted, 70 left in the
// budget.
func TestStackedExactWhileTheSlotMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Redis Cluster")
	}
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	rules := []snapshot.Rule{slow("*", "*", 30), slow("*", "*", 100, byTenant)}
	var engines []*decision.Engine
	var oneCalls atomic.Int64
	for range 3 {
		engines = append(engines, countingStackEngine(t, cl.Client(t), &oneCalls, rules...))
	}
	// Deciding in order gets the totals right too: the test is of the one
	// call only if requests were decided in one.
	t.Cleanup(func() {
		if oneCalls.Load() == 0 {
			t.Error("no stacked request was decided in one script call")
		}
	})
	req := &decision.Request{Tenant: "shop-b", Route: "r"}
	if !pass(t, engines[0], req) { // the keys exist before the move
		t.Fatal("first request refused")
	}
	slot, err := cl.Slot(limiter.Key("shop-b", "r"))
	if err != nil {
		t.Fatal(err)
	}
	owner, err := cl.Owner(slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters()
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0].Addr
	if to == owner.Addr {
		to = masters[1].Addr
	}
	moved := make(chan error, 1)
	go func() { moved <- cl.MoveSlot(ctx, slot, to, cluster.MoveOptions{Hold: 100 * time.Millisecond}) }()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 59 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // spread over the move
			if pass(t, engines[i%3], req) {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	if got := admitted.Load() + 1; got != 30 {
		t.Errorf("admitted %d, want the route's 30", got)
	}
	c := cl.Client(t)
	budget, err := decision.KeyFor(&rules[1], req)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]float64{limiter.Key("shop-b", "r"): 0, budget: 70} {
		st, err := limiter.Peek(ctx, c, key)
		if err != nil || math.Round(st.Tokens) != want {
			t.Errorf("%s holds %v (%v), want %v", key, st.Tokens, err, want)
		}
	}
}
