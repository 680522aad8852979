package gateway

import (
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"

	"github.com/tollgate-dev/tollgate/dataplane/clientaddr"
	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/foreign"
	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/membership"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/redisconf"
	"github.com/tollgate-dev/tollgate/dataplane/rls"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/dataplane/tlscerts"
	"github.com/tollgate-dev/tollgate/internal/lib/ratelog"
)

// The gateway is read in this order: gateway.go (construction: New),
// sources.go (the Source interface and its list: files, ConfigMaps,
// Secrets, and the replica Leases), serve.go (Run: background loops,
// listeners, shutdown) and admin.go (metrics, probes); next to them,
// options.go (flags), identity.go and jwt.go (who the caller is),
// support.go (/debug/top, /debug/reset), explain.go and rlstls.go.

// Gateway is one data-plane instance.
type Gateway struct {
	opts     Options
	log      logr.Logger
	registry *prometheus.Registry
	metrics  *metrics.Gateway
	h2       *metrics.HTTP2

	routes *routes.Watcher
	// httpRoutes is the Gateway API route table (--gateway-api).
	httpRoutes *httproutes.Source
	// certs are the HTTPS port's certificates (--tls-listen).
	certs *tlscerts.Store
	store *rules.Store
	keys  *identity.MappedWatcher
	jwt   *jwtIdentity // nil without jwt in --identity
	// sources are every source above, and those read only in the
	// background (rule files or ConfigMaps, token files, key sources): Run
	// runs each, Ready waits until each is Loaded.
	sources []namedSource
	kube    kubernetes.Interface
	// events sends the gateway's Kubernetes Events (nil without a cluster);
	// foreign reports the objects the sources refuse as not the
	// controller's.
	events  events.EventBroadcaster
	foreign *foreign.Reporter
	members membership.Counter
	redis   redis.UniversalClient // nil with --limiter=local
	chain   *limiter.Chain
	slots   *concurrency.Slots
	engine  *decision.Engine
	handler *proxy.Handler // nil without --routes (rate limit service only)
	support *support       // /debug/top, /debug/reset (support.go)

	rls        *rls.Server         // nil without --rls-listen
	rlsDomains *rls.DomainsWatcher // nil without --rls-listen
	rlsOpts    []grpc.ServerOption // TLS of the rate limit port
	health     *health.Server

	proxyLn, tlsLn, adminLn, rlsLn net.Listener
	listening                      atomic.Bool
	stopping                       atomic.Bool
}

