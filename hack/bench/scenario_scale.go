package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/procs/kubeapi"
	"github.com/tollgate-dev/tollgate/lua"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// scenarioScale (7): Redis memory per bucket, gateway memory and load time
// with a large snapshot, controller publish time.
func (h *harness) scenarioScale(ctx context.Context) error {
	res := &ScaleResult{Buckets: h.plan.RedisBuckets, Rules: h.plan.SnapshotRules, PublishBench: h.plan.PublishBench}
	h.res.Scale = res
	rs, err := h.startRedis(ctx, "redis-scale")
	if err != nil {
		return err
	}
	defer rs.Kill()
	if err := h.redisMemory(ctx, rs, res); err != nil {
		return fmt.Errorf("redis memory: %w", err)
	}
	res.Addresses = &AddressResult{}
	if err := h.addressBuckets(ctx, rs, res.Addresses); err != nil {
		return fmt.Errorf("per-address buckets: %w", err)
	}
	if err := h.addressGateway(ctx, rs, res.Addresses); err != nil {
		return fmt.Errorf("gateway under many addresses: %w", err)
	}
	if err := h.snapshotMemory(ctx, rs, res); err != nil {
		return fmt.Errorf("gateway memory: %w", err)
	}
	// The publish benchmark starts its own API server: stop ours first.
	if h.kube != nil {
		h.kube.stop()
		h.kube = nil
	}
	if err := h.publishBench(ctx, res); err != nil {
		return fmt.Errorf("controller publish: %w", err)
	}
	return nil
}

