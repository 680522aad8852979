package membership

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// ghostLease creates a Lease in ns as a pod of group would have left it.
func ghostLease(ns, name, group string, renewed time.Time) {
	now := metav1.NewMicroTime(renewed)
	_, err := k8s.CoordinationV1().Leases(ns).Create(context.Background(), &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelGroup: group}},
		Spec: coordv1.LeaseSpec{
			HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](2), RenewTime: &now,
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

func leaseExists(ns, name string) func() bool {
	return func() bool {
		_, err := k8s.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
		Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "get lease: %v", err)
		return err == nil
	}
}

var _ = Describe("Membership", func() {
	It("counts members joining and leaving gracefully", func() {
		ns := newNamespace(k8s)
		// A long lease duration: a drop within it is due to the deletion.
		long := func(o *Options) { o.LeaseDuration = 6 * time.Second }
		a := startMember(cfg, ns, "a", long)
		b := startMember(cfg, ns, "b", long)
		c := startMember(cfg, ns, "c", long)
		Eventually(replicas(a, b, c)).Should(Equal(all(3, 3)))

		d := startMember(cfg, ns, "d", long)
		Eventually(replicas(a, b, c, d)).Should(Equal(all(4, 4)))
		Expect(a.reported.Load()).To(BeEquivalentTo(4))

		d.stop()
		Expect(leaseExists(ns, d.m.LeaseName())()).To(BeFalse())
		Eventually(replicas(a, b, c), 3*time.Second).Should(Equal(all(3, 3)))
		Expect(a.reported.Load()).To(BeEquivalentTo(3))
	})

	It("drops a killed member once its lease expires", func() {
		ns := newNamespace(k8s)
		a := startMember(cfg, ns, "a", nil)
		b := startMember(cfg, ns, "b", nil)
		c := startMember(cfg, ns, "c", func(o *Options) { o.KeepLeaseOnStop = true })
		Eventually(replicas(a, b, c)).Should(Equal(all(3, 3)))

		c.stop()
		Expect(leaseExists(ns, c.m.LeaseName())()).To(BeTrue())
		Consistently(replicas(a, b), 800*time.Millisecond).Should(Equal(all(3, 2)))
		Eventually(replicas(a, b)).Should(Equal(all(2, 2)))
	})

	It("counts members whose clocks are an hour off", func() {
		ns := newNamespace(k8s)
		skew := func(d time.Duration, keep bool) func(*Options) {
			return func(o *Options) {
				o.Clock = func() time.Time { return time.Now().Add(d) }
				o.KeepLeaseOnStop = keep
			}
		}
		a := startMember(cfg, ns, "a", nil)
		ahead := startMember(cfg, ns, "ahead", skew(time.Hour, true))
		behind := startMember(cfg, ns, "behind", skew(-time.Hour, false))
		Eventually(replicas(a, ahead, behind)).Should(Equal(all(3, 3)))

		// Its renewTime is an hour in the future, yet its lease expires.
		ahead.stop()
		Eventually(replicas(a, behind)).Should(Equal(all(2, 2)))

		behind.stop()
		Eventually(replicas(a)).Should(Equal(all(1, 1)))
	})

	It("ignores stale leases and other groups", func() {
		ns := newNamespace(k8s)
		ghostLease(ns, "gw-dead-long-ago", "gw", time.Now().Add(-time.Hour))
		ghostLease(ns, "other-x", "other", time.Now())
		a := startMember(cfg, ns, "a", nil)
		b := startMember(cfg, ns, "b", nil)
		Eventually(replicas(a, b)).Should(Equal(all(2, 2)))
		ghostLease(ns, "gw-dead-too", "gw", time.Now().Add(-time.Hour))
		Consistently(replicas(a, b), time.Second).Should(Equal(all(2, 2)))

		// A dead pod whose clock was ahead: counted until it is seen not to
		// renew for a lease duration.
		ghostLease(ns, "gw-dead-ahead", "gw", time.Now().Add(time.Hour))
		Eventually(replicas(a)).Should(Equal(all(3, 1)))
		Eventually(replicas(a, b)).Should(Equal(all(2, 2)))
	})

	It("keeps the last count while the API server is unreachable", func() {
		env, c, cs := startEnv(3 * time.Second)
		DeferCleanup(stopEnv, env)
		ns := newNamespace(cs)
		ms := []*member{startMember(c, ns, "a", nil), startMember(c, ns, "b", nil), startMember(c, ns, "c", nil)}
		Eventually(replicas(ms...)).Should(Equal(all(3, 3)))

		// Graceful shutdown can outlast the timeout; then it is killed.
		if err := env.ControlPlane.APIServer.Stop(); err != nil {
			GinkgoWriter.Printf("stopping the API server: %v\n", err)
		}
		_, err := cs.Discovery().ServerVersion()
		Expect(err).To(HaveOccurred())
		for _, mem := range ms {
			Eventually(mem.m.isCounting).Should(BeFalse())
		}
		Consistently(replicas(ms...), 5*time.Second, 100*time.Millisecond).Should(Equal(all(3, 3)))
	})
})

