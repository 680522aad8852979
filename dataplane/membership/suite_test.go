package membership

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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
)

// The suite runs gateways' memberships against a real kube-apiserver and etcd
// (envtest). Every spec uses its own namespace; the API-outage spec starts an
// environment of its own, since it stops the API server.

var (
	testEnv *envtest.Environment
	cfg     *rest.Config
	k8s     kubernetes.Interface
	nsSeq   atomic.Int64
)

func TestMembership(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Membership")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(15 * time.Second)
	SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	SetDefaultConsistentlyPollingInterval(20 * time.Millisecond)
	testEnv, cfg, k8s = startEnv(0)
})

var _ = AfterSuite(func() { stopEnv(testEnv) })

// startEnv starts an envtest environment. A positive apiStopTimeout bounds
// the wait for each control plane process to shut down before it is killed.
func startEnv(apiStopTimeout time.Duration) (*envtest.Environment, *rest.Config, kubernetes.Interface) {
	env, err := envtestutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	env.ControlPlaneStopTimeout = apiStopTimeout
	c, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	c.QPS, c.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(c)
	Expect(err).NotTo(HaveOccurred())
	return env, c, cs
}

// stopEnv stops env, tolerating errors: its API server may be stopped already.
func stopEnv(env *envtest.Environment) {
	if env == nil {
		return
	}
	if err := env.Stop(); err != nil {
		GinkgoWriter.Printf("stopping envtest: %v\n", err)
	}
}

// newNamespace creates a namespace for one spec.
func newNamespace(cs kubernetes.Interface) string {
	ns := fmt.Sprintf("membership-%d", nsSeq.Add(1))
	_, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return ns
}

// member is one running gateway's Membership.
type member struct {
	m        *Membership
	cancel   context.CancelFunc
	done     chan struct{}
	reported atomic.Int64 // last value given to OnChange
}

// startMember runs a Membership with a client of its own, with the suite's
// short durations, changed by tweak if given. It is stopped at the end of the
// spec if not before.
func startMember(c *rest.Config, ns, id string, tweak func(*Options)) *member {
	cs, err := kubernetes.NewForConfig(c)
	Expect(err).NotTo(HaveOccurred())
	mem := &member{done: make(chan struct{})}
	opts := Options{
		Namespace: ns, Group: "gw", Identity: id,
		LeaseDuration: 2 * time.Second, RenewInterval: 300 * time.Millisecond, RecountInterval: 100 * time.Millisecond,
		OnChange: func(n int) { mem.reported.Store(int64(n)) },
		Logger:   GinkgoLogr.WithValues("member", id),
	}
	if tweak != nil {
		tweak(&opts)
	}
	mem.m, err = New(cs, opts)
	Expect(err).NotTo(HaveOccurred())
	var ctx context.Context
	ctx, mem.cancel = context.WithCancel(context.Background())
	go func() {
		defer GinkgoRecover()
		defer close(mem.done)
		Expect(mem.m.Run(ctx)).To(Succeed())
	}()
	DeferCleanup(mem.stop)
	return mem
}

// stop cancels the member and waits for Run to return.
func (mem *member) stop() {
	mem.cancel()
	Eventually(mem.done, 10*time.Second).Should(BeClosed())
}

// replicas polls what each member reports.
func replicas(ms ...*member) func() []int {
	return func() []int {
		out := make([]int, len(ms))
		for i, mem := range ms {
			out[i] = mem.m.Replicas()
		}
		return out
	}
}

// all is n repeated k times.
func all(n, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n
	}
	return out
}

// isCounting tells whether the last recount counted rather than froze.
func (m *Membership) isCounting() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counting
}
