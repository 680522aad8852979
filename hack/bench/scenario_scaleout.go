package main

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/redisconf"
	"github.com/tollgate-dev/tollgate/internal/lib/ticker"
	"github.com/tollgate-dev/tollgate/internal/procs/cluster"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// The scale-out scenario (-scale-out): gateways' limiter chains in this
// process (each with a cluster client of its own, as a gateway has) on a
// local Redis Cluster of 3 and then 6 masters, 100,000 tenants (a hot one
// at 30 % of the traffic, three warm ones, the rest Zipf), constant-rate
// load; then the hot tenant without shards, then the Cluster's operations
// under load (scaleout_ops.go), then one chain at steady rates with a CPU
// profile (scaleout_steady.go).

const soRoute = "api"

// soHot are the tenants with rules of their own: index, share of all
// traffic, capacity, refill per second and shards (with shards on). Their
// traffic is about twice their rate, so that their buckets run dry and
// the exact count is the bucket's, not the traffic's.
var soHot = []struct {
	share            float64
	capacity, perSec int64
	shards           int32
}{
	{0.30, 1500, 1500, 12},
	{0.05, 250, 250, 4},
	{0.05, 250, 250, 4},
	{0.05, 250, 250, 4},
}

// soDefault is every other tenant's rule.
var soDefault = snapshot.Rule{Tenant: "*", Route: "*", Capacity: 40, RefillTokens: 20, RefillPeriodMs: 1000}

// soTenant is tenant i's id.
func soTenant(i int) string { return fmt.Sprintf("t%06d", i) }

// soMix picks the tenant of each decision: the hot ones by their shares
// (of the rate planned), the rest Zipf s=1.1 over the others.
type soMix struct {
	mu      sync.Mutex
	r       *rand.Rand
	z       *rand.Zipf
	tenants int
}

func newSOMix(seed int64, tenants int) *soMix {
	r := rand.New(rand.NewSource(seed))
	return &soMix{r: r, z: rand.NewZipf(r, 1.1, 1, uint64(tenants-len(soHot)-1)), tenants: tenants}
}

func (m *soMix) next() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.r.Float64()
	for i, h := range soHot {
		if x < h.share {
			return i
		}
		x -= h.share
	}
	return len(soHot) + int(m.z.Uint64())
}

func (m *soMix) describe() string {
	return fmt.Sprintf("%d tenants: %s at 30 %%, %s, %s and %s at 5 %% each, the rest Zipf s=1.1", m.tenants, soTenant(0), soTenant(1), soTenant(2), soTenant(3))
}

// soRules serves the hot tenants' rules and soDefault.
type soRules struct {
	def snapshot.Rule
	hot map[string]*snapshot.Rule
}

func newSORules(rate int, shards bool) *soRules {
	r := &soRules{def: soDefault, hot: map[string]*snapshot.Rule{}}
	for i, h := range soHot {
		// Scaled to the rate: a hot tenant gets about twice its refill.
		scale := float64(rate) / 10000
		rule := &snapshot.Rule{Tenant: soTenant(i), Route: "*", Capacity: max(1, int64(float64(h.capacity)*scale)),
			RefillTokens: max(1, int64(float64(h.perSec)*scale)), RefillPeriodMs: 1000}
		if shards {
			rule.Shards = h.shards
		}
		r.hot[rule.Tenant] = rule
	}
	return r
}

// scaleDefault scales every other tenant's capacity and refill by f.
func (r *soRules) scaleDefault(f float64) {
	if f == 1 {
		return
	}
	r.def.Capacity = max(1, int64(math.Round(float64(r.def.Capacity)*f)))
	r.def.RefillTokens = max(1, int64(math.Round(float64(r.def.RefillTokens)*f)))
}

func (r *soRules) Lookup(tenant, _ string) *snapshot.Rule {
	if x := r.hot[tenant]; x != nil {
		return x
	}
	return &r.def
}

func (r *soRules) Extra(_, _ string, _ snapshot.Claims, dst []*snapshot.Rule) []*snapshot.Rule {
	return dst
}

func (r *soRules) LookupClaims(tenant, route string, _ snapshot.Claims) *snapshot.Rule {
	return r.Lookup(tenant, route)
}

