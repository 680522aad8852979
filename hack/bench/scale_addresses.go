package main

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/lua"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// AddressResult is what the per-address part of the scale scenario
// measures: buckets keyed by client address (spec.by clientAddress), many
// and short-lived.
type AddressResult struct {
	Addresses     int     `json:"addresses"`
	BytesPerBkt   float64 `json:"redisBytesPerBucket"` // used_memory delta / buckets
	MemoryUsage   int64   `json:"memoryUsageSampleKey"`
	TTLMs         int64   `json:"ttlMs"`         // PTTL of a bucket just written
	ExpectedTTLMs int64   `json:"expectedTtlMs"` // twice a full refill
	// The gateway under requests from Addresses addresses (each one
	// admitted request and one failed identification), after a forced
	// GC: heap and RSS before and after, and what it tracks.
	HeapBeforeMiB float64 `json:"gatewayHeapBeforeMiB"`
	// HeapMidMiB is after the first Addresses addresses, HeapAfterMiB
	// after as many more: bounded memory stops growing.
	HeapMidMiB   float64 `json:"gatewayHeapMidMiB"`
	HeapAfterMiB float64 `json:"gatewayHeapAfterMiB"`
	RSSBeforeMiB float64 `json:"gatewayRssBeforeMiB"`
	RSSAfterMiB  float64 `json:"gatewayRssAfterMiB"`
	Admitted     int64   `json:"admitted"`
	Refused401   int64   `json:"refused401"`
	Refused429   int64   `json:"refused429"`
	// Refused429Local of them were decided by the local fallback: their
	// Redis call missed --redis-max-wait on the loaded machine.
	Refused429Local float64 `json:"refused429Local"`
	// UsedMemoryPerBkt is the used_memory delta per bucket (with the
	// key space's own overhead, which used_memory_dataset leaves out).
	UsedMemoryPerBkt float64 `json:"redisUsedMemoryPerBucket"`
	Seconds          float64 `json:"seconds"`
	ExplainOK        bool    `json:"explainOk"`
}

// addressRule is the login example: 5 per client address per minute.
var addressRule = snapshot.Rule{Tenant: "*", Route: "bench", Capacity: 5, RefillTokens: 5, RefillPeriodMs: 60_000,
	By: []snapshot.KeyPart{{Kind: snapshot.PartAddress, V4: 32, V6: 64}}, Source: "bench/login-per-address"}

// addressRuleYAML is addressRule as a manifest, and a rule for the
// tenant of the identified requests that never binds (without it the
// built-in default, 20 and 10/s, would refuse them before their address's
// limit is asked).
const addressRuleYAML = `apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: t1-unbounded, namespace: bench}
spec: {tenant: t1, route: bench, capacity: 1000000000, refillPerSecond: 1000000000}
---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: login-per-address, namespace: bench}
spec:
  tenant: "*"
  route: bench
  by: [{clientAddress: {}}]
  capacity: 5
  refill: {tokens: 5, period: 1m}
`

// benchAddr is the i-th client address of space (0 or 1): in 10.0.0.0/8
// or 172.16.0.0/12 for even i, else a /64 of its own in 2001:db8::/48 or
// 2001:db8:1::/48.
func benchAddr(space, i int) netip.Addr {
	if i%2 == 0 {
		return netip.AddrFrom4([4]byte{byte(10 + 162*space), byte(16*space + i>>16), byte(i >> 8), byte(i)})
	}
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(space), byte(i >> 8), byte(i), 0, 0, 0, 0, 0, 0, 0, 1})
}

