// Package controllers holds tollgate's reconcilers: the snapshot reconciler,
// which compiles every RateLimitRule into the sharded rule snapshot that
// gateways load; the status reconciler, which reports on each rule; and,
// with --gateway-api, the Gateway API reconciler, which lists the Gateway
// API objects, hands them to controllers/gatewayapi (the translation, pure
// functions), publishes the route table and the TLS Secret it returns, and
// writes the statuses that changed.
package controllers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/controllers/gatewayapi"
	"github.com/tollgate-dev/tollgate/internal/version"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// +kubebuilder:rbac:groups=ratelimit.tollgate.dev,resources=ratelimitrules,verbs=get;list;watch
// +kubebuilder:rbac:groups=ratelimit.tollgate.dev,resources=ratelimitrules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;delete,namespace=tollgate-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=tollgate-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=tollgate-system

// Options configure the controllers.
type Options struct {
	// SnapshotNamespace is the namespace the shard ConfigMaps are written to:
	// the gateways' namespace. Default: the POD_NAMESPACE environment
	// variable, else tollgate-system.
	SnapshotNamespace string
	// SnapshotName names the snapshot: shard ConfigMaps are called
	// <SnapshotName>-<i>-of-<n> and carry the label
	// ratelimit.tollgate.dev/snapshot=<SnapshotName>. Default tollgate-rules.
	SnapshotName string
	// StatusWorkers is how many rule statuses are patched concurrently.
	// Default 4.
	StatusWorkers int
	// NamespacePolicy says which namespaces may declare rules for which
	// tenants: PolicyLabelled (also the meaning of "") accepts a rule only
	// when its namespace's annotations allow its tenant; PolicyOpen accepts
	// every rule.
	NamespacePolicy string
	// SnapshotFormat is the snapshot format written (snapshot.FormatTenant
	// or snapshot.Format); 0 means snapshot.DefaultWriteFormat, the newest
	// format the previous minor version's gateways read.
	SnapshotFormat int

	// GatewayAPI enables Gateway API mode: the controller serves the
	// GatewayClasses whose controllerName is gatewayapi.ControllerName, compiles the
	// HTTPRoutes and GRPCRoutes attached to their Gateways into the route
	// table ConfigMap RouteTableName, and resolves RateLimitRules'
	// spec.targetRef.
	GatewayAPI bool
	// GatewayPort is the port on which the gateway Service serves HTTP:
	// the only listener port Gateways may use. Default 80.
	GatewayPort int32
	// GatewayTLSPort is the port on which the gateway Service serves HTTPS:
	// the only port of HTTPS listeners; 0 refuses them (the flag's
	// default is 443).
	GatewayTLSPort int32
	// GatewayH2C says the gateways serve HTTP/2 without TLS on GatewayPort
	// (their --h2c): HTTP listeners then take GRPCRoutes, and the
	// GatewayClasses claim the GRPCRoute conformance features.
	GatewayH2C bool
	// GatewayService names the gateway Service in SnapshotNamespace whose
	// addresses Gateways report. Default tollgate-gateway.
	GatewayService string
	// RouteTableName names the route table ConfigMap in SnapshotNamespace.
	// Default routetable.DefaultName.
	RouteTableName string

	// Regions configure the region rebalancer (off by default).
	Regions RegionOptions

	// Clock is the time rules' spec.expiresAt is compared with; default
	// time.Now. Tests move it. Not a flag.
	Clock func() time.Time
}

// now is the controller's time, for rule expiry.
func (o *Options) now() time.Time {
	if o.Clock == nil {
		return time.Now()
	}
	return o.Clock()
}

// snapshotFormat is the format to write.
func (o *Options) snapshotFormat() int {
	if o.SnapshotFormat == 0 {
		return snapshot.DefaultWriteFormat
	}
	return o.SnapshotFormat
}

// DefaultSnapshotName is the default Options.SnapshotName.
const DefaultSnapshotName = "tollgate-rules"