var _ = Describe("Static", func() {
	It("reports its count, at least 1", func() {
		Expect(Static(3).Replicas()).To(Equal(3))
		Expect(Static(0).Replicas()).To(Equal(1))
		Expect(Static(-2).Replicas()).To(Equal(1))
	})
})

var _ = Describe("New", func() {
	cs := fake.NewClientset()

	It("fills in defaults", func() {
		m, err := New(cs, Options{Namespace: "ns", Group: "gw", LeaseDuration: 1500 * time.Millisecond,
			RenewInterval: 100 * time.Millisecond})
		Expect(err).NotTo(HaveOccurred())
		Expect(m.opts.Identity).NotTo(BeEmpty())
		Expect(m.opts.LeaseDuration).To(Equal(2 * time.Second))
		Expect(m.opts.RecountInterval).To(Equal(DefaultRecountInterval))
		Expect(m.opts.Clock).NotTo(BeNil())
		Expect(m.Replicas()).To(Equal(1))

		m, err = New(cs, Options{Namespace: "ns", Group: "gw", Identity: "pod-1"})
		Expect(err).NotTo(HaveOccurred())
		Expect(m.opts.LeaseDuration).To(Equal(DefaultLeaseDuration))
		Expect(m.opts.RenewInterval).To(Equal(DefaultRenewInterval))
		Expect(m.LeaseName()).To(Equal("gw-pod-1"))
	})

	It("rejects bad options", func() {
		for _, o := range []Options{
			{Group: "gw"},
			{Namespace: "ns"},
			{Namespace: "ns", Group: "gw", RenewInterval: -time.Second},
			{Namespace: "ns", Group: "gw", LeaseDuration: 2 * time.Second, RenewInterval: time.Second},
		} {
			_, err := New(cs, o)
			Expect(err).To(HaveOccurred(), "%+v", o)
		}
		_, err := New(nil, Options{Namespace: "ns", Group: "gw"})
		Expect(err).To(HaveOccurred())
	})

	It("makes valid, distinct lease names and label values", func() {
		long := strings.Repeat("release", 12)
		names := map[string]bool{}
		for _, o := range []Options{
			{Group: long, Identity: "pod-1"},
			{Group: long, Identity: "pod-2"},
			{Group: "My_Release", Identity: "Pod.1"},
			{Group: "my-release", Identity: "pod-1"},
			{Group: "--", Identity: "__"},
		} {
			o.Namespace = "ns"
			m, err := New(cs, o)
			Expect(err).NotTo(HaveOccurred())
			Expect(validation.IsDNS1123Label(m.LeaseName())).To(BeEmpty(), m.LeaseName())
			Expect(validation.IsValidLabelValue(m.groupVal)).To(BeEmpty(), m.groupVal)
			Expect(names).NotTo(HaveKey(m.LeaseName()))
			names[m.LeaseName()] = true
		}
		Expect(dnsLabel("my-release")).To(Equal("my-release"))
	})
})
