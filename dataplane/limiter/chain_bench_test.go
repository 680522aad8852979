package limiter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// BenchmarkChainAllow: the gateway's chain on a real redis-server, many
// goroutines deciding for 1,000 tenants with a Zipf mix, buckets that never
// empty (every decision goes to Redis). CPU and allocations per decision of
// this process (redis-server is another process). Each goroutine decides
// under a context of its own, as a gateway's requests do (one shared parent
// would make every decision's MaxWait timer contend on its lock):
//
//	go test -run '^$' -bench ChainAllow -benchmem -cpuprofile cpu.out ./dataplane/limiter/
func BenchmarkChainAllow(b *testing.B) {
	srv := redistest.Start(b)
	c := NewChain(ChainOptions{Client: srv.Client(b), Coalesce: true, EmptyBucketCache: true, Timeout: time.Second, MaxWait: 2 * time.Second})
	b.Cleanup(func() { _ = c.Close() })
	buckets := make([]Bucket, 1000)
	for i := range buckets {
		buckets[i] = Bucket{Key: Key(fmt.Sprintf("tenant-%04d", i), "r"), Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000}
	}
	var rejected atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		z := rand.NewZipf(rand.New(rand.NewPCG(rand.Uint64(), 1)), 1.1, 1, uint64(len(buckets)-1))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for pb.Next() {
			if d, _ := c.Allow(ctx, buckets[z.Uint64()], 1); !d.Allowed {
				rejected.Add(1) // Redis failed a call: a machine too busy
			}
		}
	})
	b.ReportMetric(float64(rejected.Load())/float64(b.N), "rejected/op")
}

// BenchmarkChainAllowCached: every decision answered by the Cache (buckets
// Redis reported empty): the cost of the chain without Redis.
func BenchmarkChainAllowCached(b *testing.B) {
	srv := redistest.Start(b)
	c := NewChain(ChainOptions{Client: srv.Client(b), Coalesce: true, EmptyBucketCache: true, Timeout: time.Second, MaxWait: 2 * time.Second})
	b.Cleanup(func() { _ = c.Close() })
	bk := Bucket{Key: Key("empty", "r"), Capacity: 1, RefillTokens: 1, RefillPeriodMs: 3600_000}
	for range 2 {
		_, _ = c.Allow(b.Context(), bk, 1)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := c.Allow(b.Context(), bk, 1); d.Allowed {
			b.Fatal("allowed from an empty bucket")
		}
	}
}
