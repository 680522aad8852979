package rules

import (
	"bytes"
	"compress/gzip"
	"context"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
