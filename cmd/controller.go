package cmd

import (
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/controllers"
	"github.com/tollgate-dev/tollgate/internal/kubeconfig"
	"github.com/tollgate-dev/tollgate/internal/version"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// controllerOptions are the flags of "tollgate controller".
type controllerOptions struct {
	log  logOptions
	kube kubeconfig.Options
	ctrl controllers.Options

	metricsAddr     string
	probeAddr       string
	leaderElect     bool
	leaderElectID   string
	leaderElectNS   string
	watchNamespaces []string
}

func (o *controllerOptions) AddFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.log.AddFlags(fs)
	o.kube.AddFlags(fs)
	o.ctrl.AddFlags(fs, defaultNamespace())
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus /metrics endpoint; \"0\" disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; \"0\" disables them.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect one active controller among replicas with a Lease; only the leader writes.")
	fs.StringVar(&o.leaderElectID, "leader-election-id", "tollgate-controller.ratelimit.tollgate.dev", "Name of the leader election Lease.")
	fs.StringVar(&o.leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease. Default: --snapshot-namespace.")
	fs.StringSliceVar(&o.watchNamespaces, "watch-namespaces", nil, "Comma-separated namespaces to read RateLimitRules from. Default: all namespaces.")
}

func newControllerCommand() *cobra.Command {
	o := &controllerOptions{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Compile RateLimitRules into the rule snapshot ConfigMaps that gateways load",
		Long: `Run the tollgate controller (a Kubernetes manager).

It watches RateLimitRules, applies the namespace policy (--namespace-policy:
by default a rule is accepted only if its Namespace's annotation
ratelimit.tollgate.dev/tenants allows its tenant; others get Accepted=False
with reason TenantNotAllowed), resolves conflicts (for each tenant+route the
oldest rule wins; the others get Accepted=False with reason Conflict), and
publishes every accepted rule into sharded ConfigMaps named
<snapshot-name>-<i>-of-<n> in --snapshot-namespace, writing only shards whose
rules changed, and never touching ConfigMaps it does not own. Each rule's
status reports Accepted, Programmed (with the snapshot version it was
published in, or reason PublishFailed) and Ready.

With --gateway-api it is also a Gateway API implementation for HTTP: it
accepts the GatewayClasses whose controllerName is
tollgate.dev/gateway-controller, compiles the HTTPRoutes attached to their
Gateways (backends resolved to ready EndpointSlice addresses) into the
ConfigMap --route-table that gateways started with --gateway-api load live,
writes the status of GatewayClasses, Gateways and HTTPRoutes, and resolves
RateLimitRules' spec.targetRef to the rules of an HTTPRoute.

Serves Prometheus metrics on --metrics-bind-address and /healthz, /readyz on
--health-probe-bind-address. With --leader-elect (default) only one replica
writes at a time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runController(cmd, o) },
	}
	o.AddFlags(cmd)
	return cmd
}

func runController(cmd *cobra.Command, o *controllerOptions) error {
	logger, err := o.log.logger()
	if err != nil {
		return err
	}
	if err := o.ctrl.Validate(); err != nil {
		return err
	}
	ctrl.SetLogger(logger)
	cfg, err := o.kube.Config("tollgate-controller")
	if err != nil {
		return err
	}
	scheme, err := newScheme(o.ctrl.GatewayAPI)
	if err != nil {
		return err
	}
	leNS := o.leaderElectNS
	if leNS == "" {
		leNS = o.ctrl.SnapshotNamespace
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        logger,
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectID,
		LeaderElectionNamespace:       leNS,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         o.cacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := controllers.Setup(mgr, o.ctrl); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("informer caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	logger.Info("starting controller", append(version.Get().KeysAndValues(),
		"snapshotNamespace", o.ctrl.SnapshotNamespace, "snapshotName", o.ctrl.SnapshotName, "snapshotFormat", o.ctrl.SnapshotFormat,
		"watchNamespaces", o.watchNamespaces, "leaderElection", o.leaderElect)...)
	if err := mgr.Start(cmd.Context()); err != nil {
		return fmt.Errorf("controller stopped: %w", err)
	}
	return nil
}

// newScheme knows the Kubernetes types and tollgate's (and, in Gateway API
// mode, the Gateway API's).
func newScheme(gatewayAPI bool) (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if gatewayAPI {
		if err := gwv1.Install(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// cacheOptions limits the manager's cache to the snapshot's own ConfigMaps
// and, with --watch-namespaces, to those namespaces.
func (o *controllerOptions) cacheOptions() cache.Options {
	cacheOpts := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			// Only the snapshot's own ConfigMaps are cached (and the RBAC
			// only allows that namespace).
			&corev1.ConfigMap{}: {
				Namespaces: map[string]cache.Config{o.ctrl.SnapshotNamespace: {}},
				Label:      labels.SelectorFromSet(labels.Set{snapshot.LabelSnapshot: o.ctrl.SnapshotName}),
			},
		},
	}
	if len(o.watchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.watchNamespaces {
			cacheOpts.DefaultNamespaces[strings.TrimSpace(ns)] = cache.Config{}
		}
	}
	return cacheOpts
}

// defaultNamespace is the pod's namespace (POD_NAMESPACE, set by the chart
// from the downward API), else tollgate-system.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "tollgate-system"
}