// New builds a gateway: it loads the route, rule and key files (failing on
// invalid ones), connects the Kubernetes client in cluster mode, builds the
// limiter chain and binds the listeners. Run serves.
func New(opts Options, log logr.Logger) (*Gateway, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	g := &Gateway{opts: opts, log: log, registry: prometheus.NewRegistry()}
	g.metrics = metrics.NewGateway(g.registry)
	g.h2 = metrics.NewHTTP2(g.registry)
	if err := g.loadFiles(); err != nil {
		return nil, err
	}
	if err := g.connectKubernetes(); err != nil {
		return nil, err
	}
	if err := g.buildChain(); err != nil {
		return nil, err
	}
	g.buildSlots()
	g.buildSupport()
	g.engine = decision.New(decision.Options{
		Rules: g.store, Limiter: g.chain, Region: opts.Region, Replicas: g.members.Replicas,
		Clock: opts.Clock, QuotaShift: opts.quotaShift, Observe: g.support.top.Observe, Stacked: g.metrics.ObserveStacked,
		Demand: decision.DemandOptions{WindowMs: opts.RegionDemandWindow.Milliseconds(), Slots: int64(opts.RegionDemandSlots),
			// Outside a Cluster one ring per rule and region, whatever the
			// tenants: a fixed size per rule.
			PerRule: opts.Redis.Mode != redisconf.ModeCluster},
	})
	if err := g.buildProxy(); err != nil {
		return nil, err
	}
	if opts.RLSListen != "" {
		rlsOpts := rls.Options{
			Decider: g.engine, Region: opts.Region, Metrics: g.metrics,
			IETFHeaders: opts.IETFHeaders, Logger: log.WithName("rls"),
		}
		if g.rlsDomains != nil {
			rlsOpts.Domains = g.rlsDomains.Current
		}
		g.rls = rls.New(rlsOpts)
		var err error
		if g.rlsOpts, err = opts.rlsServerOptions(); err != nil {
			return nil, err
		}
	}
	if err := g.listen(); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

// buildProxy builds the identity methods and, with routes, the HTTP
// proxy.
func (g *Gateway) buildProxy() error {
	chain, err := g.identityChain()
	if err != nil {
		return err
	}
	if g.routes == nil && g.httpRoutes == nil {
		return nil
	}
	trusted, err := clientaddr.Parse(g.opts.TrustedProxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	po := proxy.Options{
		ClientAddr: trusted,
		Decider:    g.engine, Chain: chain,
		Metrics: g.metrics, IETFHeaders: g.opts.IETFHeaders, Logger: g.log.WithName("proxy"),
		UpstreamTimeout: g.opts.UpstreamTimeout, ClientBodyTimeout: g.opts.ClientBodyTimeout, Failures: g.opts.failureLimiter(),
		Slots: g.slots, Region: g.opts.Region, TenantHeader: g.opts.TenantHeader,
		DrainBytes: g.opts.ResponseCostDrainBytes, MaxDrains: g.opts.ResponseCostMaxDrains,
	}
	if g.httpRoutes != nil {
		po.Router = func() routing.Router { return g.httpRoutes.Current() }
	} else {
		po.Router = func() routing.Router { return g.routes.Current() }
	}
	if g.jwt != nil {
		po.JWT = g.jwt.metrics
	}
	g.handler = proxy.New(po)
	return nil
}

// buildChain builds the limiter chain (limiter.NewChain lists its layers):
// Redis with the breaker and the local fallback, or local buckets only.
func (g *Gateway) buildChain() error {
	g.metrics.Replicas.Set(float64(g.members.Replicas()))
	opts := limiter.ChainOptions{Replicas: g.members.Replicas, Clock: g.opts.Clock}
	if g.opts.Limiter == LimiterRedis {
		client, err := g.opts.Redis.NewClient()
		if err != nil {
			return err
		}
		g.redis = client
		opts.Client = client
		opts.Timeout, opts.MaxWait = g.opts.RedisTimeout, max(g.opts.RedisMaxWait, g.opts.RedisTimeout)
		g.metrics.RedisTimeout.Set(g.opts.RedisTimeout.Seconds())
		if g.opts.RedisLayout != "" {
			if opts.Layout, err = limiter.ParseLayout(g.opts.RedisLayout); err != nil {
				return err
			}
		}
		opts.Coalesce, opts.EmptyBucketCache = g.opts.Batching, g.opts.EmptyBucketCache
		opts.Pipelines, opts.PrefetchTTL = g.opts.Pipelines, g.opts.PrefetchTTL
		opts.PipelinesViaGoRedis = !g.opts.OwnConnections
		opts.FailuresToOpen, opts.OpenFor = g.opts.BreakerFailure, g.opts.BreakerOpenFor
		opts.ObserveRedis = g.metrics.ObserveRedis
		scriptError := g.scriptErrors(metrics.ScriptTokenBucket)
		opts.ScriptError = func(b limiter.Bucket, err error) { scriptError(b.Key, err) }
		opts.OnStateChange = g.breakerChanged
	}
	g.chain = limiter.NewChain(opts)
	if g.redis != nil {
		g.metrics.RegisterRedisStats(g.chain.Stats)
		g.metrics.RegisterRedisWaits(g.chain.Waited)
	}
	return nil
}

// breakerChanged records a change of the breakers' state (the worst of the
// Redis nodes') in the metrics and the log; an opening says Redis's last
// error.
func (g *Gateway) breakerChanged(ch limiter.StateChange) {
	g.metrics.SetBreaker(ch.From, ch.To)
	log := g.log.WithName("fallback")
	switch {
	case ch.To == "open" && ch.From == "closed":
		var cause string
		if ch.LastError != nil {
			cause = ch.LastError.Error()
		}
		log.Info("Redis is failing: circuit breaker open, decisions follow each rule's failure mode", "replicas", g.members.Replicas(), "lastError", cause)
	case ch.To == "closed":
		log.Info("Redis answers again: circuit breaker closed, decisions back on Redis")
	}
}

// scriptErrors counts the Redis calls script (a metrics.Script* name)
// failed on, and logs them, at most one line per 10 seconds: the bucket
// named key (a field of rl:{tenant}, the tenant's slots...) is broken until
// its cause is fixed, and its requests follow their rule's failure mode.
func (g *Gateway) scriptErrors(script string) func(key string, err error) {
	count := g.metrics.RedisScriptErrors.WithLabelValues(script)
	log := ratelog.New(g.log.WithName("limiter"), 10*time.Second)
	return func(key string, err error) {
		count.Inc()
		log.Error(err, "a Redis script failed on a bucket: its requests follow their rule's failureMode until the cause is fixed; the circuit breaker stays closed (tollgate explain shows the keys)",
			"script", script, "bucket", key)
	}
}

// buildSlots builds the concurrency slots (spec.concurrency) on the
// limiter's Redis client, or local ones with --limiter=local.
func (g *Gateway) buildSlots() {
	id := g.opts.PodName
	if id == "" {
		id, _ = os.Hostname()
	}
	opts := concurrency.Options{
		GatewayID: id, Replicas: g.members.Replicas, Timeout: max(g.opts.RedisMaxWait, g.opts.RedisTimeout),
		Down: g.chain.Down,
	}
	if g.redis != nil {
		opts.Client = g.redis
		opts.ScriptError = g.scriptErrors(metrics.ScriptConcurrency)
		log := ratelog.New(g.log.WithName("concurrency"), 10*time.Second)
		opts.OnRenew = func(keys int, err error) {
			if err != nil {
				log.Error(err, "renewing concurrency slot leases failed; they expire unless a later renewal succeeds", "keys", keys)
			}
		}
	}
	g.slots = concurrency.New(opts)
}

// listen binds the proxy, rate limit service and admin listeners.
func (g *Gateway) listen() error {
	var err error
	if g.handler != nil {
		if g.proxyLn, err = net.Listen("tcp", g.opts.Listen); err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
	}
	if g.certs != nil {
		if g.tlsLn, err = net.Listen("tcp", g.opts.TLSListen); err != nil {
			return fmt.Errorf("--tls-listen: %w", err)
		}
	}
	if g.rls != nil {
		if g.rlsLn, err = net.Listen("tcp", g.opts.RLSListen); err != nil {
			return fmt.Errorf("--rls-listen: %w", err)
		}
	}
	if g.opts.AdminListen != "" {
		if g.adminLn, err = net.Listen("tcp", g.opts.AdminListen); err != nil {
			return fmt.Errorf("--admin-listen: %w", err)
		}
	}
	return nil
}

// close releases what New acquired; Run calls it when it returns.
func (g *Gateway) close() {
	for _, ln := range []net.Listener{g.proxyLn, g.tlsLn, g.rlsLn, g.adminLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	if g.handler != nil {
		g.handler.Close()
	}
	_ = g.chain.Close()
	if g.redis != nil {
		_ = g.redis.Close()
	}
}

// HTTPRoutes is the Gateway API route table in force (nil without
// --gateway-api).
func (g *Gateway) HTTPRoutes() *httproutes.Table {
	if g.httpRoutes == nil {
		return nil
	}
	return g.httpRoutes.Current()
}

// Addr is the proxy's listening address ("" without --routes).
func (g *Gateway) Addr() string {
	if g.proxyLn == nil {
		return ""
	}
	return g.proxyLn.Addr().String()
}

// TLSAddr is the HTTPS port's listening address ("" without --tls-listen).
func (g *Gateway) TLSAddr() string {
	if g.tlsLn == nil {
		return ""
	}
	return g.tlsLn.Addr().String()
}

// RLSAddr is the rate limit service's listening address ("" without
// --rls-listen).
func (g *Gateway) RLSAddr() string {
	if g.rlsLn == nil {
		return ""
	}
	return g.rlsLn.Addr().String()
}

// AdminAddr is the admin listener's address ("" when disabled).
func (g *Gateway) AdminAddr() string {
	if g.adminLn == nil {
		return ""
	}
	return g.adminLn.Addr().String()
}

// Ready reports whether the gateway serves with a loaded rule snapshot.
func (g *Gateway) Ready() bool {
	if !g.listening.Load() || g.stopping.Load() || !g.store.Loaded() {
		return false
	}
	for _, s := range g.sources {
		if !s.Loaded() {
			return false
		}
	}
	return true
}

// Replicas is the replica count the fallback uses.
func (g *Gateway) Replicas() int { return g.members.Replicas() }

// BreakerState is the Redis circuit breaker's state ("" with --limiter=local).
func (g *Gateway) BreakerState() string { return g.chain.State() }

// RedisWaits is the number of requests that waited for a Redis decision.
func (g *Gateway) RedisWaits() int64 { return g.chain.Waited() }

// Engine is the gateway's decision engine (rule lookup, buckets, limiter).
func (g *Gateway) Engine() *decision.Engine { return g.engine }

// Rules is the live rule store.
func (g *Gateway) Rules() *rules.Store { return g.store }

// Registry is the gateway's metrics registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.registry }
