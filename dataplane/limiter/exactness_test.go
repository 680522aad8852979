package limiter

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestNoScriptChargesOnce: a Cluster node that loses its scripts (failover,
// SCRIPT FLUSH) makes only its own commands fail with NOSCRIPT; re-sending
// the whole pipeline would charge the buckets on the other nodes twice.
func TestNoScriptChargesOnce(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	ctx := context.Background()
	_, bt := newChain(t, backend{client: client})
	var buckets []Bucket
	for i := range 12 {
		buckets = append(buckets, Bucket{Key: Key(fmt.Sprintf("tenant-%d", i), "r"), Capacity: 1000, RefillTokens: 1, RefillPeriodMs: 3600_000})
	}
	granted := make([]int64, len(buckets))
	for round := range 30 {
		// Lose the scripts on one node between rounds.
		node := cluster.Nodes()[round%3]
		if err := node.Client(t).ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		done := make(chan int, len(buckets))
		for i, b := range buckets {
			go func() {
				r, err := bt.Take(ctx, b, 1, 1)
				if err != nil {
					t.Error(err)
				} else if r.Granted > 0 {
					done <- i
					return
				}
				done <- -1
			}()
		}
		for range buckets {
			if i := <-done; i >= 0 {
				granted[i]++
			}
		}
	}
	for i, b := range buckets {
		st, err := Peek(ctx, client, b.Key)
		if err != nil {
			t.Fatal(err)
		}
		tokens := st.Tokens
		// The bucket refills by a fraction of a token meanwhile.
		if taken := math.Round(1000 - tokens); taken != float64(granted[i]) {
			t.Errorf("%s: Redis took %.0f tokens for %d granted decisions", b.Key, taken, granted[i])
		}
	}
}

// TestTTLFollowsRuleChange: a bucket drained under a fast refill (short
// expiry), then its rule changed to a slow refill: rejections alone must keep
// it alive for the new rule's refill time, not let it expire on the old
// expiry and come back full.
func TestTTLFollowsRuleChange(t *testing.T) {
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(t))
	ctx := context.Background()
	fast := Bucket{Key: Key("t", "ttl"), Capacity: 5, RefillTokens: 5, RefillPeriodMs: 1000}
	if got, err := r.Take(ctx, fast, 5, 5); err != nil || got.Granted != 5 {
		t.Fatalf("drain: %+v %v", got, err)
	}
	slowB := fast
	slowB.RefillTokens, slowB.RefillPeriodMs = 1, 3600_000
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if got, err := r.Take(ctx, slowB, 1, 1); err != nil || got.Granted != 0 {
			t.Fatalf("after the change to a slow refill: %+v %v, want rejected", got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestErrorsNeverNameTheTenant: a tenant id is never part of an error (which
// reaches logs, and the breaker's last-error line), even when Redis refuses
// the script on the tenant's key.
func TestErrorsNeverNameTheTenant(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	b := Bucket{Key: Key("secret-tenant", "r"), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 1000}
	if err := srv.Client(t).Set(ctx, b.Key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, bt := newChain(t, backend{client: srv.Client(t)})
	_, viaGoRedis := newChain(t, backend{client: srv.Client(t), viaGoRedis: true})
	for name, taker := range map[string]Taker{"one call per request": NewRedis(srv.Client(t)), "batched": bt, "batched through go-redis": viaGoRedis} {
		_, err := taker.Take(ctx, b, 1, 1)
		if err == nil {
			t.Fatalf("%s: no error on a key of the wrong type", name)
		}
		if strings.Contains(err.Error(), "secret-tenant") {
			t.Errorf("%s: error names the tenant: %v", name, err)
		}
	}
}

// TestLateGrantsAreNotLost: a request whose call Redis answers only after a
// stall is rejected (the breaker is closed: Redis is not known down), but
// the call still runs when Redis resumes and takes its token. That token
// must serve the next request of the bucket, not be lost: over the
// bucket's life the chain admits exactly its capacity, no fewer.
func TestLateGrantsAreNotLost(t *testing.T) {
	srv := redistest.Start(t)
	c := NewChain(ChainOptions{
		Client: srv.Client(t), Coalesce: true, EmptyBucketCache: true,
		Timeout: 20 * time.Millisecond, MaxWait: 3 * time.Second, PrefetchTTL: 5 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b := Bucket{Key: Key("t", "late"), Capacity: 3, RefillTokens: 1, RefillPeriodMs: 3600_000}
	if d, _ := c.Allow(ctx, b, 1); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	srv.Pause()
	d, _ := c.Allow(ctx, b, 1) // fails after Timeout + the PING's bound
	srv.Resume()
	if d.Allowed {
		t.Fatalf("request during the stall: %+v, want rejected (its call may still run)", d)
	}
	// The stalled call runs now and takes a token; wait until it has.
	rc := srv.Client(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := Peek(ctx, rc, b.Key)
		if err == nil && st.Tokens < 1.5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stalled call never ran: %+v (%v)", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if admitted := 1 + admitOf(ctx, c, b, 5); admitted != int(b.Capacity) {
		t.Errorf("admitted %d over the bucket's life, want its capacity %v (a late grant was lost)", admitted, b.Capacity)
	}
}

// admitOf sends n requests of cost 1 for b through c and returns how many
// were admitted.
func admitOf(ctx context.Context, c *Chain, b Bucket, n int) int {
	admitted := 0
	for range n {
		if d, _ := c.Allow(ctx, b, 1); d.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestInFlightBucketStartsEmpty: a request whose bucket has a call in
// flight to Redis, and which finds the breaker open (other buckets' calls
// failed meanwhile), must not be admitted from a fresh local bucket of
// capacity/N: the call in flight may be taking tokens in Redis right now,
// and the other replicas keep draining the bucket there. Only a bucket this
// gateway never sent to Redis starts at capacity/N. (Under a starved
// machine, three gateways admitted 64 and 83 of a bucket of 60 this way.)
func TestInFlightBucketStartsEmpty(t *testing.T) {
	srv := redistest.Start(t)
	c := NewChain(ChainOptions{
		Client: srv.Client(t), Coalesce: true, EmptyBucketCache: true,
		Timeout: 2 * time.Second, MaxWait: 5 * time.Second, FailuresToOpen: 3,
	})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b := Bucket{Key: Key("t", "in-flight"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
	srv.Pause()
	first := make(chan Outcome, 1)
	go func() {
		d, _ := c.Allow(ctx, b, 1)
		first <- d
	}()
	for c.Waited() == 0 {
		time.Sleep(time.Millisecond)
	}
	tripBreaker(c)
	d, _ := c.Allow(ctx, b, 1)
	srv.Resume()
	<-first
	if d.Allowed {
		t.Errorf("admitted locally from a bucket with a call in flight to Redis: %+v", d)
	}
	never := Bucket{Key: Key("t", "never-sent"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
	if d, _ := c.Allow(ctx, never, 1); !d.Allowed || d.Source != SourceLocal {
		t.Errorf("a bucket never sent to Redis, breaker open: %+v, want admitted locally", d)
	}
}

// TestMaxWaitBoundsAStalledDecision: Redis stalls and the watchdog would
// take far longer than MaxWait to call it silent; the decision still ends
// at MaxWait (rejected: the call may run), with no deadline on the
// request's own context. Whether the stalled call then runs (its token
// serves the next request) or reaches Redis after its deadline (it takes
// nothing), the bucket admits exactly its capacity over its life.
func TestMaxWaitBoundsAStalledDecision(t *testing.T) {
	srv := redistest.Start(t)
	c := NewChain(ChainOptions{
		Client: srv.Client(t), Coalesce: true, EmptyBucketCache: true,
		Timeout: time.Minute, MaxWait: 300 * time.Millisecond, PrefetchTTL: 5 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b := Bucket{Key: Key("t", "maxwait"), Capacity: 3, RefillTokens: 1, RefillPeriodMs: 3600_000}
	if d, _ := c.Allow(ctx, b, 1); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	srv.Pause()
	decided := make(chan Outcome, 1)
	go func() {
		d, _ := c.Allow(ctx, b, 1)
		decided <- d
	}()
	var d Outcome
	select {
	case d = <-decided:
	case <-time.After(20 * time.Second):
		srv.Resume()
		t.Fatal("a decision waited for a stalled Redis far beyond MaxWait")
	}
	srv.Resume()
	if d.Allowed {
		t.Fatalf("request during the stall: %+v, want rejected", d)
	}
	// Until the stalled call's reply is in (a grant, or expired).
	deadline := time.Now().Add(5 * time.Second)
	for _, _, answered := c.Stats(); answered < 2; _, _, answered = c.Stats() {
		if time.Now().After(deadline) {
			t.Fatal("the stalled call was never answered after Redis resumed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if admitted := 1 + admitOf(ctx, c, b, 5); admitted != int(b.Capacity) {
		t.Errorf("admitted %d over the bucket's life, want its capacity %v", admitted, b.Capacity)
	}
}

// TestOutageAfterPrefetchCountsHeldTokensOnce: a request of a prefetching
// bucket (a batch of 10 from 100) leaves 90 tokens in Redis and 9 held by
// this gateway. When Redis then goes down, the gateway spends the 9 it
// holds and its share of what Redis said was left (90 over 2 replicas:
// 45), 54 in all; the held tokens must not count a second time in the
// local bucket's share.
func TestOutageAfterPrefetchCountsHeldTokensOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := NewChain(ChainOptions{
		Client: srv.Client(t), Replicas: func() int { return 2 }, Coalesce: true, EmptyBucketCache: true,
		Timeout: 2 * time.Second, MaxWait: 5 * time.Second, PrefetchTTL: time.Hour,
	})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b := Bucket{Key: Key("t", "held"), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 3600_000, Prefetch: 10}
	if d, _ := c.Allow(ctx, b, 1); !d.Allowed || d.Source != SourceRedis || d.Remaining != 99 {
		t.Fatalf("first request: %+v, want admitted by Redis, 90 left there and 9 held", d)
	}
	if h := c.Held(ctx, b); h.Prefetched != 9 {
		t.Fatalf("held %+v, want 9 prefetched tokens", h)
	}
	if lh := c.LocalHeld(b); math.Floor(lh.Tokens) != 45 {
		t.Errorf("local bucket %+v after Redis said 90 were left, want its share of 2 replicas, 45", lh)
	}
	srv.Kill()
	tripBreaker(c)
	if admitted := admitOf(ctx, c, b, 200); admitted != 9+45 {
		t.Errorf("admitted %d during the outage, want the 9 held and the local share of 45 of Redis's 90", admitted)
	}
}
