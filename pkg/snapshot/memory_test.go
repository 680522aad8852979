package snapshot

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkLoadedSetMemory: the Go heap a gateway holds for a snapshot of
// 100,000 rules of their own (distinct tenants over three routes, each
// with its RateLimitRule as Source, as the bench's scale scenario writes
// them), decoded from the shards' compressed payloads as the gateway
// decodes its ConfigMaps. Reports live heap bytes per rule after a GC,
// with the encoded shards dropped first:
//
//	go test -run '^$' -bench LoadedSetMemory -benchtime 1x ./pkg/snapshot/
func BenchmarkLoadedSetMemory(b *testing.B) {
	const n = 100_000
	routes := []string{"bench", "list-orders", "*"}
	rules := make([]Rule, n)
	for i := range rules {
		rules[i] = Rule{Tenant: fmt.Sprintf("tenant-%06d", i), Route: routes[i%3], Capacity: int64(i%1000 + 1),
			RefillTokens: int64(i%500 + 1), RefillPeriodMs: 1000, Source: fmt.Sprintf("team-%d/rule-%d", i%50, i)}
	}
	var payloads [][]byte
	for _, sh := range Build(rules, 1).Shards() {
		data, err := sh.Encode()
		if err != nil {
			b.Fatal(err)
		}
		payloads = append(payloads, data)
	}
	rules = nil
	for range b.N {
		before := heapInUse()
		shards := make([]*Shard, len(payloads))
		for i, data := range payloads {
			sh, err := Decode(data)
			if err != nil {
				b.Fatal(err)
			}
			shards[i] = sh
		}
		set, err := Select(shards)
		if err != nil {
			b.Fatal(err)
		}
		shards = nil
		after := heapInUse()
		if set.Len() != n {
			b.Fatalf("%d rules loaded, want %d", set.Len(), n)
		}
		b.ReportMetric(float64(after-before)/n, "heap-B/rule")
		runtime.KeepAlive(set)
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
