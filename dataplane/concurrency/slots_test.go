package concurrency

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

func limit(key string, n int64, lease time.Duration) Limit {
	return Limit{Key: key, Max: n, Lease: lease}
}

// TestSlotsHoldTheLimitUnderContention: 200 goroutines on three Slots (three
// gateways) each take a slot, hold it briefly and release it; no more than
// the limit is ever held at once, and everything is released at the end.
func TestSlotsHoldTheLimitUnderContention(t *testing.T) {
	srv := redistest.Start(t)
	var gws []*Slots
	for range 3 {
		gws = append(gws, New(Options{Client: srv.Client(t), GatewayID: "gw", Timeout: 30 * time.Second}))
	}
	l := limit(Key("shop", "orders"), 5, 10*time.Second)
	var inFlight, maxSeen, admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot, out := gws[i%3].Acquire(context.Background(), l)
			if !out.Allowed {
				return
			}
			admitted.Add(1)
			n := inFlight.Add(1)
			for m := maxSeen.Load(); n > m && !maxSeen.CompareAndSwap(m, n); m = maxSeen.Load() {
			}
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
			slot.Release()
		}()
	}
	wg.Wait()
	if maxSeen.Load() > 5 || admitted.Load() < 5 {
		t.Fatalf("at most %d held at once and %d admitted; want at most 5 and at least 5", maxSeen.Load(), admitted.Load())
	}
	if n := srv.Client(t).ZCard(context.Background(), l.Key).Val(); n != 0 {
		t.Fatalf("%d slots left in Redis after every request ended", n)
	}
	for i, g := range gws {
		if n := g.InFlight(); n != 0 {
			t.Fatalf("gateway %d still counts %d in flight", i, n)
		}
	}
}

func TestReleaseOnce(t *testing.T) {
	srv := redistest.Start(t)
	s := New(Options{Client: srv.Client(t), GatewayID: "gw", Timeout: 30 * time.Second})
	l := limit(Key("shop", "orders"), 2, 10*time.Second)
	a, _ := s.Acquire(context.Background(), l)
	b, _ := s.Acquire(context.Background(), l)
	if _, out := s.Acquire(context.Background(), l); out.Allowed || out.Held != 2 || out.Source != limiter.SourceRedis {
		t.Fatalf("third acquire: %+v, want refused by Redis with 2 held", out)
	}
	a.Release()
	a.Release()
	if n := srv.Client(t).ZCard(context.Background(), l.Key).Val(); n != 1 || s.InFlight() != 1 {
		t.Fatalf("after releasing one slot twice: %d in Redis, %d counted; want 1 and 1", n, s.InFlight())
	}
	b.Release()
	var nilSlot *Slot
	nilSlot.Release() // a fail-open admission holds no slot
	if s.InFlight() != 0 {
		t.Fatalf("%d counted in flight, want 0", s.InFlight())
	}
}

// TestRenewalKeepsSlotsAlive: one RenewDue sends one call per key, for all
// of the key's slots, and moves their expiry to Redis's now plus the lease.
func TestRenewalKeepsSlotsAlive(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := New(Options{Client: c, GatewayID: "gw", Timeout: 30 * time.Second})
	ctx := context.Background()
	keys := []string{Key("shop", "orders"), Key("shop", "reports"), Key("other", "orders")}
	for _, k := range keys {
		for range 3 {
			if _, out := s.Acquire(ctx, limit(k, 5, time.Second)); !out.Allowed {
				t.Fatalf("acquire on %s: %+v", k, out)
			}
		}
	}
	before := c.ZRangeWithScores(ctx, keys[0], 0, -1).Val()
	// Nothing is due yet.
	if n, err := s.RenewDue(ctx, time.Now()); n != 0 || err != nil {
		t.Fatalf("renewed %d (%v) before anything was due", n, err)
	}
	var pipelines, renewedKeys int
	s.opts.OnRenew = func(keys int, err error) { pipelines++; renewedKeys += keys }
	n, err := s.RenewDue(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 9 || pipelines != 1 || renewedKeys != 3 {
		t.Fatalf("renewed %d slots of %d keys in %d pipelines (%v); want 9 of 3 in 1", n, renewedKeys, pipelines, err)
	}
	after := c.ZRangeWithScores(ctx, keys[0], 0, -1).Val()
	for i := range after {
		if after[i].Score < before[i].Score {
			t.Fatalf("renewal moved an expiry back: %v -> %v", before[i], after[i])
		}
	}
	// The script cache lost (a restart of Redis keeps nothing; here only the
	// cache): the renewal sends the script itself.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RenewDue(ctx, time.Now().Add(2*time.Hour)); err != nil || n != 9 {
		t.Fatalf("renewal after SCRIPT FLUSH: %d renewed, %v", n, err)
	}
}

