package limiter

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestSlot: Redis's own examples (the cluster specification's CRC16 check
// value, hash tags) and the slots of tollgate's keys.
func TestSlot(t *testing.T) {
	cases := []struct {
		key  string
		slot uint16
	}{
		{"123456789", 0x31C3 % 16384}, // the specification's CRC16 check value
		{"foo", 12182},
		{"{user1000}.following", Slot("user1000")},
		{"foo{}{bar}", Slot("foo{}{bar}")}, // an empty tag: the whole key
		{"foo{{bar}}zap", Slot("{bar")},    // the first '{' to the first '}'
		{"foo{bar}{zap}", Slot("bar")},
		{"rl:{shop-a}:create-order", Slot("shop-a")},
		{"rl:{shop-a}:|tenant", Slot("rl:{shop-a}")},
	}
	for _, c := range cases {
		if got := Slot(c.key); got != c.slot {
			t.Errorf("Slot(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
}

// TestOneCall: which stacks of buckets one script call decides.
func TestOneCall(t *testing.T) {
	plain := func(key string) Want {
		return Want{Bucket: Bucket{Key: key, Capacity: 10, RefillTokens: 1, RefillPeriodMs: 1000}, Cost: 1}
	}
	with := func(w Want, f func(*Want)) Want { f(&w); return w }
	route, budget := plain(Key("shop-a", "r")), plain("rl:{shop-a}:|tenant|test/budget")
	address := plain("rl:{a:192.0.2.1/32}:|address|test/login")
	cases := []struct {
		name    string
		ws      []Want
		cluster bool // the store is a Redis Cluster
		want    bool
	}{
		{"tenant x route and the tenant's budget, one slot", []Want{route, budget}, true, true},
		{"the tenant's buckets and an address's: two slots", []Want{route, budget, address}, true, false},
		{"two slots on one server", []Want{route, address}, false, true},
		{"two tenants in a Cluster", []Want{route, plain(Key("shop-b", "r"))}, true, false},
		{"a shard (no hash tag)", []Want{route, with(budget, func(w *Want) { w.Bucket.Key, w.Bucket.Shards = ShardKey("shop-a", "r", "", 0), 4 })}, false, false},
		{"a quota", []Want{route, with(budget, func(w *Want) { w.Bucket.Quota.Key = "rq:{shop-a}:r" })}, false, false},
		{"a prefetch batch", []Want{with(route, func(w *Want) { w.Bucket.Prefetch = 50 }), budget}, false, false},
		{"a charge", []Want{with(route, func(w *Want) { w.Bucket.Charge = true }), budget}, false, false},
		{"a spread unit", []Want{with(route, func(w *Want) { w.Bucket.Unit = spreadUnit }), budget}, false, false},
		{"a cost of 0", []Want{with(route, func(w *Want) { w.Cost = 0 }), budget}, false, false},
		{"one bucket twice", []Want{route, budget, route}, false, false},
		{"a Shadow limit", []Want{route, with(budget, func(w *Want) { w.Shadow = true })}, true, true},
		{"nothing", nil, false, false},
	}
	for _, c := range cases {
		if got := oneCall(c.ws, c.cluster); got != c.want {
			t.Errorf("%s: oneCall = %v, want %v", c.name, got, c.want)
		}
	}
}

// stackWants are a tenant's route bucket (capacity route) and its budget
// across routes (capacity budget), in the tenant's slot, refilling one
// token an hour.
func stackWants(tenant string, route, budget float64) []Want {
	slow := func(key string, capacity float64) Want {
		return Want{Bucket: Bucket{Key: key, Capacity: capacity, RefillTokens: 1, RefillPeriodMs: 3600_000}, Cost: 1}
	}
	return []Want{slow(Key(tenant, "r"), route), slow("rl:{"+tenant+"}:|tenant|test/budget", budget)}
}

// tokens is what the bucket named key holds in Redis, to the token.
func tokens(t *testing.T, c redis.Cmdable, key string) float64 {
	t.Helper()
	st, err := Peek(context.Background(), c, key)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Found {
		return -1
	}
	return math.Round(st.Tokens)
}

// TestAllowAllTakesFromAllOrNone: one call takes from every bucket when
// all admit, from none when one refuses (which it names, with each
// bucket's tokens left and its wait); a Shadow bucket's refusal only
// reports; an Outcome it admitted is refunded like Allow's.
func TestAllowAllTakesFromAllOrNone(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	c := NewChain(ChainOptions{Client: client, Coalesce: true, EmptyBucketCache: true, Timeout: 30 * time.Second, MaxWait: 30 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	ws := stackWants("shop-a", 3, 2)
	route, budget := ws[0].Bucket.Key, ws[1].Bucket.Key
	for i, want := range []int{-1, -1, 1} {
		outs, refused, ok := c.AllowAll(ctx, ws)
		if !ok || refused != want {
			t.Fatalf("request %d: refused %d (ok %v), want %d", i, refused, ok, want)
		}
		if want < 0 && (!outs[0].Allowed || !outs[1].Allowed) {
			t.Fatalf("request %d admitted with outcomes %+v", i, outs)
		}
	}
	// The third: the budget of 2 refused; the route kept its 1.
	if got := []float64{tokens(t, client, route), tokens(t, client, budget)}; got[0] != 1 || got[1] != 0 {
		t.Fatalf("route and budget hold %v after a refusal by the budget, want [1 0]", got)
	}
	outs, _, _ := c.AllowAll(ctx, ws)
	if !outs[0].Allowed || outs[0].Taken() != 0 || outs[0].Remaining != 1 {
		t.Errorf("the route's outcome %+v: want admitted by itself, nothing taken, 1 left", outs[0])
	}
	if outs[1].Allowed || outs[1].RetryAfter <= 0 || outs[1].Remaining != 0 {
		t.Errorf("the budget's outcome %+v: want refused with a wait, 0 left", outs[1])
	}
	// A Shadow budget's refusal lets the request take from the route.
	ws[1].Shadow = true
	outs, refused, ok := c.AllowAll(ctx, ws)
	if !ok || refused != -1 || !outs[0].Allowed || outs[1].Allowed || tokens(t, client, route) != 0 {
		t.Fatalf("with a Shadow budget: refused %d (ok %v), outcomes %+v, route %v: want admitted by the route, which holds 0",
			refused, ok, outs, tokens(t, client, route))
	}
	if err := c.Refund(ctx, ws[0].Bucket, outs[0]); err != nil || tokens(t, client, route) != 1 {
		t.Fatalf("refund: %v, the route holds %v, want 1", err, tokens(t, client, route))
	}
	// A first bucket Redis refused in one call: the Cache knows it is
	// empty, and Allow refuses it without Redis.
	spent := stackWants("shop-c", 1, 10)
	if _, refused, _ := c.AllowAll(ctx, spent); refused != -1 {
		t.Fatalf("shop-c's first request refused by %d", refused)
	}
	if _, refused, _ := c.AllowAll(ctx, spent); refused != 0 {
		t.Fatalf("shop-c's second request refused by %d, want 0 (its route of 1)", refused)
	}
	if _, _, ok := c.AllowAll(ctx, spent); ok {
		t.Error("a first bucket the Cache refuses went to Redis in one call")
	}
	calls := c.Waited()
	if o, _ := c.Allow(ctx, spent[0].Bucket, 1); o.Allowed || c.Waited() != calls {
		t.Errorf("Allow of the spent route: %+v after %d calls to Redis, want refused without one", o, c.Waited()-calls)
	}
	// An open breaker: not in one call, nothing taken.
	tripBreaker(c)
	if _, _, ok := c.AllowAll(ctx, ws); ok {
		t.Error("decided in one call with the breaker open")
	}
}

// TestAllowAllExactOverCluster: three gateways' chains on a Redis Cluster
// of three masters, 60 requests of one tenant at once on a route of 30
// under a budget of 100: each request is one call in the tenant's slot;
// 30 pass and the 30 refused took nothing from the budget. Buckets in two
// slots are not decided in one call.
func TestAllowAllExactOverCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	var chains []*Chain
	for range 3 {
		c := NewChain(ChainOptions{Client: cluster.Client(t), Coalesce: true, EmptyBucketCache: true, Timeout: 30 * time.Second, MaxWait: 30 * time.Second})
		t.Cleanup(func() { _ = c.Close() })
		chains = append(chains, c)
	}
	ws := stackWants("shop-b", 30, 100)
	for _, key := range []string{ws[0].Bucket.Key, ws[1].Bucket.Key, "rl:{a:192.0.2.1/32}:|address|x", "rl:shop-b:r:3", "foo{{bar}}zap"} {
		if want, err := cluster.Client(t).ClusterKeySlot(ctx, key).Result(); err != nil || int64(Slot(key)) != want {
			t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT says %d (%v)", key, Slot(key), want, err)
		}
	}
	var admitted, notOne atomic.Int64
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, refused, ok := chains[i%3].AllowAll(ctx, ws)
			switch {
			case !ok:
				notOne.Add(1)
			case refused < 0:
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	client := cluster.Client(t)
	if notOne.Load() != 0 || admitted.Load() != 30 {
		t.Fatalf("admitted %d, %d not in one call: want 30, all in one call", admitted.Load(), notOne.Load())
	}
	if got := []float64{tokens(t, client, ws[0].Bucket.Key), tokens(t, client, ws[1].Bucket.Key)}; got[0] != 0 || got[1] != 70 {
		t.Fatalf("route and budget hold %v, want [0 70]", got)
	}
	other := append(ws[:1:1], Want{Bucket: Bucket{Key: fmt.Sprintf("rl:{a:%s}:|address|x", "192.0.2.1/32"), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 1000}, Cost: 1})
	if _, _, ok := chains[0].AllowAll(ctx, other); ok {
		t.Error("buckets in two slots of a Cluster were decided in one call")
	}
}

// TestStackScriptAnswersAsTheBucketScript: a bucket decided in a stack
// call gets token_bucket.lua's own answer, state and storage: fractional
// capacities, a bucket still in the 0.1 form (moved on its first take),
// the compat layout, a cost above what is left and one above the
// capacity. Twin buckets start alike; one is taken by the bucket script,
// the other in a stack beside a bucket that admits.
func TestStackScriptAnswersAsTheBucketScript(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	bt := NewBatcher(client, BatcherOptions{Timeout: 30 * time.Second, MaxWait: 30 * time.Second, ViaGoRedis: true})
	t.Cleanup(func() { _ = bt.Close() })
	cases := []struct {
		name     string
		capacity float64
		legacy   string // tokens of a 0.1 form written first ("": none)
		cost     int64
		layout   Layout
	}{
		{"fresh", 10, "", 1, LayoutPacked},
		{"fractional, 0.1 form", 2.5, "2.4", 2, LayoutPacked},
		{"fractional, short", 2.5, "0.7", 1, LayoutPacked},
		{"compat layout", 7, "3", 3, LayoutCompat},
		{"above the capacity", 3, "", 4, LayoutPacked},
	}
	for i, c := range cases {
		one, two := Key(fmt.Sprintf("one%d", i), "r"), Key(fmt.Sprintf("two%d", i), "r")
		if c.legacy != "" {
			now := time.Now().UnixMilli() - 10 // Redis's clock and this machine's agree here
			for _, k := range []string{one, two} {
				client.HSet(ctx, k, "tokens", c.legacy, "ts", now)
			}
		}
		b := func(key string) Bucket {
			return Bucket{Key: key, Capacity: c.capacity, RefillTokens: 1, RefillPeriodMs: 3600_000}
		}
		r := &Redis{client: client, Layout: c.layout}
		want, err := r.Take(ctx, b(one), c.cost, c.cost)
		if err != nil {
			t.Fatal(err)
		}
		bt.opts.Layout = c.layout
		rs, _, err := bt.takeAll(ctx, "", []Want{{Bucket: b(two), Cost: c.cost}, {Bucket: b(fmt.Sprintf("rl:{two%d}:|x", i)), Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		got := rs[0]
		near := func(a, b int64) bool { return (a < 0) == (b < 0) && max(a-b, b-a) < 1000 } // the calls' times differ
		if got.Granted != want.Granted || got.Remaining != want.Remaining || !near(got.WaitMs, want.WaitMs) || !near(got.ResetMs, want.ResetMs) {
			t.Errorf("%s: stacked %+v, alone %+v", c.name, got, want)
		}
		st1, err1 := Peek(ctx, client, one)
		st2, err2 := Peek(ctx, client, two)
		if err1 != nil || err2 != nil || st1.Found != st2.Found || math.Abs(st1.Tokens-st2.Tokens) > 1e-3 {
			t.Errorf("%s: stored %+v (%v) stacked, %+v (%v) alone", c.name, st2, err2, st1, err1)
		}
		n1, _ := client.Exists(ctx, one).Result()
		n2, _ := client.Exists(ctx, two).Result()
		if n1 != n2 {
			t.Errorf("%s: the 0.1 form exists %d times stacked, %d alone", c.name, n2, n1)
		}
	}
}

// TestStackScriptLoadsPastShortDeadlines: when no call can wait long
// enough for its EVALSHA's NOSCRIPT and an EVAL after it (a wait of a
// nanosecond here; a slow Redis in production), the script is still
// loaded, in the background, and loaded again after Redis lost it, which
// the Batcher's own NOSCRIPT replies say (their pipelines wait for them
// past their callers' deadlines).
func TestStackScriptLoadsPastShortDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	c := NewChain(ChainOptions{Client: client, Coalesce: true, Timeout: time.Second, MaxWait: time.Nanosecond})
	t.Cleanup(func() { _ = c.Close() })
	loaded := func() bool {
		ok, err := client.ScriptExists(ctx, tokenBucketStackSHA).Result()
		return err == nil && ok[0]
	}
	for round := range 2 {
		deadline := time.Now().Add(10 * time.Second)
		for !loaded() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the stacked-limits script was never loaded", round)
			}
			if _, _, ok := c.AllowAll(ctx, stackWants("shop-a", 10, 10)); ok {
				t.Fatalf("round %d: decided in one call within a nanosecond", round)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// Decisions of one bucket: their pipeline gets NOSCRIPT (once one
		// is sent: within a nanosecond, most give up before).
		for deadline := time.Now().Add(10 * time.Second); c.batcher.stackLoaded.Load(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the Batcher's NOSCRIPT did not mark the stack script lost")
			}
			_, _ = c.batcher.Take(ctx, Bucket{Key: Key("shop-a", "one"), Capacity: 1, RefillTokens: 1, RefillPeriodMs: 1000}, 1, 1)
		}
	}
}