func (r *soRules) describe() string {
	h0, h1 := r.hot[soTenant(0)], r.hot[soTenant(1)]
	return fmt.Sprintf("every tenant capacity %d, %d/s; %s capacity %d, %d/s, %d shards; %s..%s capacity %d, %d/s, %d shards",
		r.def.Capacity, r.def.RefillTokens, soTenant(0), h0.Capacity, h0.RefillTokens, h0.Shards, soTenant(1), soTenant(3), h1.Capacity, h1.RefillTokens, h1.Shards)
}

// soGateways are the gateways' chains and engines of one pass.
type soGateways struct {
	chains  []*limiter.Chain
	engines []*decision.Engine
	closers []func()
}

// startSOGateways starts n chains on the cluster at addrs, each with a
// client built as the gateway builds it (--redis-mode=cluster), with the
// deadlines given (0: the gateway's defaults).
func startSOGateways(ctx context.Context, addrs []string, n int, rules decision.Rules, timeout, maxWait time.Duration) (*soGateways, error) {
	g := &soGateways{}
	bg, cancel := context.WithCancel(ctx)
	g.closers = append(g.closers, cancel)
	for range n {
		o := redisconf.Options{Addrs: addrs, Mode: redisconf.ModeCluster, PoolSize: 64, DialTimeout: 2 * time.Second}
		client, err := o.NewClient()
		if err != nil {
			g.close()
			return nil, err
		}
		chain := limiter.NewChain(limiter.ChainOptions{Client: client, Replicas: func() int { return n }, Coalesce: true,
			EmptyBucketCache: true, Timeout: timeout, MaxWait: maxWait})
		go chain.Run(bg)
		g.closers = append(g.closers, func() { _ = chain.Close() }, func() { _ = client.Close() })
		g.chains = append(g.chains, chain)
		g.engines = append(g.engines, decision.New(decision.Options{Rules: rules, Limiter: chain, Replicas: func() int { return n }}))
	}
	return g, nil
}

func (g *soGateways) close() {
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i]()
	}
}

// stats is the chains' round trips, script calls sent and decisions that
// went to Redis so far.
func (g *soGateways) stats() (rt, cmds, decs int64) {
	for _, c := range g.chains {
		a, b, d := c.Stats()
		rt, cmds, decs = rt+a, cmds+b, decs+d
	}
	return
}

// soDecision is one decision of the load, for the exact count.
type soDecision struct {
	at      int64 // ns since the load started
	tenant  int32
	allowed bool
	local   bool // decided off Redis (failure mode)
}

// soLoad records the decisions of one load.
type soLoad struct {
	start time.Time
	n     atomic.Int64
	recs  []soDecision
}

func newSOLoad(rate int, d time.Duration) *soLoad {
	return &soLoad{recs: make([]soDecision, int(float64(rate)*(d.Seconds()+2)*1.1)+1024)}
}

func (l *soLoad) record(tenant int, d decision.Decision, err error) {
	i := l.n.Add(1) - 1
	if int(i) < len(l.recs) {
		l.recs[i] = soDecision{at: int64(time.Since(l.start)), tenant: int32(tenant), allowed: err == nil && d.Allowed,
			local: err != nil || d.Source != limiter.SourceRedis}
	}
}

// decisions are the recorded decisions in the order they were made.
func (l *soLoad) decisions() []soDecision {
	n := min(int(l.n.Load()), len(l.recs))
	out := append([]soDecision(nil), l.recs[:n]...)
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// picker returns the tenant of the next decision: its index (recorded)
// and its id.
type picker func() (int, string)

// pick picks from the mix.
func (m *soMix) pick() (int, string) {
	i := m.next()
	return i, soTenant(i)
}

// run offers rate decisions/s over the engines until running ends, each
// decision in its own goroutine (open loop), at most 256 at once per
// engine. A load without records (newSOLoad's) only counts. Its start is
// now unless the caller set it (before starting run's goroutine, when
// another goroutine reads it).
func (l *soLoad) run(ctx, running context.Context, engines []*decision.Engine, rate int, pick picker) {
	if l.start.IsZero() {
		l.start = time.Now()
	}
	var wg sync.WaitGroup
	per := float64(rate) / float64(len(engines))
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, 256)
			var inner sync.WaitGroup
			defer inner.Wait()
			sent := 0
			ticker.Every(running, time.Millisecond, func() {
				for range int(time.Since(l.start).Seconds()*per) - sent {
					select {
					case sem <- struct{}{}:
					case <-running.Done():
						return
					}
					sent++
					tenant, id := pick()
					inner.Add(1)
					go func() {
						defer inner.Done()
						d, _, err := e.Decide(ctx, id, soRoute, 1)
						l.record(tenant, d, err)
						<-sem
					}()
				}
			})
		}()
	}
	wg.Wait()
}

