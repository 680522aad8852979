package limiter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// BenchmarkChainAllow: the gateway's chain on a real redis-server, many
// goroutines deciding for 1,000 tenants with a Zipf mix, buckets that never
// empty (every decision goes to Redis). CPU (cpu-ns/op) and allocations per
// decision of this process (redis-server is another process), with the
// Batcher's workers on connections of their own (the default for a single
// server) and through go-redis's pool. Each goroutine decides under a
// context of its own, as a gateway's requests do (one shared parent would
// make every decision's MaxWait timer contend on its lock):
//
//	go test -run '^$' -bench ChainAllow -benchmem -cpuprofile cpu.out ./dataplane/limiter/
func BenchmarkChainAllow(b *testing.B) {
	for _, viaGoRedis := range []bool{false, true} {
		for _, pipelines := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%s/pipelines=%d", map[bool]string{false: "own-connections", true: "go-redis"}[viaGoRedis], pipelines), func(b *testing.B) {
				benchChainAllow(b, viaGoRedis, pipelines)
			})
		}
	}
}

func benchChainAllow(b *testing.B, viaGoRedis bool, pipelines int) {
	srv := redistest.Start(b)
	pinApart(b, srv.Pid())
	c := NewChain(ChainOptions{Client: srv.Client(b), Coalesce: true, EmptyBucketCache: true, Timeout: time.Second, MaxWait: 2 * time.Second,
		PipelinesViaGoRedis: viaGoRedis, Pipelines: pipelines})
	b.Cleanup(func() { _ = c.Close() })
	buckets := make([]Bucket, 1000)
	for i := range buckets {
		buckets[i] = Bucket{Key: Key(fmt.Sprintf("tenant-%04d", i), "r"), Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000}
	}
	var rejected atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	cpu := startCPU(b)
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
	cpu.report(b)
	b.ReportMetric(float64(rejected.Load())/float64(b.N), "rejected/op")
	roundTrips, _, _ := c.Stats()
	b.ReportMetric(float64(roundTrips)/float64(b.N), "roundtrips/op")
}

// pinApart: run under `taskset -c N` (one CPU), the benchmark's
// redis-server inherited that CPU; it is moved to the machine's other CPUs,
// so that the measured process has its CPU to itself:
//
//	taskset -c 1 go test -run '^$' -bench ChainAllow -benchmem ./dataplane/limiter/
func pinApart(b *testing.B, pid int) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil || mine.Count() != 1 {
		return
	}
	var others unix.CPUSet
	for cpu := range runtime.NumCPU() {
		if !mine.IsSet(cpu) {
			others.Set(cpu)
		}
	}
	if others.Count() == 0 {
		return
	}
	if err := unix.SchedSetaffinity(pid, &others); err != nil {
		b.Logf("redis-server stays on this process's CPU: %v", err)
	}
}

// cpuMeter measures this process's CPU time (user and system, every
// thread: the deciding goroutines, the Batcher's workers, the scheduler
// and the GC) over a benchmark, redis-server's excluded. Wall time per op
// of a parallel benchmark says how fast decisions come back; CPU per op
// says what each one costs the gateway.
type cpuMeter struct{ start time.Duration }

func startCPU(b *testing.B) cpuMeter {
	b.Helper()
	return cpuMeter{start: processCPU(b)}
}

// report adds cpu-ns/op to the benchmark's line.
func (m cpuMeter) report(b *testing.B) {
	b.Helper()
	b.ReportMetric(float64(processCPU(b)-m.start)/float64(b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// BenchmarkChainSteady: the gateway's chain at a steady rate (open loop:
// each decision on a goroutine of its own, started on schedule, as
// requests arrive), 1,000 tenants with a Zipf mix, buckets that never
// empty. At low rates nearly every decision is a pipeline of its own; the
// solo sends (the default) let the deciding goroutine send and read it
// itself, the workers mode hands it to a worker and back. CPU per decision
// of this process (cpu-ns/op) and round trips per decision, both modes in
// one run, pinned apart from redis-server:
//
//	taskset -c 1 go test -run '^$' -bench ChainSteady -benchtime 3s ./dataplane/limiter/
func BenchmarkChainSteady(b *testing.B) {
	for _, rate := range []int{1000, 5000, 20000} {
		for _, noSolo := range []bool{false, true} {
			b.Run(fmt.Sprintf("rate=%d/%s", rate, map[bool]string{false: "solo", true: "workers"}[noSolo]), func(b *testing.B) {
				benchChainSteady(b, rate, noSolo)
			})
		}
	}
}

func benchChainSteady(b *testing.B, rate int, noSolo bool) {
	srv := redistest.Start(b)
	pinApart(b, srv.Pid())
	c := NewChain(ChainOptions{Client: srv.Client(b), Coalesce: true, EmptyBucketCache: true, Timeout: time.Second, MaxWait: 2 * time.Second, NoSolo: noSolo})
	b.Cleanup(func() { _ = c.Close() })
	buckets := make([]Bucket, 1000)
	for i := range buckets {
		buckets[i] = Bucket{Key: Key(fmt.Sprintf("tenant-%04d", i), "r"), Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000}
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(len(buckets)-1))
	for i := range 100 { // connections made, script loaded
		_, _ = c.Allow(b.Context(), buckets[i], 1)
	}
	rt0, _, _ := c.Stats()
	var rejected atomic.Int64
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	cpu := startCPU(b)
	start := time.Now()
	for i := range b.N {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		bk := buckets[z.Uint64()]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, _ := c.Allow(context.Background(), bk, 1); !d.Allowed {
				rejected.Add(1)
			}
		}()
	}
	wg.Wait()
	cpu.report(b)
	b.ReportMetric(float64(rejected.Load())/float64(b.N), "rejected/op")
	roundTrips, _, _ := c.Stats()
	b.ReportMetric(float64(roundTrips-rt0)/float64(b.N), "roundtrips/op")
}
