package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/membership"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/rls"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Gateway is one data-plane instance.
type Gateway struct {
	opts     Options
	log      logr.Logger
	registry *prometheus.Registry
	metrics  *metrics.Gateway

	routes   *routes.Watcher
	store    *rules.Store
	keys     *identity.MappedWatcher
	files    *rules.FileSource
	cms      *rules.ConfigMapSource
	kube     kubernetes.Interface
	members  membership.Counter
	redis    redis.UniversalClient
	batcher  *limiter.Batcher
	failover *limiter.Failover
	engine   *decision.Engine
	handler  *proxy.Handler // nil without --routes (rate limit service only)

	rls        *rls.Server         // nil without --rls-listen
	rlsDomains *rls.DomainsWatcher // nil without --rls-domains
	health     *health.Server

	proxyLn, adminLn, rlsLn net.Listener
	listening               atomic.Bool
	stopping                atomic.Bool
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
	if err := g.loadFiles(); err != nil {
		return nil, err
	}
	if err := g.connectKubernetes(); err != nil {
		return nil, err
	}
	lim, err := g.buildLimiter()
	if err != nil {
		return nil, err
	}
	var resolver identity.Resolver = identity.Direct{}
	if g.keys != nil {
		resolver = g.keys
	}
	g.engine = decision.New(decision.Options{
		Rules: g.store, Limiter: lim, Region: opts.Region, Replicas: g.members.Replicas,
	})
	if g.routes != nil {
		g.handler = proxy.New(proxy.Options{
			Routes: g.routes.Current, Decider: g.engine, Identity: resolver,
			Metrics: g.metrics, IETFHeaders: opts.IETFHeaders, Logger: log.WithName("proxy"),
		})
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
	}
	if err := g.listen(); err != nil {
		return nil, err
	}
	return g, nil
}

// listen binds the proxy, rate limit service and admin listeners.
func (g *Gateway) listen() error {
	var err error
	closeAll := func() {
		for _, ln := range []net.Listener{g.proxyLn, g.rlsLn, g.adminLn} {
			if ln != nil {
				ln.Close()
			}
		}
	}
	if g.handler != nil {
		if g.proxyLn, err = net.Listen("tcp", g.opts.Listen); err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
	}
	if g.rls != nil {
		if g.rlsLn, err = net.Listen("tcp", g.opts.RLSListen); err != nil {
			closeAll()
			return fmt.Errorf("--rls-listen: %w", err)
		}
	}
	if g.opts.AdminListen != "" {
		if g.adminLn, err = net.Listen("tcp", g.opts.AdminListen); err != nil {
			closeAll()
			return fmt.Errorf("--admin-listen: %w", err)
		}
	}
	return nil
}

// loadFiles loads routes, API keys and (standalone) rules.
func (g *Gateway) loadFiles() error {
	reloadErr := func(source string) func(error) {
		return func(err error) {
			g.metrics.ReloadErrors.WithLabelValues(source).Inc()
			g.log.Error(err, "reload refused; the last good version stays in use", "source", source)
		}
	}
	var err error
	if g.opts.RoutesFile != "" {
		g.routes, err = routes.NewWatcher(g.opts.RoutesFile, routes.WatcherOptions{
			Interval: g.opts.ReloadInterval,
			OnReload: func(t *routes.Table) { g.log.Info("routes reloaded", "routes", t.Len()) },
			OnError:  reloadErr("routes"),
		})
		if err != nil {
			return fmt.Errorf("--routes: %w", err)
		}
	}
	if g.opts.RLSDomainsFile != "" {
		g.rlsDomains, err = rls.NewDomainsWatcher(g.opts.RLSDomainsFile, rls.WatcherOptions{
			Interval: g.opts.ReloadInterval,
			OnReload: func(ds *rls.Domains) { g.log.Info("rate limit domains reloaded", "domains", ds.Len()) },
			OnError:  reloadErr("rls-domains"),
		})
		if err != nil {
			return fmt.Errorf("--rls-domains: %w", err)
		}
	}
	if g.opts.APIKeysFile != "" {
		g.keys, err = identity.NewMappedWatcher(g.opts.APIKeysFile, identity.WatcherOptions{
			Interval: g.opts.ReloadInterval,
			OnReload: func(n int) { g.log.Info("API keys reloaded", "keys", n) },
			OnError:  reloadErr("api-keys"),
		})
		if err != nil {
			return fmt.Errorf("--api-keys-file: %w", err)
		}
	}
	g.store = rules.NewStore(g.opts.defaultRule())
	if g.opts.RulesPath != "" {
		g.files, err = rules.NewFileSource(g.opts.RulesPath, g.store, rules.FileOptions{
			Interval:  g.opts.ReloadInterval,
			OnReload:  g.rulesLoaded,
			OnWarning: func(msg string) { g.log.Info("rules warning", "warning", msg) },
			OnError:   reloadErr("rules"),
		})
		if err != nil {
			return fmt.Errorf("--rules: %w", err)
		}
	}
	return nil
}

