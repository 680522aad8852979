package decision_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// oneRule serves the same rule for every tenant and route.
type oneRule struct{ r snapshot.Rule }

func (o *oneRule) Lookup(string, string) *snapshot.Rule { return &o.r }

func (o *oneRule) Extra(_, _ string, _ snapshot.Claims, dst []*snapshot.Rule) []*snapshot.Rule {
	return dst
}

func (o *oneRule) LookupClaims(string, string, snapshot.Claims) *snapshot.Rule { return &o.r }

// chain is a gateway's batched limiter chain on client, with deadlines long
// enough that a slow test machine never falls back: these tests are about
// Redis decisions.
func chain(t *testing.T, client limiter.BatchClient) *limiter.Chain {
	c := limiter.NewChain(limiter.ChainOptions{
		Client: client, Coalesce: true, EmptyBucketCache: true, Timeout: 30 * time.Second, MaxWait: 30 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func redisTime(t *testing.T, c redis.Cmdable) time.Time {
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func TestPrefetchAccuracyAcrossTwentyInstances(t *testing.T) {
	srv := redistest.Start(t)
	// The capacity holds a second of refill, so a generator a loaded
	// machine stalls loses no token to a full bucket.
	const instances, capacity, perSecond = 20, 2000, 2000
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: capacity, RefillTokens: perSecond, RefillPeriodMs: 1000,
		Prefetch: snapshot.PrefetchAuto}}
	var engines []*decision.Engine
	for range instances {
		engines = append(engines, decision.New(decision.Options{
			Rules: rule, Limiter: chain(t, srv.Client(t)), Replicas: func() int { return instances },
		}))
	}
	// Auto: 5% x max(2000, 2000/s) / 20 replicas = 5 tokens per call.
	const batch = 5
	warmUp(t, engines)

	var admitted, calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t0 := redisTime(t, srv.Client(t))
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Paced load, three times each instance's share: a spinning
			// generator would starve the Redis client of CPU on a small
			// machine and measure the generator, not the limiter.
			tick := time.NewTicker(time.Second / (3 * perSecond / instances))
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				d, _, err := e.Decide(context.Background(), "hot", "r", 1)
				if err != nil {
					t.Error(err)
					return
				}
				calls.Add(1)
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	time.Sleep(3 * time.Second)
	// The window is bracketed by Redis's clock: the load surely ran from t0
	// to tStop, and surely ended by t1.
	tStop := redisTime(t, srv.Client(t))
	close(stop)
	wg.Wait()
	t1 := redisTime(t, srv.Client(t))

	low := capacity + perSecond*tStop.Sub(t0).Seconds()
	high := capacity + perSecond*t1.Sub(t0).Seconds()
	got := float64(admitted.Load())
	t.Logf("admitted %.0f of %d decisions; ideal %.0f to %.0f (ratio %.4f to %.4f)", got, calls.Load(), low, high, got/high, got/low)
	// Below the ideal: the batches held when the run stops (instances x
	// batch, 1.25 %) and batches that expire unspent when a loaded machine
	// stalls the generator. How much a stall costs is the machine's, not
	// the limiter's: the floor is 3 % below the ideal while the generator
	// kept at least 90 % of its pace, and 10 % below when it did not
	// (CI saw 0.94 of the ideal at a load average of 15).
	floor := 0.97
	pace := float64(calls.Load()) / (3 * perSecond * tStop.Sub(t0).Seconds())
	if pace < 0.9 {
		floor = 0.90
		t.Logf("the generator kept %.0f%% of its pace: floor %.2f of the ideal", 100*pace, floor)
	}
	if got > high*1.05 || got < low*floor {
		t.Fatalf("admitted %.0f, ideal %.0f to %.0f: want within +5%%/-%.0f%%", got, low, high, 100*(1-floor))
	}
	if got > high+instances*batch {
		t.Fatalf("admitted %.0f exceeds the ideal %.0f by more than instances x batch (%d)", got, high, instances*batch)
	}
}

// closedLoop runs senders goroutines per engine for two seconds, each
// asking for cost tokens of tenant "t" on route "r" as fast as it can and
// pausing for the Retry-After (at least 1ms, at most maxPause) after a
// rejection; requireRetryAfter fails the test on a rejection without one.
// It returns the cost admitted and the ideal range of rule, the engines'
// one rule: capacity + refill over the run, bracketed by Redis's clock.
func closedLoop(t *testing.T, srv *redistest.Server, engines []*decision.Engine, rule *snapshot.Rule, senders int, cost int64, maxPause time.Duration, requireRetryAfter bool) (got, low, high float64) {
	t.Helper()
	var admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t0 := redisTime(t, srv.Client(t))
	for _, e := range engines {
		for range senders {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					d, _, err := e.Decide(context.Background(), "t", "r", cost)
					switch {
					case err != nil:
						t.Error(err)
						return
					case d.Allowed:
						admitted.Add(cost)
					case requireRetryAfter && d.RetryAfter <= 0:
						t.Errorf("rejected without a Retry-After: %+v", d)
						return
					default:
						time.Sleep(min(max(d.RetryAfter, time.Millisecond), maxPause))
					}
				}
			})
		}
	}
	time.Sleep(2 * time.Second)
	tStop := redisTime(t, srv.Client(t))
	close(stop)
	wg.Wait()
	perSecond := float64(rule.RefillTokens) * 1000 / float64(rule.RefillPeriodMs)
	low = float64(rule.Capacity) + perSecond*tStop.Sub(t0).Seconds()
	high = float64(rule.Capacity) + perSecond*redisTime(t, srv.Client(t)).Sub(t0).Seconds()
	return float64(admitted.Load()), low, high
}

