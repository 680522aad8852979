package membership

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
)

// applyManifests creates every object of the given files under config/.
func applyManifests(files ...string) {
	c, err := client.New(cfg, client.Options{})
	Expect(err).NotTo(HaveOccurred())
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", f))
		Expect(err).NotTo(HaveOccurred())
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var u unstructured.Unstructured
			err := dec.Decode(&u.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			Expect(err).NotTo(HaveOccurred(), f)
			if len(u.Object) == 0 {
				continue
			}
			Expect(c.Create(context.Background(), &u)).To(Succeed(), "%s: %s %s", f, u.GetKind(), u.GetName())
		}
	}
}

// The gateway's ServiceAccount as the API server sees a pod's token: the
// username of the ServiceAccount, and (Kubernetes 1.30+) the pod's name.
func gatewayConfig(pod string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:tollgate-system:tollgate-gateway",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:tollgate-system", "system:authenticated"},
	}
	if pod != "" {
		c.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/pod-name": {pod}}
	}
	return c
}

var _ = Describe("The gateway's permissions (config/rbac)", Ordered, func() {
	const ns = "tollgate-system"
	const controllerLease = "tollgate-controller.ratelimit.tollgate.dev"
	ctx := context.Background()

	BeforeAll(func() {
		_, err := k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		applyManifests("rbac/gateway_service_account.yaml", "rbac/gateway_role.yaml",
			"rbac/gateway_role_binding.yaml", "rbac/gateway_lease_policy.yaml")
		// The controller's leader election Lease, as controller-runtime
		// writes it.
		now := metav1.NewMicroTime(time.Now())
		_, err = k8s.CoordinationV1().Leases(ns).Create(ctx, &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: controllerLease},
			Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To("controller-0_abc"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		// The API server applies a new admission policy once its informer
		// has seen it: wait until a write it forbids is refused.
		gw := kubernetes.NewForConfigOrDie(gatewayConfig("tollgate-gateway-probe"))
		Eventually(func() bool {
			l, err := gw.CoordinationV1().Leases(ns).Get(ctx, controllerLease, metav1.GetOptions{})
			if err != nil {
				return false
			}
			l.Spec.HolderIdentity = ptr.To("controller-0_abc") // unchanged holder: harmless if let through
			_, err = gw.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
			return apierrors.IsForbidden(err)
		}, 30*time.Second, 100*time.Millisecond).Should(BeTrue(), "the lease admission policy never took effect")
	})

	// forbidden asserts that err is a 403 from the API server.
	forbidden := func(err error) {
		GinkgoHelper()
		Expect(err).To(HaveOccurred())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got %v", err)
	}

	for _, pod := range []string{"tollgate-gateway-7d9f-abcde", ""} {
		name := "with a pod-bound token"
		if pod == "" {
			name = "with a token that names no pod"
		}
		It("keeps its own membership but cannot touch the controller's Lease, "+name, func() {
			gw := kubernetes.NewForConfigOrDie(gatewayConfig(pod))
			leases := gw.CoordinationV1().Leases(ns)
			id := pod
			if id == "" {
				id = "gw-no-pod"
			}

			// Its own membership works under these permissions: create,
			// renew, count, and delete on shutdown.
			mem := startMember(gatewayConfig(pod), ns, id, func(o *Options) { o.Group = "tollgate-gateway" })
			Eventually(leaseExists(ns, mem.m.LeaseName())).Should(BeTrue())
			Eventually(func() error {
				l, err := k8s.CoordinationV1().Leases(ns).Get(ctx, mem.m.LeaseName(), metav1.GetOptions{})
				if err != nil {
					return err
				}
				if l.ResourceVersion == "" || l.Spec.AcquireTime.Equal(l.Spec.RenewTime) {
					return errors.New("not renewed yet")
				}
				return nil
			}).Should(Succeed())
			Expect(mem.m.Replicas()).To(Equal(1))

			// The controller's Lease: reading is allowed (RBAC), writing is not.
			l, err := leases.Get(ctx, controllerLease, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			l.Spec.HolderIdentity = ptr.To(id)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			forbidden(err)
			// Not even by labelling it as a member first.
			l.Labels = map[string]string{LabelGroup: "tollgate-gateway"}
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			forbidden(err)
			forbidden(leases.Delete(ctx, controllerLease, metav1.DeleteOptions{}))
			// Nor by creating it first, labelled, under the controller's name.
			_, err = leases.Create(ctx, &coordv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "tollgate-controller-x", Labels: map[string]string{LabelGroup: "tollgate-gateway"}},
				Spec:       coordv1.LeaseSpec{HolderIdentity: ptr.To(id)},
			}, metav1.CreateOptions{})
			forbidden(err)

			after, err := k8s.CoordinationV1().Leases(ns).Get(ctx, controllerLease, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(*after.Spec.HolderIdentity).To(Equal("controller-0_abc"))

			mem.stop()
			Expect(leaseExists(ns, mem.m.LeaseName())()).To(BeFalse(), "the gateway deletes its own Lease on shutdown")
		})
	}

	It("may create Events in its namespace (a refused foreign object's), and do nothing else with Events", func() {
		gw := kubernetes.NewForConfigOrDie(gatewayConfig("tollgate-gateway-7d9f-abcde"))
		ev := func(ns string) *eventsv1.Event {
			return &eventsv1.Event{
				ObjectMeta: metav1.ObjectMeta{Name: "tollgate-rules-0-of-2.18a0c0ffee", Namespace: ns},
				EventTime:  metav1.NewMicroTime(time.Now()), Type: corev1.EventTypeWarning,
				Reason: "ForeignConfigMap", Action: "Load", Note: "refused",
				ReportingController: "tollgate-gateway", ReportingInstance: "tollgate-gateway-tollgate-gateway-7d9f-abcde",
				Regarding: corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ns, Name: "tollgate-rules-0-of-2"},
			}
		}
		created, err := gw.EventsV1().Events(ns).Create(ctx, ev(ns), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		_, err = gw.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		forbidden(err)
		_, err = gw.EventsV1().Events(ns).Patch(ctx, created.Name, types.MergePatchType, []byte(`{"note":"rewritten"}`), metav1.PatchOptions{})
		forbidden(err)
		forbidden(gw.EventsV1().Events(ns).Delete(ctx, created.Name, metav1.DeleteOptions{}))
		// Core Events are another API: not granted.
		_, err = gw.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "x.18a0c0ffee", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "x"}, Reason: "x", Message: "x"}, metav1.CreateOptions{})
		forbidden(err)
		// Nor in another namespace.
		other := "tollgate-other"
		_, err = k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = gw.EventsV1().Events(other).Create(ctx, ev(other), metav1.CreateOptions{})
		forbidden(err)
	})

	It("cannot rewrite another replica's Lease with a pod-bound token", func() {
		ghostLease(ns, "tollgate-gateway-other-pod", "tollgate-gateway", time.Now())
		leases := kubernetes.NewForConfigOrDie(gatewayConfig("tollgate-gateway-mine")).CoordinationV1().Leases(ns)
		l, err := leases.Get(ctx, "tollgate-gateway-other-pod", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		forbidden(err)
		forbidden(leases.Delete(ctx, l.Name, metav1.DeleteOptions{}))
		// Nor add members of its own invention to inflate the count.
		_, err = leases.Create(ctx, &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "tollgate-gateway-invented", Labels: map[string]string{LabelGroup: "tollgate-gateway"}},
			Spec:       coordv1.LeaseSpec{HolderIdentity: ptr.To("tollgate-gateway-mine")},
		}, metav1.CreateOptions{})
		forbidden(err)
	})
})