// TestDeadGatewaySlotsExpire: a gateway that stops renewing (its Redis
// connection is gone, as when its process dies) without releasing leaves
// slots that expire one lease after their last write, in Redis time; then
// another gateway gets them.
func TestDeadGatewaySlotsExpire(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	dead := New(Options{Client: srv.Redis.Client(), GatewayID: "dead", Timeout: 30 * time.Second, Tick: 10 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go dead.Run(runCtx) // renewing, until its connection goes
	l := limit(Key("shop", "orders"), 3, time.Second)
	for range 3 {
		if _, out := dead.Acquire(ctx, l); !out.Allowed {
			t.Fatalf("acquire: %+v", out)
		}
	}
	_ = dead.opts.Client.(interface{ Close() error }).Close()
	c := srv.Client(t)
	lastWrite := redisNow(t, c) // the dead gateway writes nothing after this
	for _, z := range c.ZRangeWithScores(ctx, l.Key, 0, -1).Val() {
		if int64(z.Score) > lastWrite+l.Lease.Milliseconds() {
			t.Fatalf("slot %v expires later than the lease after the gateway's last write (%d)", z, lastWrite)
		}
	}
	live := New(Options{Client: c, GatewayID: "live", Timeout: 30 * time.Second})
	for redisNow(t, c) <= lastWrite+l.Lease.Milliseconds() {
		time.Sleep(50 * time.Millisecond)
	}
	slot, out := live.Acquire(ctx, l)
	if !out.Allowed || out.Held != 1 {
		t.Fatalf("acquire after the dead gateway's leases ran out: %+v, want granted with 1 held", out)
	}
	slot.Release()
}

func redisNow(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

// TestFailureModes: with Redis gone, LocalFallback caps each gateway at
// max(1, limit/N), FailOpen admits without a slot, FailClosed refuses.
// localShareOf7 acquires the local share of a limit of 7 slots over 3
// replicas, 2, and is refused a third; it returns the two slots.
func localShareOf7(t *testing.T, s *Slots, l Limit, what string) (*Slot, *Slot) {
	t.Helper()
	a, out := s.Acquire(context.Background(), l)
	b, out2 := s.Acquire(context.Background(), l)
	_, out3 := s.Acquire(context.Background(), l)
	if !out.Allowed || !out2.Allowed || out3.Allowed || out3.Limit != 2 || out3.Source != limiter.SourceLocal {
		t.Fatalf("%s: %+v %+v %+v, want 2 admitted of a local limit of 2", what, out, out2, out3)
	}
	return a, b
}

func TestFailureModes(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	srv.Kill()
	s := New(Options{Client: c, GatewayID: "gw", Replicas: func() int { return 3 }, Timeout: 5 * time.Second})
	ctx := context.Background()
	l := limit(Key("shop", "orders"), 7, time.Second) // 7/3: 2 per gateway
	a, b := localShareOf7(t, s, l, "local fallback")
	a.Release()
	a.Release()
	if _, out := s.Acquire(ctx, l); !out.Allowed {
		t.Fatalf("after a release: %+v, want admitted", out)
	}
	b.Release()
	l.FailureMode = snapshot.FailOpen
	if slot, out := s.Acquire(ctx, l); !out.Allowed || slot != nil || out.Source != limiter.SourceFailOpen {
		t.Fatalf("fail open: %+v, %v", out, slot)
	}
	l.FailureMode = snapshot.FailClosed
	if _, out := s.Acquire(ctx, l); out.Allowed || out.Source != limiter.SourceFailClosed {
		t.Fatalf("fail closed: %+v", out)
	}
}

func TestLocalOnly(t *testing.T) {
	s := New(Options{Replicas: func() int { return 10 }})
	l := limit(Key("shop", "orders"), 5, time.Second) // 5/10: at least 1
	a, out := s.Acquire(context.Background(), l)
	if _, out2 := s.Acquire(context.Background(), l); !out.Allowed || out2.Allowed || out2.Limit != 1 {
		t.Fatalf("local only: %+v %+v, want 1 of 1", out, out2)
	}
	a.Release()
	if s.InFlight() != 0 {
		t.Fatalf("%d in flight after release", s.InFlight())
	}
	if got := LocalLimit(100, 0); got != 100 {
		t.Fatalf("LocalLimit(100, 0) = %d", got)
	}
}

// TestKnownDownSkipsRedis: while Redis is known down (the limiter's breaker
// is open) an acquire does not call it: the local share decides at once,
// even though this Redis would never answer.
func TestKnownDownSkipsRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	srv.Pause() // a Redis that accepts connections and never answers
	defer srv.Resume()
	down := true
	s := New(Options{Client: c, GatewayID: "gw", Down: func(context.Context, string) bool { return down }, Timeout: time.Hour})
	l := limit(Key("shop", "orders"), 2, time.Second)
	slot, out := s.Acquire(context.Background(), l)
	if !out.Allowed || out.Source != limiter.SourceLocal || out.Limit != 2 {
		t.Fatalf("acquire with Redis known down: %+v, want the local share", out)
	}
	slot.Release()
}

// TestRedisCluster: slot sets of many tenants spread over a Redis Cluster;
// acquire, one renewal pipeline (split by node by the client, the script
// sent again where a node lost it) and release all work across nodes.
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	s := New(Options{Client: c, GatewayID: "gw", Timeout: 30 * time.Second})
	ctx := context.Background()
	var slots []*Slot
	for i := range 20 {
		slot, out := s.Acquire(ctx, limit(Key("tenant-"+strconv.Itoa(i), "orders"), 1, 10*time.Second))
		if !out.Allowed {
			t.Fatalf("acquire %d: %+v", i, out)
		}
		slots = append(slots, slot)
	}
	if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RenewDue(ctx, time.Now().Add(time.Hour)); err != nil || n != 20 {
		t.Fatalf("renewed %d of 20 slots over the cluster: %v", n, err)
	}
	for _, sl := range slots {
		sl.Release()
	}
	for i := range 20 {
		if n := c.ZCard(ctx, Key("tenant-"+strconv.Itoa(i), "orders")).Val(); n != 0 {
			t.Fatalf("tenant-%d: %d slots left after release", i, n)
		}
	}
}

// TestSlowRedisRefuses: a call that gets no answer in time, while Redis is
// not known to be down, refuses the request (it may have taken a slot, so
// admitting locally could exceed the limit); the call, run late when Redis
// wakes up, is past its deadline and takes nothing.
func TestSlowRedisRefuses(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := New(Options{Client: c, GatewayID: "gw", Timeout: 2 * time.Second})
	l := limit(Key("shop", "orders"), 5, 10*time.Second)
	first, out := s.Acquire(context.Background(), l) // learns Redis's clock
	if !out.Allowed {
		t.Fatalf("first acquire: %+v", out)
	}
	first.Release()
	srv.Pause()
	_, out = s.Acquire(context.Background(), l)
	srv.Resume()
	if out.Allowed || out.Source != limiter.SourceLocal || out.Limit != 5 {
		t.Fatalf("acquire with Redis silent: %+v, want refused", out)
	}
	if s.InFlight() != 0 {
		t.Fatalf("%d counted in flight after a refused acquire", s.InFlight())
	}
}

// TestSlowReplyKeepsDeadlines: one reply that arrived late (a loaded
// machine, a GC pause) must not make the next calls' deadlines early: with
// the last reply's delay as the estimate, every acquire after it ran "too
// late" in Redis time and was refused at once.
//
// The late reply is 800 ms late: later than the Timeout, so that the old
// estimate refuses, and less than the 1 s drop that the estimate takes for
// Redis's clock going back (a reply exactly 1 s late plus the TIME call's
// own delay was such a drop, and the test failed under load). A few
// acquires first give the estimate a good reply to keep on a loaded machine.
func TestSlowReplyKeepsDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	s := New(Options{Client: srv.Client(t), GatewayID: "gw", Timeout: 500 * time.Millisecond})
	l := limit(Key("shop", "slow-reply"), 5, 10*time.Second)
	for range 5 { // learns Redis's clock
		first, out := s.Acquire(context.Background(), l)
		if !out.Allowed {
			t.Fatalf("first acquires: %+v", out)
		}
		first.Release()
	}
	now, err := srv.Client(t).Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	s.clock.Observe(now.UnixMilli(), time.Now().Add(800*time.Millisecond))
	slot, out := s.Acquire(context.Background(), l)
	if !out.Allowed {
		t.Fatalf("acquire after a slow reply: %+v, want allowed", out)
	}
	slot.Release()
}