// rulesLoaded logs and records a new snapshot.
func (g *Gateway) rulesLoaded(set *snapshot.Set) {
	g.metrics.SnapshotVersion.Set(float64(set.Version()))
	g.metrics.Rules.Set(float64(set.Len()))
	g.metrics.SnapshotLoaded.Set(float64(time.Now().Unix()))
	g.log.Info("rule snapshot loaded", "version", set.Version(), "rules", set.Len(), "shards", set.Count())
}

// connectKubernetes sets up the snapshot source and replica counting in
// cluster mode; standalone mode uses --replicas.
func (g *Gateway) connectKubernetes() error {
	if g.opts.RulesPath != "" {
		g.members = membership.Static(g.opts.Replicas)
		return nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.opts.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("no --rules given, so rules come from Kubernetes, but no cluster is reachable: %w", err)
	}
	cfg.UserAgent = "tollgate-gateway"
	if g.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	g.cms = newConfigMapSource(g)
	identity := g.opts.PodName
	if identity == "" {
		identity, _ = os.Hostname()
	}
	m, err := membership.New(g.kube, membership.Options{
		Namespace: g.opts.SnapshotNamespace, Group: g.opts.MembershipGroup, Identity: identity,
		LeaseDuration: g.opts.LeaseDuration, RenewInterval: g.opts.LeaseDuration / 3,
		Clock: g.opts.Clock, Logger: g.log.WithName("membership"),
		OnChange: func(n int) {
			g.metrics.Replicas.Set(float64(n))
			g.log.Info("gateway replica count changed", "replicas", n)
		},
	})
	if err != nil {
		return err
	}
	g.members = m
	return nil
}

func newConfigMapSource(g *Gateway) *rules.ConfigMapSource {
	return rules.NewConfigMapSource(g.kube, g.store, rules.ConfigMapOptions{
		Namespace: g.opts.SnapshotNamespace, SnapshotName: g.opts.SnapshotName,
		OnReload: g.rulesLoaded,
		OnError: func(err error) {
			g.metrics.ReloadErrors.WithLabelValues("rules").Inc()
			g.log.Error(err, "rule snapshot problem; the last good rules stay in use")
		},
	})
}

// buildLimiter assembles Redis (plain or batched) → cache (prefetch, empty
// buckets) → breaker → local fallback, or local only.
func (g *Gateway) buildLimiter() (limiter.Limiter, error) {
	local := limiter.NewLocal(limiter.LocalOptions{Replicas: g.members.Replicas, Clock: g.opts.Clock})
	g.metrics.Replicas.Set(float64(g.members.Replicas()))
	if g.opts.Limiter == LimiterLocal {
		return local, nil
	}
	client, err := g.opts.Redis.NewClient()
	if err != nil {
		return nil, err
	}
	g.redis = client
	var taker limiter.Taker
	var stats func() (int64, int64, int64)
	if g.opts.Batching {
		g.batcher = limiter.NewBatcher(client, limiter.BatcherOptions{Workers: g.opts.Pipelines, ExecTimeout: max(time.Second, 2*g.opts.RedisTimeout)})
		taker, stats = g.batcher, g.batcher.Stats
	} else {
		r := limiter.NewRedis(client)
		taker, stats = r, r.Stats
	}
	g.metrics.RegisterRedisStats(stats)
	cache := limiter.NewCache(taker, limiter.CacheOptions{TTL: g.opts.PrefetchTTL, NoEmptyCache: !g.opts.Batching, Clock: g.opts.Clock})
	fallbackLog := g.log.WithName("fallback")
	g.failover = limiter.NewFailover(cache, local, limiter.FailoverOptions{
		Timeout: g.opts.RedisTimeout, FailuresToOpen: g.opts.BreakerFailure, OpenFor: g.opts.BreakerOpenFor,
		ObservePrimary: g.metrics.ObserveRedis,
		OnStateChange: func(from, to string) {
			g.metrics.SetBreaker(from, to)
			switch to {
			case "open":
				var cause string
				if err := g.failover.LastError(); err != nil {
					cause = err.Error()
				}
				fallbackLog.Info("Redis is failing: circuit breaker open, decisions follow each rule's failure mode", "replicas", g.members.Replicas(), "lastError", cause)
			case "closed":
				fallbackLog.Info("Redis answers again: circuit breaker closed, decisions back on Redis")
			}
		},
	})
	return g.failover, nil
}

// Addr is the proxy's listening address ("" without --routes).
func (g *Gateway) Addr() string {
	if g.proxyLn == nil {
		return ""
	}
	return g.proxyLn.Addr().String()
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
	return g.listening.Load() && !g.stopping.Load() && g.store.Loaded()
}

// Replicas is the replica count the fallback uses.
func (g *Gateway) Replicas() int { return g.members.Replicas() }

// BreakerState is the Redis circuit breaker's state ("" with --limiter=local).
func (g *Gateway) BreakerState() string {
	if g.failover == nil {
		return ""
	}
	return g.failover.State()
}

