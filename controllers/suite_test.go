package controllers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// The suite runs the controllers against a real kube-apiserver and etcd
// (envtest). Every spec gets its own namespace for rules and its own snapshot
// name, and starts its own manager watching only that namespace, so specs do
// not see each other's rules.

var (
	testEnv *envtest.Environment
	cfg     *rest.Config
	k8s     client.Client
	scheme  = runtime.NewScheme()
)

const snapshotNS = "tollgate-system"

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controllers")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())

	var err error
	testEnv, err = envtestutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	cfg.QPS, cfg.Burst = 2000, 4000
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: snapshotNS}})).To(Succeed())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

var specSeq atomic.Int64

// fixture is one spec's namespace, snapshot name and running manager.
type fixture struct {
	ns, ns2  string
	snapName string
	stop     context.CancelFunc
	done     chan struct{}
}

// newFixture creates a namespace and starts controllers that read rules from
// it and publish into a snapshot of their own.
func newFixture() *fixture {
	n := specSeq.Add(1)
	f := &fixture{ns: fmt.Sprintf("rules-%d", n), ns2: fmt.Sprintf("rules-%d-b", n), snapName: fmt.Sprintf("snap-%d", n)}
	// Both namespaces may declare rules for any tenant, "*" included (the
	// namespace policy's own specs use namespaces of their own).
	for _, ns := range []string{f.ns, f.ns2} {
		Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Annotations: map[string]string{
			v1alpha1.AnnotationTenants: "*", v1alpha1.AnnotationAllowWildcardTenant: "true",
		}}})).To(Succeed())
	}
	f.start()
	DeferCleanup(f.stopManager)
	return f
}

func (f *fixture) start() {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{f.ns: {}, f.ns2: {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.ConfigMap{}: {
					Namespaces: map[string]cache.Config{snapshotNS: {}},
					Label:      labels.SelectorFromSet(labels.Set{snapshot.LabelSnapshot: f.snapName}),
				},
			},
		},
		// Several managers run in one process over the suite.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(Setup(mgr, Options{SnapshotNamespace: snapshotNS, SnapshotName: f.snapName, StatusWorkers: 8})).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	f.stop, f.done = cancel, make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(f.done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
}

func (f *fixture) stopManager() {
	if f.stop != nil {
		f.stop()
		Eventually(f.done, 30*time.Second).Should(BeClosed())
		f.stop = nil
	}
}

// shardConfigMaps lists the snapshot's ConfigMaps straight from the API server.
func (f *fixture) shardConfigMaps(g Gomega) []corev1.ConfigMap {
	var list corev1.ConfigMapList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(snapshotNS),
		client.MatchingLabels{snapshot.LabelSnapshot: f.snapName})).To(Succeed())
	return list.Items
}

// snapshot decodes the published snapshot as a gateway would.
func (f *fixture) snapshot(g Gomega) *snapshot.Set {
	var shards []*snapshot.Shard
	for _, cm := range f.shardConfigMaps(g) {
		sh, err := snapshot.FromConfigMap(&cm)
		g.Expect(err).NotTo(HaveOccurred())
		shards = append(shards, sh)
	}
	set, err := snapshot.Select(shards)
	g.Expect(err).NotTo(HaveOccurred())
	return set
}

// capacity is the capacity of the rule in force for tenant and route in
// the published snapshot; it fails g while no rule applies (inside
// Eventually: polled again, where a nil rule's field would panic).
func (f *fixture) capacity(g Gomega, tenant, route string) int64 {
	return capacityIn(g, f.snapshot(g), tenant, route)
}

// capacityIn is capacity in set.
func capacityIn(g Gomega, set *snapshot.Set, tenant, route string) int64 {
	r := set.Lookup(tenant, route)
	g.Expect(r).NotTo(BeNil(), "no rule for tenant %s route %s in snapshot version %d", tenant, route, set.Version())
	return r.Capacity
}

// newRule builds a RateLimitRule in the fixture's namespace.
func (f *fixture) newRule(name, tenant, route string, capacity, perSecond int64) *v1alpha1.RateLimitRule {
	return &v1alpha1.RateLimitRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: v1alpha1.RateLimitRuleSpec{
			Tenant: tenant, Route: route, Capacity: capacity, RefillPerSecond: ptr.To(perSecond),
		},
	}
}

func (f *fixture) get(g Gomega, obj *v1alpha1.RateLimitRule) *v1alpha1.RateLimitRule {
	var out v1alpha1.RateLimitRule
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), &out)).To(Succeed())
	return &out
}