// AddFlags registers the options as command-line flags.
func (o *Options) AddFlags(fs *pflag.FlagSet, defaultNamespace string) {
	fs.StringVar(&o.SnapshotNamespace, "snapshot-namespace", defaultNamespace,
		"Namespace the rule snapshot ConfigMaps are written to (the gateways' namespace).")
	fs.StringVar(&o.SnapshotName, "snapshot-name", DefaultSnapshotName,
		"Name of the rule snapshot: prefix of its shard ConfigMaps and value of their ratelimit.tollgate.dev/snapshot label.")
	fs.IntVar(&o.StatusWorkers, "status-workers", 4, "Number of RateLimitRule statuses patched concurrently.")
	fs.StringVar(&o.NamespacePolicy, "namespace-policy", PolicyLabelled,
		`Which namespaces may declare rules for which tenants. "labelled": a rule is accepted only if its namespace has the annotation `+
			v1alpha1.AnnotationTenants+` listing its tenant (comma-separated, or "*" for any tenant), and a rule for tenant "*" only if the namespace has `+
			v1alpha1.AnnotationAllowWildcardTenant+`: "true"; other rules get Accepted=False, reason TenantNotAllowed. "open": any namespace, any tenant.`)
	fs.IntVar(&o.SnapshotFormat, "snapshot-format", snapshot.DefaultWriteFormat,
		fmt.Sprintf("Format of the rule snapshot ConfigMaps: %d places a tenant's rules in one shard and is read by every gateway; %d spreads them by tenant and route "+
			"(needed past about 100,000 rules of one tenant) and is read only by gateways 0.2.0 and later. Switch to %d once every gateway reads it (docs/upgrading.md).",
			snapshot.FormatTenant, snapshot.Format, snapshot.Format))
	fs.BoolVar(&o.GatewayAPI, "gateway-api", false,
		"Gateway API mode (the Gateway API CRDs must be installed): serve GatewayClasses with controllerName "+gatewayapi.ControllerName+
			", compile the HTTPRoutes and GRPCRoutes attached to their Gateways into the route table ConfigMap that gateways started with --gateway-api load, "+
			"and resolve RateLimitRules' spec.targetRef.")
	fs.Int32Var(&o.GatewayPort, "gateway-port", 80, "With --gateway-api: the port on which the gateway Service serves HTTP, the only listener port Gateways may use.")
	fs.Int32Var(&o.GatewayTLSPort, "gateway-tls-port", 443,
		"With --gateway-api: the port on which the gateway Service serves HTTPS (gateways' --tls-listen), the only port of HTTPS listeners, whose certificate Secrets "+
			"the controller copies into the Secret <route-table>-tls that gateways read. 0: HTTPS listeners are refused (UnsupportedProtocol).")
	fs.BoolVar(&o.GatewayH2C, "gateway-h2c", false,
		"With --gateway-api: the gateways serve HTTP/2 without TLS on --gateway-port (they run with --h2c), so HTTP listeners take GRPCRoutes "+
			"(gRPC needs HTTP/2; HTTPS listeners take them either way) and the GatewayClasses claim the GRPCRoute features. Without it, "+
			"a listener that asks for GRPCRoutes on HTTP says ResolvedRefs=False (InvalidRouteKinds).")
	fs.StringVar(&o.GatewayService, "gateway-service", "tollgate-gateway", "With --gateway-api: the gateway Service (in --snapshot-namespace) whose addresses Gateways report.")
	fs.StringVar(&o.RouteTableName, "route-table", routetable.DefaultName, "With --gateway-api: name of the route table ConfigMap written to --snapshot-namespace.")
	o.Regions.AddFlags(fs)
}