// warmUp makes one decision per engine on another bucket, so that connections
// are open and the script is loaded before a measured window starts: a
// bucket that nobody asks for while it is full loses its refill, and a
// window that starts before the first call would count that as error.
func warmUp(t *testing.T, engines []*decision.Engine) {
	for _, e := range engines {
		if _, _, err := e.Decide(context.Background(), "warm-up", "r", 1); err != nil {
			t.Fatal(err)
		}
	}
}

func TestShardingRejectsOnlyWhenEveryShardIsEmpty(t *testing.T) {
	srv := redistest.Start(t)
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: 40, RefillTokens: 1, RefillPeriodMs: 3600_000, Shards: 4}}
	// Always start at shard 0: the others must still be used.
	e := decision.New(decision.Options{Rules: rule, Limiter: chain(t, srv.Client(t)), Pick: func(int) int { return 0 }})
	for i := range 40 {
		if d, _, _ := e.Decide(context.Background(), "t", "r", 1); !d.Allowed {
			t.Fatalf("request %d rejected while shards still had tokens", i+1)
		}
	}
	d, _, _ := e.Decide(context.Background(), "t", "r", 1)
	if d.Allowed || d.RetryAfter <= 0 || d.Limit != 40 {
		t.Fatalf("41st request %+v, want rejected with a wait, limit 40", d)
	}
	keys := srv.Client(t).Keys(context.Background(), "rl:*").Val()
	if len(keys) != 4 {
		t.Fatalf("keys %v, want 4 shard keys", keys)
	}
}

// TestShardedAccuracy: four gateways, each with four senders asking as fast
// as they can (pausing briefly on a rejection), admit what a single bucket
// would. The capacity holds two seconds of refill, so a sender stalled by a
// loaded machine loses no token to a full bucket, and the rate is low
// enough for a loaded machine under the race detector to keep up with.
func TestShardedAccuracy(t *testing.T) {
	srv := redistest.Start(t)
	const capacity, perSecond = 200, 100
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: capacity, RefillTokens: perSecond, RefillPeriodMs: 1000, Shards: 4}}
	var engines []*decision.Engine
	for range 4 {
		engines = append(engines, decision.New(decision.Options{Rules: rule, Limiter: chain(t, srv.Client(t))}))
	}
	warmUp(t, engines)
	got, low, high := closedLoop(t, srv, engines, &rule.r, 4, 1, 10*time.Millisecond, false)
	t.Logf("sharded: admitted %.0f, ideal %.0f to %.0f", got, low, high)
	if got > high*1.05 || got < low*0.95 {
		t.Fatalf("admitted %.0f, ideal %.0f to %.0f: want within ±5%%", got, low, high)
	}
}

