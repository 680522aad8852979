package rules

import (
	"bytes"
	"compress/gzip"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/tollgate-dev/tollgate/dataplane/foreign"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

const (
	timeout = 20 * time.Second
	poll    = 10 * time.Millisecond
)

var _ = Describe("ConfigMapSource", func() {
	ctx := context.Background()

	It("serves the published shards once synced", func() {
		ns := newNamespace(true)
		publish(ns, 2, 1, tenants(20))
		r := startSource(ns)
		Eventually(r.src.HasSynced, timeout, poll).Should(BeTrue())
		Expect(r.store.Loaded()).To(BeTrue())
		Expect(r.store.Version()).To(Equal(int64(1)))
		Expect(r.store.Current().Count()).To(Equal(2))
		Expect(missing(r.store, 20)).To(BeEmpty())
		Expect(r.rec.errors()).To(BeEmpty())
		Expect(r.rec.counts()).To(Equal(1), "one reload")
	})

	It("follows a changed shard without a restart", func() {
		ns := newNamespace(true)
		publish(ns, 2, 1, tenants(20))
		r := startSource(ns)
		Eventually(r.src.HasSynced, timeout, poll).Should(BeTrue())

		changed := tenants(20)
		changed[3].Capacity = 333
		idx := snapshot.ShardIndex(changed[3].Tenant, changed[3].Route, 2)
		publish(ns, 2, 2, changed, idx)
		Eventually(func() int64 { return capacityOf(r.store, "tenant-3", "x") }, timeout, poll).Should(Equal(int64(333)))
		Expect(r.store.Version()).To(Equal(int64(2)))
		Expect(r.rec.errors()).To(BeEmpty())
	})

	It("keeps serving the last good rules when a shard is overwritten with garbage", func() {
		ns := newNamespace(true)
		publish(ns, 1, 1, tenants(10))
		r := startSource(ns)
		Eventually(r.src.HasSynced, timeout, poll).Should(BeTrue())
		before := r.store.Current()

		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "snap-0-of-1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		cm.BinaryData[snapshot.DataKey] = []byte("not gzip")
		_, err = admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		Eventually(r.rec.errors, timeout, poll).Should(ContainSubstring("snapshot ConfigMap " + ns + "/snap-0-of-1 rejected"))
		// The error is reported once the event is handled, so this is after.
		Expect(r.store.Current()).To(BeIdenticalTo(before))
		Expect(missing(r.store, 10)).To(BeEmpty())

		publish(ns, 1, 2, tenants(11))
		Eventually(func() string { return missing(r.store, 11) }, timeout, poll).Should(BeEmpty())
		Expect(r.store.Version()).To(Equal(int64(2)))
	})

	It("refuses a shard that inflates past the writer's bound (gzip bomb) and keeps the last good one", func() {
		ns := newNamespace(true)
		publish(ns, 1, 1, tenants(10))
		r := startSource(ns)
		Eventually(r.src.HasSynced, timeout, poll).Should(BeTrue())
		before := r.store.Current()

		// A well-formed shard of version 2 padded with 60 MiB of JSON
		// whitespace: about 60 KiB compressed, so it fits the writer's
		// compressed bound, but no writer produces it.
		var raw bytes.Buffer
		zw := gzip.NewWriter(&raw)
		_, _ = zw.Write([]byte(`{"format":1,"index":0,"count":1,"version":2,"rules":[]}`))
		_, _ = zw.Write(bytes.Repeat([]byte(" "), 60<<20))
		Expect(zw.Close()).To(Succeed())
		Expect(raw.Len()).To(BeNumerically("<", snapshot.MaxShardBytes))
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "snap-0-of-1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		cm.BinaryData[snapshot.DataKey] = raw.Bytes()
		cm.Annotations[snapshot.AnnotationVersion] = "2"
		cm.Annotations[snapshot.AnnotationChecksum] = snapshot.NewShard(0, 1, 2, nil).Checksum
		_, err = admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		Eventually(r.rec.errors, timeout, poll).Should(ContainSubstring("decompresses to more than"))
		Expect(r.store.Current()).To(BeIdenticalTo(before))
		Expect(missing(r.store, 10)).To(BeEmpty())
		Expect(r.store.Version()).To(Equal(int64(1)))
	})

	It("refuses a shard whose version goes backwards and keeps the last good one", func() {
		ns := newNamespace(true)
		publish(ns, 1, 5, tenants(10))
		r := startSource(ns)
		Eventually(r.src.HasSynced, timeout, poll).Should(BeTrue())
		Expect(r.store.Version()).To(Equal(int64(5)))

		// An older snapshot put back: valid, but version 4 < 5.
		older := tenants(10)
		older[0].Capacity = 777
		publish(ns, 1, 4, older)
		Eventually(r.rec.errors, timeout, poll).Should(ContainSubstring("version 4 goes backwards"))
		Expect(r.store.Version()).To(Equal(int64(5)))
		Expect(missing(r.store, 10)).To(BeEmpty())

		By("and a whole layout older than the one in force")
		publish(ns, 2, 3, older)
		Expect(admin.CoreV1().ConfigMaps(ns).Delete(ctx, "snap-0-of-1", metav1.DeleteOptions{})).To(Succeed())
		Eventually(r.rec.errors, timeout, poll).Should(ContainSubstring("version 3 goes backwards; version 5 stays in force"))
		Consistently(r.store.Version, time.Second, poll).Should(Equal(int64(5)))
		Expect(missing(r.store, 10)).To(BeEmpty())

		By("a newer version is taken again")
		publish(ns, 2, 6, older)
		Eventually(func() int64 { return capacityOf(r.store, "tenant-0", "x") }, timeout, poll).Should(Equal(int64(777)))
	})

	It("switches from 1 shard to 2 with every rule visible throughout", func() {
		const n = 40
		ns := newNamespace(true)
		publish(ns, 1, 1, tenants(n))
		r := startSource(ns)
		Eventually(r.src.HasSynced, timeout, poll).Should(BeTrue())

		// Check every rule, continuously, until the switch is over.
		var stop atomic.Bool
		var firstGap atomic.Value
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if m := missing(r.store, n); m != "" {
					firstGap.CompareAndSwap(nil, m)
				}
			}
		}()

		publish(ns, 2, 2, tenants(n)) // as the controller does: new layout first
		Eventually(func() int { return r.store.Current().Count() }, timeout, poll).Should(Equal(2))
		Expect(admin.CoreV1().ConfigMaps(ns).Delete(ctx, "snap-0-of-1", metav1.DeleteOptions{})).To(Succeed())
		// A later change proves the delete has been handled: events arrive in order.
		publish(ns, 2, 3, tenants(n), 0)
		Eventually(r.store.Version, timeout, poll).Should(Equal(int64(3)))
		stop.Store(true)
		wg.Wait()

		Expect(firstGap.Load()).To(BeNil())
		Expect(missing(r.store, n)).To(BeEmpty())
		Expect(r.store.Current().Count()).To(Equal(2))
		Expect(r.rec.errors()).To(BeEmpty())
	})

	It("refuses a complete layout the controller does not own, even of a higher version", func() {
		ns := newNamespace(true)
		publish(ns, 1, 1, tenants(10))
		// As the gateway wires it: the refusals go to a foreign.Reporter
		// with a counter and an Event recorder that writes, as the gateway
		// user, to the API server.
		refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused_total"}, []string{"source"})
		broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: gateway.EventsV1()})
		evCtx, stopEvents := context.WithCancel(ctx)
		Expect(broadcaster.StartRecordingToSinkWithContext(evCtx)).To(Succeed())
		DeferCleanup(func() { stopEvents(); broadcaster.Shutdown() })
		reporter := foreign.New(foreign.Options{Refused: refused, Recorder: broadcaster.NewRecorder(clientgoscheme.Scheme, "tollgate-gateway"),
			Log: funcr.New(func(_, args string) { GinkgoWriter.Println(args) }, funcr.Options{})})
		r := startSourceWith(ns, func(o *ConfigMapOptions) {
			o.OnForeign = func(cm *corev1.ConfigMap, err error) { reporter.Refuse("rules", cm, err) }
		})
		Eventually(r.src.HasSynced, timeout, poll).Should(BeTrue())
		Expect(r.store.Version()).To(Equal(int64(1)))

		// A complete, valid layout of 2 shards at version 100 that carries
		// the snapshot label but not the controller's managed-by label
		// (restored from a backup, or another installation's): the
		// controller neither updates nor deletes it, so a gateway that
		// took it would keep it in force and refuse the controller's
		// later versions as going backwards.
		hostile := tenants(10)
		hostile[0].Capacity = 999
		theirs := shardConfigMaps(GinkgoT(), ns, "snap", 2, 100, hostile)
		for _, cm := range theirs {
			delete(cm.Labels, snapshot.LabelManagedBy)
			_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		// A later write proves the foreign ConfigMaps' events were handled
		// (events arrive in order): the controller's next version.
		next := tenants(11)
		publish(ns, 1, 2, next)
		Eventually(r.store.Version, timeout, poll).Should(Equal(int64(2)))
		Expect(missing(r.store, 11)).To(BeEmpty())
		Expect(capacityOf(r.store, "tenant-0", "x")).To(Equal(int64(1)))
		Expect(testutil.ToFloat64(refused.WithLabelValues("rules"))).To(Equal(2.0), "one refusal per foreign ConfigMap")
		Expect(r.rec.errors()).To(BeEmpty(), "a refusal is not a reload error")

		By("a Warning Event on each foreign ConfigMap, from the gateway")
		Eventually(func(g Gomega) {
			evs, err := admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			got := map[string]string{}
			for _, e := range evs.Items {
				if e.Reason == foreign.ReasonConfigMap && e.Regarding.Kind == "ConfigMap" && e.ReportingController == "tollgate-gateway" {
					g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
					g.Expect(e.Action).To(Equal(foreign.Action))
					got[e.Regarding.Name] = e.Note
				}
			}
			g.Expect(got).To(HaveLen(2))
			for _, cm := range theirs {
				g.Expect(got[cm.Name]).To(ContainSubstring("snapshot ConfigMap " + ns + "/" + cm.Name + " refused, gateways do not load it: it is not the controller's"))
			}
		}, timeout, poll).Should(Succeed())

		By("a shard of the controller's that loses its managed-by label is dropped, and the rest stays in force")
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "snap-0-of-1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		delete(cm.Labels, snapshot.LabelManagedBy)
		_, err = admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		// The refusal is counted before the layout left incomplete is
		// reported, so this is after both.
		Eventually(r.rec.errors, timeout, poll).Should(ContainSubstring("no snapshot shards found; version 2 stays in force"))
		Expect(testutil.ToFloat64(refused.WithLabelValues("rules"))).To(Equal(3.0))
		Expect(r.store.Version()).To(Equal(int64(2)))
		Expect(missing(r.store, 11)).To(BeEmpty())
	})

	It("ignores ConfigMaps without the snapshot's label", func() {
		ns := newNamespace(true)
		stray := shardConfigMaps(GinkgoT(), ns, "snap", 1, 9, []snapshot.Rule{rule("tenant-0", "*", 999)})[0]
		stray.Name = "unlabelled"
		stray.Labels = nil
		other := shardConfigMaps(GinkgoT(), ns, "other", 1, 9, []snapshot.Rule{rule("tenant-0", "*", 998)})[0]
		for _, cm := range []*corev1.ConfigMap{stray, other} {
			_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
		}

		r := startSource(ns)
		Eventually(r.src.HasSynced, timeout, poll).Should(BeTrue())
		Expect(r.store.Loaded()).To(BeFalse())
		Expect(r.rec.errors()).To(ContainSubstring("no snapshot shards found"))

		publish(ns, 1, 1, tenants(3))
		Eventually(r.store.Loaded, timeout, poll).Should(BeTrue())
		Expect(missing(r.store, 3)).To(BeEmpty())
		Expect(r.store.Version()).To(Equal(int64(1)))
	})

	It("reports a namespace it may not read", func() {
		ns := newNamespace(false)
		r := startSource(ns)
		Eventually(r.rec.errors, timeout, poll).Should(ContainSubstring("forbidden"))
		Expect(r.src.HasSynced()).To(BeFalse())
		r.stop()
		var err error
		Eventually(r.done, timeout).Should(Receive(&err))
		Expect(err).To(MatchError(ContainSubstring("were not listed")))
		r.done <- err // for the cleanup
	})
})