// RedisWaits is the number of requests that waited for a Redis decision.
func (g *Gateway) RedisWaits() int64 {
	if g.failover == nil {
		return 0
	}
	return g.failover.Waited()
}

// Engine is the gateway's decision engine (rule lookup, buckets, limiter).
func (g *Gateway) Engine() *decision.Engine { return g.engine }

// Rules is the live rule store.
func (g *Gateway) Rules() *rules.Store { return g.store }

// Registry is the gateway's metrics registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.registry }

// Run serves until ctx ends, then drains in-flight requests for up to
// ShutdownGrace and releases everything.
func (g *Gateway) Run(ctx context.Context) error {
	bg, cancelBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	goRun := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(bg) }()
	}
	defer func() {
		cancelBG()
		wg.Wait()
		if g.handler != nil {
			g.handler.Close()
		}
		if g.batcher != nil {
			g.batcher.Close()
		}
		if g.redis != nil {
			_ = g.redis.Close()
		}
	}()
	if g.routes != nil {
		goRun(g.routes.Run)
	}
	if g.rlsDomains != nil {
		goRun(g.rlsDomains.Run)
	}
	if g.failover != nil {
		goRun(g.failover.Run)
	}
	if g.keys != nil {
		goRun(g.keys.Run)
	}
	if g.files != nil {
		goRun(g.files.Run)
	}
	if g.cms != nil {
		goRun(func(ctx context.Context) {
			if err := g.cms.Run(ctx); err != nil && ctx.Err() == nil {
				g.log.Error(err, "rule snapshot source stopped")
			}
		})
	}
	if m, ok := g.members.(*membership.Membership); ok {
		goRun(func(ctx context.Context) {
			if err := m.Run(ctx); err != nil && ctx.Err() == nil {
				g.log.Error(err, "replica counting stopped")
			}
		})
	}

	errc := make(chan error, 3)
	var srv *http.Server
	if g.handler != nil {
		srv = &http.Server{
			Handler:           g.handler,
			ReadHeaderTimeout: g.opts.ReadHeaderTimout,
			IdleTimeout:       g.opts.IdleTimeout,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          nil,
		}
		go func() { errc <- srv.Serve(g.proxyLn) }()
	}
	var gs *grpc.Server
	if g.rls != nil {
		// Health reports NOT_SERVING until Ready, like /readyz.
		g.health = health.NewServer()
		g.setHealth()
		gs = rls.NewGRPCServer(g.rls, g.health)
		go func() {
			if err := gs.Serve(g.rlsLn); err != nil {
				errc <- err
			}
		}()
		goRun(g.followHealth)
	}
	var admin *http.Server
	if g.adminLn != nil {
		admin = &http.Server{Handler: g.adminMux(), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- admin.Serve(g.adminLn) }()
	}
	g.listening.Store(true)
	if g.health != nil {
		g.setHealth()
	}
	g.log.Info("gateway serving", "listen", g.Addr(), "rls", g.RLSAddr(), "admin", g.AdminAddr(), "limiter", g.opts.Limiter,
		"redis", g.opts.Redis.String(), "replicas", g.members.Replicas())

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("server stopped: %w", err)
	}
	// Not ready from now on, so a load balancer stops sending new requests
	// while in-flight ones finish.
	g.stopping.Store(true)
	if g.health != nil {
		g.health.Shutdown() // NOT_SERVING from now on
	}
	g.log.Info("shutting down", "grace", g.opts.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), g.opts.ShutdownGrace)
	defer cancel()
	var drain sync.WaitGroup
	if gs != nil {
		drain.Go(func() { g.stopGRPC(sctx, gs) })
	}
	if srv != nil {
		if serr := srv.Shutdown(sctx); serr != nil {
			g.log.Error(serr, "in-flight requests cut off at the end of the grace period")
			_ = srv.Close()
		}
	}
	drain.Wait()
	if admin != nil {
		_ = admin.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// stopGRPC stops the rate limit service gracefully: no new calls, calls in
// flight finish until ctx ends; then the rest is cut off.
func (g *Gateway) stopGRPC(ctx context.Context, gs *grpc.Server) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		g.log.Error(ctx.Err(), "rate limit calls cut off at the end of the grace period")
		gs.Stop()
		<-done
	}
}

// followHealth keeps the gRPC health status in step with Ready until ctx
// ends.
func (g *Gateway) followHealth(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			g.setHealth()
		}
	}
}

// setHealth reports SERVING for the whole server ("") and the rate limit
// service when the gateway is Ready (a rule snapshot is loaded), else
// NOT_SERVING. After Shutdown the health server ignores it.
func (g *Gateway) setHealth() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if g.Ready() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.health.SetServingStatus("", st)
	g.health.SetServingStatus(rls.ServiceName, st)
}

// adminMux serves metrics, probes and, opted in, pprof.
func (g *Gateway) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !g.Ready() {
			http.Error(w, "not ready: no rule snapshot loaded yet, or shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if g.opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