func TestRegionShares(t *testing.T) {
	srv := redistest.Start(t)
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: 100, RefillTokens: 1, RefillPeriodMs: 3600_000,
		Regions: []snapshot.RegionShare{{Name: "eu-west", Percent: 70}, {Name: "us-east", Percent: 30}}}}
	cases := []struct {
		region string
		want   int64  // admitted out of 200
		key    string // the bucket's key
	}{
		{"eu-west", 70, "rl:{t}:r@eu-west"},
		{"us-east", 30, "rl:{t}:r@us-east"},
		{"ap-south", 100, "rl:{t}:r"}, // not listed: the whole limit
	}
	for _, c := range cases {
		e := decision.New(decision.Options{Rules: rule, Limiter: chain(t, srv.Client(t)), Region: c.region})
		var got int64
		for range 200 {
			d, _, err := e.Decide(context.Background(), "t", "r", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				got++
				if d.Limit != c.want {
					t.Fatalf("%s: limit %d, want %d", c.region, d.Limit, c.want)
				}
			}
		}
		if got != c.want {
			t.Fatalf("region %s admitted %d, want %d", c.region, got, c.want)
		}
		if st, err := limiter.Peek(context.Background(), srv.Client(t), c.key); err != nil || !st.Found {
			t.Fatalf("region %s: bucket %s missing (%v)", c.region, c.key, err)
		}
	}
}

func TestClusterKeyPlacement(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	ctx := context.Background()
	sharded := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: 64, RefillTokens: 1, RefillPeriodMs: 3600_000, Shards: 16}}
	e := decision.New(decision.Options{Rules: sharded, Limiter: chain(t, client), Pick: func(int) int { return 0 }})
	for range 64 {
		if d, _, err := e.Decide(ctx, "big", "r", 1); err != nil || !d.Allowed {
			t.Fatalf("sharded decision on the cluster: %+v %v", d, err)
		}
	}
	// The 16 shard keys spread over the masters.
	nodes := map[string]bool{}
	for i := range 16 {
		nodes[nodeOf(t, client, limiter.ShardKey("big", "r", "", i))] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("16 shard keys on %d node(s), want them spread", len(nodes))
	}
	// A cost above one shard's capacity (4) takes from shards on several
	// masters, and gives back on all of them when the rule is short.
	spread := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: 64, RefillTokens: 1, RefillPeriodMs: 3600_000, Shards: 16}}
	es := decision.New(decision.Options{Rules: spread, Limiter: chain(t, client)})
	admitted := 0
	for range 8 {
		d, _, err := es.Decide(ctx, "spread", "r", 10)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		} else if d.RetryAfter <= 0 {
			t.Fatalf("spread rejection without a Retry-After: %+v", d)
		}
	}
	var left float64
	for i := range 16 {
		st, err := limiter.Peek(ctx, client, limiter.ShardKey("spread", "r", "", i))
		if err != nil {
			t.Fatal(err)
		}
		if !st.Found {
			st.Tokens = 4
		}
		left += st.Tokens
	}
	if admitted != 6 || left < 3.99 || left > 4.01 {
		t.Fatalf("cost 10 on 64 tokens in 16 shards over 3 masters: admitted %d with %.2f left, want 6 with 4 left", admitted, left)
	}
	// One tenant's plain buckets share a slot: one script could touch them all.
	slots := map[int64]bool{}
	for _, k := range []string{limiter.Key("shop-a", "a"), limiter.Key("shop-a", "b"), limiter.RegionKey("shop-a", "a", "eu")} {
		slots[client.ClusterKeySlot(ctx, k).Val()] = true
	}
	if len(slots) != 1 {
		t.Fatalf("one tenant's keys in %d slots, want 1", len(slots))
	}
}

