package gateway

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/tollgate-dev/tollgate/dataplane/foreign"
	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/membership"
	"github.com/tollgate-dev/tollgate/dataplane/rls"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/dataplane/tlscerts"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// The gateway's sources: files (routes, rate limit domains, API keys,
// standalone rules) and, in a cluster, the snapshot ConfigMaps and the
// replica Leases.

// Source is one of the gateway's configuration sources: a file (routes,
// rate limit domains, API keys, rules, admin tokens, JWT keys), a ConfigMap
// (the rule snapshot, the route table) or a Secret (certificates, JWT
// keys). A source loads before the gateway serves, or reports that it has
// not yet; Run follows its changes.
type Source interface {
	// Run follows the source until ctx ends. Bad versions are reported
	// (a metric, a log line) and the last good one kept; an error ends
	// the gateway.
	Run(ctx context.Context) error
	// Loaded reports whether the source holds what the gateway serves
	// with; Ready waits until every source is Loaded. Sources that load
	// when they are made, or that the gateway may serve without, are
	// always Loaded.
	Loaded() bool
}

// namedSource is a Source and its name in logs.
type namedSource struct {
	name string
	Source
}

// addSource adds s to the sources Run follows.
func (g *Gateway) addSource(name string, s Source) {
	g.sources = append(g.sources, namedSource{name, s})
}

// reloadErr counts and logs a refused reload of source.
func (g *Gateway) reloadErr(source string) func(error) {
	// Exported at 0 from the start: a counter born at 1 shows no increase
	// to Prometheus, and the first error would go unalerted.
	errors := g.metrics.ReloadErrors.WithLabelValues(source)
	return func(err error) {
		errors.Inc()
		g.log.Error(err, "reload refused; the last good version stays in use", "source", source)
	}
}

// loadFiles loads routes, rate limit domains, API keys, admin tokens and
// (standalone) rules.
func (g *Gateway) loadFiles() error {
	if err := g.loadRequestFiles(); err != nil {
		return err
	}
	g.support = &support{}
	var err error
	if g.support.guard, err = g.loadAdminTokens(); err != nil {
		return err
	}
	if g.support.guard != nil {
		g.addSource("admin token file", g.support.guard)
	}
	g.store = rules.NewStore(g.opts.defaultRule())
	if g.opts.RulesPath != "" {
		files, err := rules.NewFileSource(g.opts.RulesPath, g.store, rules.FileOptions{
			Interval:  g.opts.ReloadInterval,
			OnReload:  g.rulesLoaded,
			OnWarning: func(msg string) { g.log.Info("rules warning", "warning", msg) },
			OnError:   g.reloadErr("rules"),
		})
		if err != nil {
			return fmt.Errorf("--rules: %w", err)
		}
		g.addSource("rules files", files)
	}
	return nil
}

// loadRequestFiles loads the files requests are matched with: routes, rate
// limit domains and API keys.
func (g *Gateway) loadRequestFiles() error {
	reloadErr := g.reloadErr
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
		g.addSource("routes file", g.routes)
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
		g.addSource("rate limit domains file", g.rlsDomains)
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
		g.addSource("API keys file", g.keys)
	}
	return nil
}

// rulesLoaded logs and records a new snapshot.
func (g *Gateway) rulesLoaded(set *snapshot.Set) {
	g.metrics.SnapshotVersion.Set(float64(set.Version()))
	g.metrics.SnapshotFormat.Set(float64(set.Format()))
	g.metrics.Rules.Set(float64(set.Len()))
	g.metrics.SnapshotLoaded.Set(float64(time.Now().Unix()))
	g.log.Info("rule snapshot loaded", "version", set.Version(), "rules", set.Len(), "shards", set.Count(), "format", set.Format())
}