// Validate checks the options.
func (o *Options) Validate() error {
	switch {
	case o.SnapshotNamespace == "":
		return fmt.Errorf("--snapshot-namespace must not be empty")
	case o.SnapshotName == "" || len(o.SnapshotName) > 200:
		return fmt.Errorf("--snapshot-name must be 1 to 200 characters")
	case o.StatusWorkers < 1:
		return fmt.Errorf("--status-workers must be at least 1")
	case o.GatewayAPI && (o.GatewayPort < 1 || o.GatewayPort > 65535):
		return fmt.Errorf("--gateway-port must be in [1, 65535]")
	case o.GatewayAPI && (o.GatewayTLSPort < 0 || o.GatewayTLSPort > 65535 || o.GatewayTLSPort == o.GatewayPort):
		return fmt.Errorf("--gateway-tls-port must be in [0, 65535] and differ from --gateway-port")
	case o.GatewayAPI && (o.GatewayService == "" || o.RouteTableName == ""):
		return fmt.Errorf("--gateway-service and --route-table must not be empty with --gateway-api")
	case o.NamespacePolicy != "" && o.NamespacePolicy != PolicyLabelled && o.NamespacePolicy != PolicyOpen:
		return fmt.Errorf("--namespace-policy must be %q or %q, not %q", PolicyLabelled, PolicyOpen, o.NamespacePolicy)
	case o.SnapshotFormat != 0 && !snapshot.ValidFormat(o.SnapshotFormat):
		return fmt.Errorf("--snapshot-format must be %d or %d, not %d", snapshot.FormatTenant, snapshot.Format, o.SnapshotFormat)
	}
	return o.Regions.Validate()
}

// Setup adds the reconcilers to mgr (the Gateway API one with
// opts.GatewayAPI; the scheme must then include sigs.k8s.io/gateway-api's v1
// types). The manager's cache must include
// RateLimitRules and the snapshot namespace's ConfigMaps, and with the
// labelled namespace policy it watches Namespaces' metadata.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.GatewayPort == 0 {
		opts.GatewayPort = 80
	}
	if opts.GatewayService == "" {
		opts.GatewayService = "tollgate-gateway"
	}
	if opts.RouteTableName == "" {
		opts.RouteTableName = routetable.DefaultName
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	v := version.Get()
	buildInfo.Reset()
	buildInfo.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	snapshotFormat.Set(float64(opts.snapshotFormat()))
	state, queue := newPublishedState(), newStatusQueue()
	snap := &SnapshotReconciler{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		opts:      opts,
		recorder:  mgr.GetEventRecorder("tollgate-controller"),
		state:     state,
		statusQ:   queue,
		written:   map[string]writtenShard{},
	}
	if err := snap.setupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the snapshot controller: %w", err)
	}
	if opts.GatewayAPI {
		gw := &GatewayAPIReconciler{client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), opts: opts}
		if err := gw.setupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the Gateway API controller: %w", err)
		}
	}
	status := &StatusReconciler{
		client:      mgr.GetClient(),
		state:       state,
		snapshotRef: fmt.Sprintf("ConfigMaps %s/%s-*", opts.SnapshotNamespace, opts.SnapshotName),
	}
	if err := status.setupWithManager(mgr, queue, opts.StatusWorkers); err != nil {
		return fmt.Errorf("setting up the status controller: %w", err)
	}
	return setupRebalancer(mgr, opts.Regions)
}

// setupRebalancer adds the region rebalancer to mgr (leader only), with a
// Redis client per region, closed when the manager stops.
func setupRebalancer(mgr ctrl.Manager, o RegionOptions) error {
	if !o.Enabled {
		return nil
	}
	clients, err := o.clients()
	if err != nil {
		return err
	}
	// Every series from the start, at 0, so that a rate shows no change
	// rather than no data.
	for _, kind := range []string{regionshares.Lowered.String(), regionshares.Raised.String()} {
		regionChanges.WithLabelValues(kind)
	}
	for region := range clients {
		regionReadFailures.WithLabelValues(region)
	}
	rb := NewRebalancer(RebalancerConfig{
		Store: kubeRules{client: mgr.GetClient()}, Regions: clients, Options: o,
		Recorder: mgr.GetEventRecorder("tollgate-region-rebalancer"), Log: mgr.GetLogger().WithName("regions"),
	})
	return mgr.Add(closing{rb, clients})
}

// closing runs the rebalancer and closes its clients when it ends.
type closing struct {
	*Rebalancer
	clients map[string]redis.UniversalClient
}

func (c closing) Start(ctx context.Context) error {
	defer func() {
		for _, cl := range c.clients {
			_ = cl.Close()
		}
	}()
	return c.Rebalancer.Start(ctx)
}

// annotationInt parses an integer annotation.
func annotationInt(obj client.Object, key string) (int64, bool) {
	v, err := strconv.ParseInt(obj.GetAnnotations()[key], 10, 64)
	return v, err == nil
}