// redisMemory creates buckets with the token bucket script, pipelined, and
// measures used_memory per bucket (key, hash, expiry entry, dict overhead):
// five routes per tenant (a tenant's buckets share one hash).
func (h *harness) redisMemory(ctx context.Context, rs *redisServer, res *ScaleResult) error {
	rc := rs.client()
	defer rc.Close()
	script := redis.NewScript(lua.TokenBucket)
	// Capacity 100, 1 token/s: the expiry (twice a full refill) is 200s,
	// far longer than the measurement.
	bucket := func(tenant, route string) (keys []string, args []any) {
		b := limiter.Bucket{Key: limiter.Key(tenant, route), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 1000}
		return limiter.ScriptCall(&b, 1, 1, 0, limiter.LayoutPacked)
	}
	keys, args := bucket("warm-up", "bench")
	if err := script.Run(ctx, rc, keys, args...).Err(); err != nil {
		return err
	}
	used0, err := infoInt(ctx, rc, "memory", "used_memory")
	if err != nil {
		return err
	}
	n := h.plan.RedisBuckets
	const batch, routes = 1000, 5
	for i := 0; i < n; i += batch {
		pipe := rc.Pipeline()
		for j := i; j < min(n, i+batch); j++ {
			keys, args := bucket(fmt.Sprintf("tenant-%06d", j/routes), fmt.Sprintf("route-%d", j%routes))
			script.EvalSha(ctx, pipe, keys, args...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	used1, err := infoInt(ctx, rc, "memory", "used_memory")
	if err != nil {
		return err
	}
	sample, _ := limiter.Storage(limiter.Key("tenant-000001", "route-0"))
	usage, err := rc.MemoryUsage(ctx, sample, 0).Result()
	if err != nil {
		return err
	}
	ks, err := redisInfo(ctx, rc, "keyspace")
	if err != nil {
		return err
	}
	// db0:keys=100001,expires=100001,avg_ttl=...
	for _, kv := range strings.Split(ks["db0"], ",") {
		if v, ok := strings.CutPrefix(kv, "expires="); ok {
			res.ExpiresCount, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	res.RedisBytesPerBkt = round(float64(used1-used0)/float64(n), 1)
	res.MemoryUsageSample = usage
	h.logf("redis: %d buckets (%d with expiry) take %.1f bytes each (used_memory delta); MEMORY USAGE %s = %d bytes",
		n, res.ExpiresCount, res.RedisBytesPerBkt, sample, usage)
	return nil
}

// snapshotMemory writes a large snapshot and an empty one into the API
// server and compares a gateway on each: time to ready, RSS, Go heap.
func (h *harness) snapshotMemory(ctx context.Context, rs *redisServer, res *ScaleResult) error {
	k, err := h.kubeEnv(ctx)
	if err != nil {
		return err
	}
	rules := scaleRules(h.plan.SnapshotRules)
	t0 := time.Now()
	if res.Shards, res.SnapshotBytes, err = k.writeSnapshot(ctx, "bench-scale", rules); err != nil {
		return err
	}
	h.logf("wrote %d rules in %d shard ConfigMaps (%d KiB compressed) in %s", len(rules), res.Shards, res.SnapshotBytes>>10, time.Since(t0).Round(time.Millisecond))
	if _, _, err := k.writeSnapshot(ctx, "bench-empty", nil); err != nil {
		return err
	}
	idle, err := h.gatewayMemory(ctx, rs, k, "gw-empty", "bench-empty")
	if err != nil {
		return err
	}
	full, err := h.gatewayMemory(ctx, rs, k, "gw-scale", "bench-scale")
	if err != nil {
		return err
	}
	res.ReadySecondsIdle, res.ReadySeconds = round(idle.ready.Seconds(), 3), round(full.ready.Seconds(), 3)
	res.RSSIdle, res.RSS, res.RSSDelta = idle.rss, full.rss, full.rss-idle.rss
	res.HeapInuseIdle, res.HeapInuse = idle.heap, full.heap
	return nil
}

// scaleRules are n rules of distinct tenants over three routes.
func scaleRules(n int) []snapshot.Rule {
	routes := []string{"bench", "list-orders", "*"}
	rules := make([]snapshot.Rule, n)
	for i := range rules {
		rules[i] = snapshot.Rule{
			Tenant: fmt.Sprintf("tenant-%06d", i), Route: routes[i%3], Capacity: int64(i%1000 + 1),
			RefillTokens: int64(i%500 + 1), RefillPeriodMs: 1000, Source: fmt.Sprintf("team-%d/rule-%d", i%50, i),
		}
	}
	return rules
}

// writeSnapshot creates the namespace ns and the snapshot of rules in it,
// as the controller would, and returns the number of shards and their
// compressed size in bytes.
func (k *kubeEnv) writeSnapshot(ctx context.Context, ns string, rules []snapshot.Rule) (shards, size int, err error) {
	if err := k.namespace(ctx, ns); err != nil {
		return 0, 0, err
	}
	set := snapshot.Build(rules, 1)
	for _, sh := range set.Shards() {
		cm, err := sh.ConfigMap(ns, "tollgate-rules")
		if err != nil {
			return 0, 0, err
		}
		if err := k.client.Create(ctx, cm); err != nil {
			return 0, 0, fmt.Errorf("creating ConfigMap %s: %w", cm.Name, err)
		}
		size += len(cm.BinaryData[snapshot.DataKey])
	}
	return len(set.Shards()), size, nil
}

// gatewayMem is what gatewayMemory measures.
type gatewayMem struct {
	ready time.Duration // from start to ready
	rss   int64         // bytes
	heap  float64       // Go heap in use, bytes
}

// gatewayMemory starts a gateway on the snapshot in ns and measures it two
// seconds after it is ready.
func (h *harness) gatewayMemory(ctx context.Context, rs *redisServer, k *kubeEnv, name, ns string) (gatewayMem, error) {
	g, err := h.startGateway(ctx, gatewaySpec{name: name, redisAddr: rs.Addr(), kubeconfig: k.kubeconfig, namespace: ns, readyWithin: 2 * time.Minute})
	if err != nil {
		return gatewayMem{}, err
	}
	defer g.stop()
	if err := sleep(ctx, 2*time.Second); err != nil {
		return gatewayMem{}, err
	}
	// A forced GC (the heap profile's gc=1) makes the heap figure the live
	// data; RSS is what the kernel reports, unforced.
	rss, _, err := memStatus(g.Pid())
	if err != nil {
		return gatewayMem{}, err
	}
	if resp, err := http.Get(g.admin + "/debug/pprof/heap?gc=1"); err == nil {
		resp.Body.Close()
	}
	m, err := g.metrics(ctx)
	if err != nil {
		return gatewayMem{}, err
	}
	heap := m.sum("go_memstats_heap_inuse_bytes")
	h.logf("%s: ready %s after start, %d rules, RSS %.1f MiB, Go heap in use %.1f MiB", name, g.readyAfter.Round(time.Millisecond),
		int(m.sum("tollgate_gateway_rules")), float64(rss)/(1<<20), heap/(1<<20))
	return gatewayMem{ready: g.readyAfter, rss: rss, heap: heap}, nil
}

var benchLine = regexp.MustCompile(`(?m)^Benchmark(\S+?)(-\d+)?\s+\d+\s+(\d+) ns/op`)

// publishBench runs the controller's BenchmarkPublish once.
func (h *harness) publishBench(ctx context.Context, res *ScaleResult) error {
	args := []string{"test", "-run", "^$", "-bench", res.PublishBench, "-benchtime", "1x"}
	if raceEnabled {
		// The harness runs under -race (make test): share its build cache
		// rather than compile the controller's test binary a second time.
		// Not a speed figure then, and marked so.
		args = append(args, kubeapi.RaceBuildFlags()...)
	}
	args = append(args, "./controllers/")
	h.logf("go %s", strings.Join(args, " "))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = h.repo
	cmd.Env = os.Environ()
	if dir, err := kubeapi.Assets(); err == nil {
		cmd.Env = append(cmd.Env, "KUBEBUILDER_ASSETS="+dir)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	res.PublishOutput = strings.TrimSpace(out.String())
	if err != nil {
		return fmt.Errorf("go test -bench: %w\n%s", err, res.PublishOutput)
	}
	m := benchLine.FindStringSubmatch(res.PublishOutput)
	if m == nil {
		return fmt.Errorf("no benchmark result in the output of go test:\n%s", res.PublishOutput)
	}
	ns, _ := strconv.ParseFloat(m[3], 64)
	res.PublishSeconds = round(ns/1e9, 3)
	h.logf("controller publish (%s): %.3fs", m[1], res.PublishSeconds)
	return nil
}
