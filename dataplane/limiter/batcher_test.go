package limiter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// backend is a Redis deployment the limiter runs against, and how the
// Batcher sends to it.
type backend struct {
	name       string
	client     BatchClient
	viaGoRedis bool
}

// backends starts a single node (the Batcher's workers on connections of
// their own, and through go-redis as with Sentinel) and a three-master
// Redis Cluster.
func backends(t *testing.T) []backend {
	t.Helper()
	single, other := redistest.Start(t), redistest.Start(t)
	cluster := redistest.StartCluster(t, 3)
	return []backend{
		{name: "single node", client: single.Client(t)},
		{name: "single node through go-redis", client: other.Client(t), viaGoRedis: true},
		{name: "cluster", client: cluster.Client(t)},
	}
}

// newChain is the gateway's batched chain without the breaker.
func newChain(t *testing.T, be backend) (allower, *Batcher) {
	var c *Cache
	late := func(b *Bucket, r TakeResult) { c.KeepLate(b, r) }
	bt := NewBatcher(be.client, BatcherOptions{Timeout: 30 * time.Second, ViaGoRedis: be.viaGoRedis, Late: late})
	t.Cleanup(func() { _ = bt.Close() })
	c = NewCache(bt, CacheOptions{})
	return allow(c), bt
}

func TestBatchedChainIsExact(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			b := Bucket{Key: Key("shop-a", "exact"), Capacity: 37, RefillTokens: 1, RefillPeriodMs: 3600_000}
			var ls []Limiter
			for range 4 {
				c, _ := newChain(t, be)
				ls = append(ls, c)
			}
			if got := hammer(t, ls, b, 1000); got != 37 {
				t.Fatalf("admitted %d, want exactly 37", got)
			}
		})
	}
}

func TestCoalescingSavesRoundTrips(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			chain, bt := newChain(t, be)
			// Ten buckets, 2000 concurrent requests, enough tokens for all.
			var allowed atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 2000 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					b := Bucket{Key: Key("tenant-"+string(rune('a'+i%10)), "r"), Capacity: 1000, RefillTokens: 1, RefillPeriodMs: 3600_000}
					d, err := chain.Allow(context.Background(), b, 1)
					if err != nil {
						t.Error(err)
					} else if d.Allowed {
						allowed.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if allowed.Load() != 2000 {
				t.Fatalf("admitted %d of 2000 with tokens for all", allowed.Load())
			}
			rt, cmds, decisions := bt.Stats()
			t.Logf("%d decisions in %d round trips, %d script calls", decisions, rt, cmds)
			if decisions != 2000 || rt >= decisions/2 || cmds >= decisions/2 {
				t.Fatalf("%d round trips and %d script calls for %d decisions: want well below one per decision", rt, cmds, decisions)
			}
		})
	}
}

func TestBatcherRecoversFromScriptFlush(t *testing.T) {
	for _, viaGoRedis := range []bool{false, true} {
		t.Run(map[bool]string{false: "own connections", true: "through go-redis"}[viaGoRedis], func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client(t)
			chain, _ := newChain(t, backend{client: c, viaGoRedis: viaGoRedis})
			b := Bucket{Key: Key("t", "flush"), Capacity: 300, RefillTokens: 1, RefillPeriodMs: 3600_000}
			stop := flushScripts(c)
			got := hammer(t, []Limiter{chain}, b, 1000)
			flushes := stop()
			if got != 300 {
				t.Fatalf("admitted %d with SCRIPT FLUSH running, want exactly 300", got)
			}
			if flushes == 0 {
				t.Fatal("no SCRIPT FLUSH happened during the run")
			}
		})
	}
}

func TestEmptyBucketCacheIsExactAndSavesCalls(t *testing.T) {
	srv := redistest.Start(t)
	chain, bt := newChain(t, backend{client: srv.Client(t)})
	ctx := context.Background()
	// One token per 1.5s.
	b := Bucket{Key: Key("t", "empty"), Capacity: 1, RefillTokens: 2, RefillPeriodMs: 3000}
	if d, _ := chain.Allow(ctx, b, 1); !d.Allowed {
		t.Fatal("first request rejected")
	}
	d, _ := chain.Allow(ctx, b, 1)
	if d.Allowed || d.RetryAfter <= time.Second {
		t.Fatalf("second request %+v, want rejected with ~1.5s to wait", d)
	}
	_, calls, _ := bt.Stats()
	for range 100 {
		if d, _ := chain.Allow(ctx, b, 1); d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("flood: %+v, want rejected", d)
		}
	}
	if _, after, _ := bt.Stats(); after != calls {
		t.Fatalf("%d Redis calls for 100 requests against a bucket known to be empty, want 0", after-calls)
	}
	time.Sleep(d.RetryAfter)
	if d, _ := chain.Allow(ctx, b, 1); !d.Allowed {
		t.Fatalf("after the wait: %+v, want allowed", d)
	}
}

// TestCloseDuringTakes closes a Batcher while Takes are in flight, as a
// gateway does at shutdown while a breaker probe may still run: no panic,
// no Take left hanging, and Takes after Close fail with ErrClosed.
func TestCloseDuringTakes(t *testing.T) {
	srv := redistest.Start(t)
	bt := NewBatcher(srv.Client(t), BatcherOptions{Workers: 2})
	b := Bucket{Key: Key("shop-a", "closing"), Capacity: 1e6, RefillTokens: 1, RefillPeriodMs: 3600_000}
	ctx := context.Background()
	var wg sync.WaitGroup
	var ok, closed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Until this caller sees the Batcher closed.
			for {
				_, err := bt.Take(ctx, b, 1, 1)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrClosed):
					closed.Add(1)
					return
				default:
					t.Errorf("Take: %v", err)
					return
				}
			}
		}()
	}
	for ok.Load() < 100 && !t.Failed() {
		time.Sleep(time.Millisecond)
	}
	bt.Close()
	bt.Close() // twice is fine
	wg.Wait()
	if closed.Load() != 8 {
		t.Fatalf("%d of 8 callers saw ErrClosed", closed.Load())
	}
	if _, err := bt.Take(ctx, b, 1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Take after Close: %v, want ErrClosed", err)
	}
}