// TestScriptErrorFollowsTheFailureMode: the slot set's key holds a value of
// another type (WRONGTYPE in the script, on every call), while Redis is
// healthy. A LocalFallback rule's requests then take the local share, as
// when Redis cannot answer, instead of 429 on every request; every failed
// call is reported.
func TestScriptErrorFollowsTheFailureMode(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	var reported atomic.Int64
	s := New(Options{Client: c, GatewayID: "gw", Replicas: func() int { return 3 }, Timeout: 5 * time.Second,
		ScriptError: func(key string, err error) {
			if key != Key("shop", "orders") || !limiter.IsScriptError(err) {
				t.Errorf("reported %s: %v", key, err)
			}
			reported.Add(1)
		}})
	l := limit(Key("shop", "orders"), 7, time.Second) // 7/3: 2 per gateway
	if err := c.Set(ctx, l.Key, "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	a, _ := localShareOf7(t, s, l, "script error, LocalFallback")
	a.Release()
	if _, out := s.Acquire(ctx, l); !out.Allowed || out.Source != limiter.SourceLocal {
		t.Fatalf("after a release: %+v, want admitted locally", out)
	}
	if n := reported.Load(); n != 4 {
		t.Errorf("%d script errors reported, want one per acquire, 4", n)
	}
}