// addressBuckets writes h.plan.Addresses per-address buckets with the
// script, pipelined, and measures their bytes and TTL.
func (h *harness) addressBuckets(ctx context.Context, rs *redisServer, res *AddressResult) error {
	rc := rs.client()
	defer rc.Close()
	script := redis.NewScript(lua.TokenBucket)
	call := func(i int) (keys []string, args []any) {
		k, _ := decision.KeyFor(&addressRule, &decision.Request{Route: "bench", Addr: benchAddr(0, i)})
		b := limiter.Bucket{Key: k, Capacity: 5, RefillTokens: 5, RefillPeriodMs: 60_000}
		return limiter.ScriptCall(&b, 1, 1, 0, limiter.LayoutPacked)
	}
	used0, all0, err := usedMemory(ctx, rc)
	if err != nil {
		return err
	}
	n := h.plan.Addresses
	for i := 0; i < n; i += 1000 {
		pipe := rc.Pipeline()
		for j := i; j < min(n, i+1000); j++ {
			keys, args := call(j)
			script.EvalSha(ctx, pipe, keys, args...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	used1, all1, err := usedMemory(ctx, rc)
	if err != nil {
		return err
	}
	res.UsedMemoryPerBkt = round(float64(all1-all0)/float64(n), 1)
	keys, _ := call(n - 1)
	res.Addresses, res.BytesPerBkt = n, round(float64(used1-used0)/float64(n), 1)
	res.MemoryUsage, _ = rc.MemoryUsage(ctx, keys[0], 0).Result()
	res.TTLMs = rc.PTTL(ctx, keys[0]).Val().Milliseconds()
	res.ExpectedTTLMs = 2 * 60_000
	h.logf("redis: %d per-address buckets take %.1f bytes each (used_memory_dataset delta; used_memory delta %.1f); MEMORY USAGE %s = %d B; TTL %d ms (twice a full refill: %d ms)",
		n, res.BytesPerBkt, res.UsedMemoryPerBkt, keys[0], res.MemoryUsage, res.TTLMs, res.ExpectedTTLMs)
	return nil
}

// usedMemory is Redis's used_memory_dataset and used_memory.
func usedMemory(ctx context.Context, rc *redis.Client) (dataset, all int64, err error) {
	if dataset, err = infoInt(ctx, rc, "memory", "used_memory_dataset"); err != nil {
		return 0, 0, err
	}
	all, err = infoInt(ctx, rc, "memory", "used_memory")
	return dataset, all, err
}

// addressGateway sends, through a gateway that trusts loopback as its
// proxy, one identified request from each of h.plan.Addresses addresses
// and one request without a credential from each of as many others
// (X-Forwarded-For), twice with new addresses, then asks explain
// for one of them, and compares the gateway's memory before and after.
func (h *harness) addressGateway(ctx context.Context, rs *redisServer, res *AddressResult) error {
	g, err := h.startGateway(ctx, gatewaySpec{name: "gw-addresses", redisAddr: rs.Addr(), rules: addressRuleYAML,
		extra: []string{"--trusted-proxies", "127.0.0.0/8"}})
	if err != nil {
		return err
	}
	defer g.stop()
	before, err := h.gatewayHeap(ctx, g)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := h.fromAddresses(ctx, g, res, 0); err != nil {
		return err
	}
	mid, err := h.gatewayHeap(ctx, g)
	if err != nil {
		return err
	}
	res.HeapMidMiB = round(mid.heap/(1<<20), 1)
	if err := h.fromAddresses(ctx, g, res, h.plan.Addresses); err != nil {
		return err
	}
	res.Seconds = round(time.Since(t0).Seconds(), 1)
	resp, err := http.Get(g.admin + "/debug/explain?tenant=t1&route=bench&address=" + benchAddr(0, 7).String())
	if err == nil {
		res.ExplainOK = resp.StatusCode == 200
		resp.Body.Close()
	}
	after, err := h.gatewayHeap(ctx, g)
	if err != nil {
		return err
	}
	if m, err := g.metrics(ctx); err == nil {
		res.Refused429Local = m.sum("tollgate_gateway_decisions_total", `result="rejected"`, `source="local"`)
	}
	res.HeapBeforeMiB, res.RSSBeforeMiB = round(before.heap/(1<<20), 1), round(float64(before.rss)/(1<<20), 1)
	res.HeapAfterMiB, res.RSSAfterMiB = round(after.heap/(1<<20), 1), round(float64(after.rss)/(1<<20), 1)
	h.logf("gateway: 2 x %d addresses in %.1fs (%d admitted, %d 401, %d 429 of which %.0f by the local fallback): heap %.1f → %.1f → %.1f MiB, RSS %.1f → %.1f MiB, explain ok %v",
		res.Addresses, res.Seconds, res.Admitted, res.Refused401, res.Refused429, res.Refused429Local, res.HeapBeforeMiB, res.HeapMidMiB, res.HeapAfterMiB, res.RSSBeforeMiB, res.RSSAfterMiB, res.ExplainOK)
	return nil
}

// gatewayHeap is g's Go heap in use after a forced GC, and its RSS.
func (h *harness) gatewayHeap(ctx context.Context, g *gatewayProc) (gatewayMem, error) {
	if resp, err := http.Get(g.admin + "/debug/pprof/heap?gc=1"); err == nil {
		resp.Body.Close()
	}
	rss, _, err := memStatus(g.Pid())
	if err != nil {
		return gatewayMem{}, err
	}
	m, err := g.metrics(ctx)
	if err != nil {
		return gatewayMem{}, err
	}
	return gatewayMem{rss: rss, heap: m.sum("go_memstats_heap_inuse_bytes")}, nil
}

// fromAddresses sends the requests of addressGateway from the addresses
// from..from+h.plan.Addresses, 32 at a time.
func (h *harness) fromAddresses(ctx context.Context, g *gatewayProc, res *AddressResult, from int) error {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var failed atomic.Value
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= 2*h.plan.Addresses {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", g.url+"/bench", nil)
				// Identified requests from one space, failed
				// identifications from the other.
				req.Header.Set("X-Forwarded-For", benchAddr(i%2, from+i/2).String())
				if i%2 == 0 {
					req.Header.Set("X-Api-Key", "t1")
				}
				resp, err := client.Do(req)
				if err != nil {
					failed.Store(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					atomic.AddInt64(&res.Admitted, 1)
				case 401:
					atomic.AddInt64(&res.Refused401, 1)
				case 429:
					atomic.AddInt64(&res.Refused429, 1)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return fmt.Errorf("requests from many addresses: %w", err)
	}
	return nil
}
