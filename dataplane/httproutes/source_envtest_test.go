package httproutes

import (
	"context"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/dataplane/tlscerts"
	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

const (
	timeout = 20 * time.Second
	poll    = 10 * time.Millisecond
)

// reports collects callbacks; safe for concurrent use.
type reports struct {
	mu   sync.Mutex
	errs []string
}

func (r *reports) add(err error) { r.mu.Lock(); r.errs = append(r.errs, err.Error()); r.mu.Unlock() }

func (r *reports) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "\n")
}

// runInBackground runs f until the spec ends.
func runInBackground(f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done, timeout).Should(Receive())
	})
}

// table is a route table of n rules, as the controller writes it into
// namespace ns.
func table(ns string, n int) *corev1.ConfigMap {
	t := &routetable.Table{Format: routetable.Format}
	for i := range n {
		t.Rules = append(t.Rules, routetable.Rule{ID: routetable.RuleID("shop", "orders", "", i), Route: "shop/orders", Index: i,
			Matches: []routetable.Match{{PathType: routetable.PathPrefix, PathValue: "/"}}})
	}
	cm, err := t.ConfigMap(ns, routetable.DefaultName)
	Expect(err).NotTo(HaveOccurred())
	return cm
}

var _ = Describe("Objects of the controller's names that the controller does not own", func() {
	ctx := context.Background()

	It("refuses a route table ConfigMap without the controller's managed-by label, then loads the controller's", func() {
		ns := newNamespace()
		var rep reports
		var refused reports
		src := NewSource(k8s, SourceOptions{Namespace: ns, Name: routetable.DefaultName, OnError: rep.add,
			OnForeign: func(cm *corev1.ConfigMap, err error) {
				Expect(cm.Name).To(Equal(routetable.DefaultName))
				refused.add(err)
			}})
		runInBackground(src.Run)

		// Someone else's ConfigMap of the table's name: valid content, the
		// route table label, not the managed-by label.
		foreign := table(ns, 3)
		delete(foreign.Labels, snapshot.LabelManagedBy)
		_, err := k8s.CoreV1().ConfigMaps(ns).Create(ctx, foreign, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() bool { return src.Loaded() || refused.String() != "" }, timeout, poll).Should(BeTrue())
		Expect(src.Loaded()).To(BeFalse(), "the foreign table was loaded with %d rules", src.Current().Len())
		Expect(refused.String()).To(ContainSubstring("route table ConfigMap " + ns + "/tollgate-httproutes refused, no route table is loaded yet: it is not the controller's"))
		Expect(rep.String()).To(BeEmpty())

		// The controller's next pass rewrites it, with its labels.
		mine := table(ns, 1)
		cur, err := k8s.CoreV1().ConfigMaps(ns).Get(ctx, routetable.DefaultName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		mine.ResourceVersion = cur.ResourceVersion
		_, err = k8s.CoreV1().ConfigMaps(ns).Update(ctx, mine, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(src.Loaded, timeout, poll).Should(BeTrue())
		Expect(src.Current().Len()).To(Equal(1))

		By("an update that drops the label is refused and the last good table stays")
		cur, err = k8s.CoreV1().ConfigMaps(ns).Get(ctx, routetable.DefaultName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		other := table(ns, 5)
		other.ResourceVersion = cur.ResourceVersion
		delete(other.Labels, snapshot.LabelManagedBy)
		_, err = k8s.CoreV1().ConfigMaps(ns).Update(ctx, other, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(refused.String, timeout, poll).Should(ContainSubstring("the last good route table stays in use: it is not the controller's"))
		Expect(src.Current().Len()).To(Equal(1))
		Expect(rep.String()).To(BeEmpty())
	})

	It("refuses a TLS Secret without the controller's managed-by label, then loads the controller's", func() {
		ns := newNamespace()
		var rep reports
		var refused reports
		store := tlscerts.NewStore(rep.add)
		store.SetListeners([]routetable.TLSListener{{Listener: "shop/gw/https", Hostname: "shop.example.com", Certificates: []string{"shop/cert"}}})
		name := routetable.TLSSecretName(routetable.DefaultName)
		runInBackground(func(ctx context.Context) error {
			return store.Watch(ctx, tlscerts.WatchOptions{Client: k8s, Namespace: ns, Table: routetable.DefaultName,
				OnForeign: func(s *corev1.Secret, err error) {
					Expect(s.Name).To(Equal(name))
					refused.add(err)
				}})
		})
		served := func() string {
			if c := store.Current().Lookup("shop.example.com"); c != nil && c.Leaf != nil {
				return c.Leaf.Subject.CommonName
			}
			return ""
		}

		secret := func(cn string) *corev1.Secret {
			crt, key := certtest.New(cn, "shop.example.com")
			c, k := routetable.CertKeys("shop/cert")
			return &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
					routetable.LabelRouteTable: routetable.DefaultName, snapshot.LabelManagedBy: snapshot.ManagedByValue,
				}},
				Type: corev1.SecretTypeOpaque, Data: map[string][]byte{c: crt, k: key},
			}
		}
		foreign := secret("foreign")
		delete(foreign.Labels, snapshot.LabelManagedBy)
		_, err := k8s.CoreV1().Secrets(ns).Create(ctx, foreign, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() bool { return served() != "" || refused.String() != "" }, timeout, poll).Should(BeTrue())
		Expect(served()).To(BeEmpty(), "a foreign certificate is served")
		Expect(refused.String()).To(ContainSubstring("TLS Secret " + ns + "/" + name + " refused, the certificates in force stay: it is not the controller's"))
		// The message names the Secret, never its content.
		Expect(refused.String()).NotTo(ContainSubstring("PRIVATE KEY"))
		Expect(rep.String()).To(BeEmpty())

		mine := secret("controller")
		cur, err := k8s.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		mine.ResourceVersion = cur.ResourceVersion
		_, err = k8s.CoreV1().Secrets(ns).Update(ctx, mine, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(served, timeout, poll).Should(Equal("controller"))

		By("a rewrite without the label is refused and the controller's certificate stays")
		cur, err = k8s.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		again := secret("foreign-again")
		again.ResourceVersion = cur.ResourceVersion
		delete(again.Labels, snapshot.LabelManagedBy)
		_, err = k8s.CoreV1().Secrets(ns).Update(ctx, again, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() int { return strings.Count(refused.String(), "refused") }, timeout, poll).Should(Equal(2))
		Expect(served()).To(Equal("controller"))
	})
})
