package rules

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// The suite runs ConfigMapSource against a real kube-apiserver and etcd
// (envtest). Sources connect as a user that may only get, list and watch
// ConfigMaps in the namespaces that grant it, as a gateway's Role does; the
// specs write ConfigMaps as an administrator. Every spec has a namespace of
// its own.

const gatewayUser = "tollgate-gateway"

var (
	testEnv *envtest.Environment
	admin   kubernetes.Interface // writes ConfigMaps
	gateway kubernetes.Interface // what the sources use
	nsSeq   atomic.Int64
)

func TestConfigMapSourceAgainstAPIServer(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "rules: ConfigMapSource against an API server")
}

var _ = BeforeSuite(func() {
	var err error
	testEnv, err = envtestutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	admin, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	user, err := testEnv.AddUser(envtest.User{Name: gatewayUser}, cfg)
	Expect(err).NotTo(HaveOccurred())
	gateway, err = kubernetes.NewForConfig(user.Config())
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// newNamespace creates a namespace and, if grant is set, the Role and
// RoleBinding a gateway needs in it, waiting until they are in effect.
func newNamespace(grant bool) string {
	ctx := context.Background()
	ns := fmt.Sprintf("snap-ns-%d", nsSeq.Add(1))
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	if !grant {
		return ns
	}
	_, err = admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway"},
		// As config/rbac/gateway_role.yaml: read ConfigMaps, create Events.
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"},
		}, {
			APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"},
		}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gateway"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: gatewayUser}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() error {
		_, err := gateway.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		return err
	}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
	return ns
}

// running is a ConfigMapSource running in the background.
type running struct {
	src   *ConfigMapSource
	store *Store
	rec   *cmRecorder
	done  chan error
	stop  context.CancelFunc
}

// startSource runs a source for snapshot "snap" in ns until the spec ends.
func startSource(ns string) *running { return startSourceWith(ns, nil) }

// startSourceWith is startSource with options changed by edit (if not nil).
func startSourceWith(ns string, edit func(*ConfigMapOptions)) *running {
	r := &running{store: NewStore(defaultRule), rec: &cmRecorder{}, done: make(chan error, 1)}
	opts := r.rec.options(ns, "snap")
	if edit != nil {
		edit(&opts)
	}
	r.src = NewConfigMapSource(gateway, r.store, opts)
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.done <- r.src.Run(ctx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(r.done, 30*time.Second).Should(Receive())
	})
	return r
}

// publish writes rules as a snapshot of count shards at version into ns,
// creating or updating the ConfigMaps. only, if given, limits the write to
// those shard indexes, as the controller rewrites only changed shards.
func publish(ns string, count int, version int64, rules []snapshot.Rule, only ...int) {
	ctx := context.Background()
	cms := shardConfigMaps(GinkgoT(), ns, "snap", count, version, rules)
	for i, cm := range cms {
		if len(only) > 0 && !contains(only, i) {
			continue
		}
		old, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
		if err == nil {
			cm.ResourceVersion = old.ResourceVersion
			_, err = admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		} else {
			_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		}
		Expect(err).NotTo(HaveOccurred())
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// tenants builds n rules, tenant-i on every route with capacity i+1.
func tenants(n int) []snapshot.Rule {
	var out []snapshot.Rule
	for i := range n {
		out = append(out, rule(fmt.Sprintf("tenant-%d", i), "*", int64(i+1)))
	}
	return out
}

// missing returns the first of n tenants whose rule the store does not
// serve, or "".
func missing(store *Store, n int) string {
	for i := range n {
		if got := capacityOf(store, fmt.Sprintf("tenant-%d", i), "any"); got != int64(i+1) {
			return fmt.Sprintf("tenant-%d has capacity %d", i, got)
		}
	}
	return ""
}