// exactCount is what an exact token bucket per tenant admits of decs:
// each bucket full at its first decision, refilled continuously.
func exactCount(decs []soDecision, rules *soRules) (perTenant map[int32]int64) {
	type state struct {
		tokens float64
		last   int64
	}
	st := map[int32]*state{}
	perTenant = map[int32]int64{}
	for _, d := range decs {
		r := rules.Lookup(soTenant(int(d.tenant)), soRoute)
		perNs := float64(r.RefillTokens) / float64(r.RefillPeriodMs) / 1e6
		s := st[d.tenant]
		if s == nil {
			s = &state{tokens: float64(r.Capacity), last: d.at}
			st[d.tenant] = s
		}
		s.tokens = min(float64(r.Capacity), s.tokens+float64(d.at-s.last)*perNs)
		s.last = d.at
		if s.tokens >= 1 {
			s.tokens--
			perTenant[d.tenant]++
		}
	}
	return perTenant
}

// soCluster starts a cluster for one pass, its nodes on the CPUs other
// than the measured one.
func (h *harness) soCluster(name string, masters, replicas int) (*cluster.Cluster, error) {
	dir := filepath.Join(h.logDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c, err := cluster.StartWith(dir, cluster.Options{Masters: masters, Replicas: replicas, Args: []string{"--protected-mode", "no"}})
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes() {
		track(n)
		if h.pin.ok() {
			_ = setAffinity(n.Pid(), h.pin.rest)
		}
	}
	return c, nil
}

// nodeInfo is what a pass reads of one master before and after its load.
type nodeInfo struct {
	cpu               float64 // used_cpu_sys + used_cpu_user, seconds
	scripts, commands int64
	memory, keys      int64 // used_memory_dataset, DBSIZE
}

func readNode(ctx context.Context, addr string) (nodeInfo, error) {
	c := newRedisClient(addr)
	defer c.Close()
	var ni nodeInfo
	cpu, err := redisInfo(ctx, c, "cpu")
	if err != nil {
		return ni, err
	}
	var u, s float64
	fmt.Sscan(cpu["used_cpu_user"], &u)
	fmt.Sscan(cpu["used_cpu_sys"], &s)
	ni.cpu = u + s
	if ni.scripts, err = scriptCalls(ctx, c); err != nil {
		return ni, err
	}
	if ni.commands, err = infoInt(ctx, c, "stats", "total_commands_processed"); err != nil {
		return ni, err
	}
	if ni.memory, err = infoInt(ctx, c, "memory", "used_memory_dataset"); err != nil {
		return ni, err
	}
	ni.keys, err = c.DBSize(ctx).Result()
	return ni, err
}

// readMasters reads every master of c.
func readMasters(ctx context.Context, c *cluster.Cluster) (map[string]nodeInfo, error) {
	ms, err := c.Masters()
	if err != nil {
		return nil, err
	}
	out := map[string]nodeInfo{}
	for _, m := range ms {
		if out[m.Addr], err = readNode(ctx, m.Addr); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// owners maps each tenant's keys to masters: weight per master address
// (1 for an unsharded bucket, 1/shards per shard).
func owners(ctx context.Context, cc *redis.ClusterClient, tenants int, rules *soRules) ([]map[string]float64, error) {
	out := make([]map[string]float64, tenants)
	for i := range tenants {
		r := rules.Lookup(soTenant(i), soRoute)
		keys := []string{limiter.Key(soTenant(i), soRoute)}
		if r.Shards > 1 {
			keys = keys[:0]
			for k := range int(r.Shards) {
				keys = append(keys, limiter.ShardKey(soTenant(i), soRoute, "", k))
			}
		}
		out[i] = map[string]float64{}
		for _, k := range keys {
			m, err := cc.MasterForKey(ctx, k)
			if err != nil {
				return nil, err
			}
			out[i][m.Options().Addr] += 1 / float64(len(keys))
		}
	}
	return out, nil
}