// connectKubernetes sets up the snapshot source and replica counting in
// cluster mode; standalone mode uses --replicas.
func (g *Gateway) connectKubernetes() error {
	if g.opts.RulesPath != "" {
		g.members = membership.Static(g.opts.Replicas)
		g.metrics.ReplicasCounted.Set(1)
		return nil
	}
	cfg, err := g.opts.Kube.Config("tollgate-gateway")
	if err != nil {
		return fmt.Errorf("no --rules given, so rules come from Kubernetes, but no cluster is reachable: %w", err)
	}
	if g.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	g.newForeignReporter()
	g.addSource("rule snapshot ConfigMaps", newConfigMapSource(g))
	if g.opts.GatewayAPI {
		g.watchGatewayAPI()
	}
	identity := g.opts.PodName
	if identity == "" {
		identity, _ = os.Hostname()
	}
	m, err := membership.New(g.kube, membership.Options{
		Namespace: g.opts.SnapshotNamespace, Group: g.opts.MembershipGroup, Identity: identity,
		LeaseDuration: g.opts.LeaseDuration, RenewInterval: g.opts.LeaseDuration / 3,
		Clock: g.opts.Clock, Logger: g.log.WithName("membership"),
		UntilCounted: g.opts.ReplicasUntil, Annotations: g.opts.leaseAnnotations(),
		OnChange: func(n int) {
			g.metrics.Replicas.Set(float64(n))
			g.metrics.ReplicasCounted.Set(1)
			g.log.Info("gateway replica count changed", "replicas", n)
		},
	})
	if err != nil {
		return err
	}
	g.members = m
	return nil
}

// watchGatewayAPI adds the sources of --gateway-api: the route table
// ConfigMap and, with --tls-listen, the TLS Secret of its HTTPS listeners.
func (g *Gateway) watchGatewayAPI() {
	if g.opts.TLSListen != "" {
		tlsErrors := g.metrics.ReloadErrors.WithLabelValues("tls") // at 0 from the start
		g.certs = tlscerts.NewStore(func(err error) {
			tlsErrors.Inc()
			g.log.Error(err, "HTTPS certificate problem")
		})
	}
	g.httpRoutes = httproutes.NewSource(g.kube, httproutes.SourceOptions{
		Namespace: g.opts.SnapshotNamespace, Name: g.opts.RouteTable,
		OnReload: func(t *httproutes.Table) {
			if g.certs != nil {
				g.certs.SetListeners(t.TLSListeners())
			}
			g.log.Info("HTTPRoute table loaded", "rules", t.Len(), "httpsListeners", len(t.TLSListeners()))
		},
		OnError: func(err error) {
			g.metrics.ReloadErrors.WithLabelValues("httproutes").Inc()
			g.log.Error(err, "HTTPRoute table problem; the last good table stays in use")
		},
		OnForeign: func(cm *corev1.ConfigMap, err error) { g.foreign.Refuse("httproutes", cm, err) },
	})
	g.addSource("HTTPRoute table ConfigMap", g.httpRoutes)
	if g.certs != nil {
		g.addSource("TLS Secret", certSource{g.certs, tlscerts.WatchOptions{
			Client: g.kube, Namespace: g.opts.SnapshotNamespace, Table: g.opts.RouteTable,
			OnForeign: func(s *corev1.Secret, err error) { g.foreign.Refuse("tls", s, err) },
		}})
	}
}

func newConfigMapSource(g *Gateway) *rules.ConfigMapSource {
	errors := g.metrics.ReloadErrors.WithLabelValues("rules") // at 0 from the start
	return rules.NewConfigMapSource(g.kube, g.store, rules.ConfigMapOptions{
		Namespace: g.opts.SnapshotNamespace, SnapshotName: g.opts.SnapshotName,
		OnReload: g.rulesLoaded,
		OnError: func(err error) {
			errors.Inc()
			g.log.Error(err, "rule snapshot problem; the last good rules stay in use")
		},
		OnForeign: func(cm *corev1.ConfigMap, err error) { g.foreign.Refuse("rules", cm, err) },
	})
}

// newForeignReporter sets up the report of objects the sources refuse as not
// the controller's: tollgate_gateway_foreign_refused_total and a Warning
// Event on the object (events.k8s.io, created in the snapshot namespace;
// the gateway's Role allows create there, nothing more). The broadcaster
// starts with Run.
func (g *Gateway) newForeignReporter() {
	g.events = events.NewBroadcaster(&events.EventSinkImpl{Interface: g.kube.EventsV1()})
	g.foreign = foreign.New(foreign.Options{
		Refused:  g.metrics.ForeignRefused,
		Recorder: g.events.NewRecorder(clientgoscheme.Scheme, "tollgate-gateway"),
		Log:      g.log.WithName("foreign"),
	})
}

// certSource is the watch of the TLS Secret that fills the HTTPS port's
// certificates. It is always Loaded: until the Secret is read, handshakes
// fail and plain HTTP serves.
type certSource struct {
	store *tlscerts.Store
	opts  tlscerts.WatchOptions
}

func (c certSource) Run(ctx context.Context) error { return c.store.Watch(ctx, c.opts) }

func (certSource) Loaded() bool { return true }