// nodeOf returns the address of the master serving key.
func nodeOf(t *testing.T, c *redis.ClusterClient, key string) string {
	slot := c.ClusterKeySlot(context.Background(), key).Val()
	ranges, err := c.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			return r.Nodes[0].Addr
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return ""
}

// TestCostAboveOneShard: a cost larger than one shard's capacity but within
// the rule's is served from several shards; it must pass while the rule has
// the tokens, be rejected with a finite Retry-After when it has not, and
// take from Redis exactly what the admitted requests cost.
func TestCostAboveOneShard(t *testing.T) {
	for _, tc := range []struct {
		name           string
		capacity       int64
		shards         int32
		cost           int64
		admittedAtOnce int // requests of cost that pass on a full bucket
	}{
		{"cost 3, capacity 10, 4 shards of 2.5", 10, 4, 3, 3},
		{"cost 10 = capacity, 4 shards", 10, 4, 10, 1},
		{"cost 7, capacity 64, 64 shards of 1", 64, 64, 7, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: tc.capacity, RefillTokens: 1, RefillPeriodMs: 3600_000, Shards: tc.shards}}
			e := decision.New(decision.Options{Rules: rule, Limiter: chain(t, srv.Client(t))})
			ctx := context.Background()
			admitted := 0
			for range tc.admittedAtOnce + 3 {
				d, _, err := e.Decide(ctx, "t", "r", tc.cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
					continue
				}
				if d.RetryAfter <= 0 || d.RetryAfter > time.Duration(tc.cost)*time.Hour {
					t.Errorf("rejected with Retry-After %v, want finite and positive (at most %d h of refill)", d.RetryAfter, tc.cost)
				}
			}
			if admitted != tc.admittedAtOnce {
				t.Errorf("admitted %d requests of cost %d, want %d", admitted, tc.cost, tc.admittedAtOnce)
			}
			// Redis holds what was not taken: the admitted cost, no more
			// (a rejected request gives back what it took from some shards).
			var left float64
			for i := range int(tc.shards) {
				st, err := limiter.Peek(ctx, srv.Client(t), limiter.ShardKey("t", "r", "", i))
				if err != nil {
					t.Fatal(err)
				}
				if !st.Found {
					st.Tokens = float64(tc.capacity) / float64(tc.shards) // never touched: full
				}
				left += st.Tokens
			}
			if want := float64(tc.capacity - int64(admitted)*tc.cost); left < want-0.01 || left > want+0.01 {
				t.Errorf("Redis holds %.2f tokens, want %.2f (capacity − admitted cost)", left, want)
			}
		})
	}
}

// TestCostAboveOneShardLongRun: spread requests from several goroutines and
// gateways hold the rule's long-run rate: the cost admitted is the
// capacity plus the refill over the run (give-backs of racing requests may
// reject a request for a moment, never admit one beyond the limit).
func TestCostAboveOneShardLongRun(t *testing.T) {
	srv := redistest.Start(t)
	// 64 shards of 15.6 tokens, a cost of 20; a second of refill fits in
	// the bucket, so a stalled test loses no token to a full bucket.
	const capacity, perSecond, cost = 1000, 1000, 20
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: capacity, RefillTokens: perSecond, RefillPeriodMs: 1000, Shards: 64}}
	var engines []*decision.Engine
	for range 2 {
		engines = append(engines, decision.New(decision.Options{Rules: rule, Limiter: chain(t, srv.Client(t))}))
	}
	warmUp(t, engines)
	got, low, high := closedLoop(t, srv, engines, &rule.r, 3, cost, 50*time.Millisecond, true)
	t.Logf("spread: admitted cost %.0f, ideal %.0f to %.0f", got, low, high)
	// Never above the ideal. Below it by what the bucket holds at the end,
	// what racing requests held when the run stopped, and what shards that
	// no request touched for a second lost to their own capacity (a loaded
	// machine makes that more): at least 90 %.
	if got > high || got < 0.9*low {
		t.Fatalf("admitted cost %.0f, ideal %.0f to %.0f", got, low, high)
	}
}
