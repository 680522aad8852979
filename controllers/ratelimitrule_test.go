package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// condition is obj's condition of type t, an empty one (Status "") while
// it has none: a spec polling it with Eventually retries instead of
// panicking on a status the controller has not written yet.
func condition(obj *v1alpha1.RateLimitRule, t string) *metav1.Condition {
	if c := meta.FindStatusCondition(obj.Status.Conditions, t); c != nil {
		return c
	}
	return &metav1.Condition{Type: t}
}

var _ = Describe("RateLimitRule snapshot", func() {
	ctx := context.Background()

	It("publishes a new rule, republishes it on update and removes it on delete", func() {
		f := newFixture()
		rule := f.newRule("orders", "shop-a", "create-order", 200, 100)
		Expect(k8s.Create(ctx, rule)).To(Succeed())

		var firstVersion int64
		Eventually(func(g Gomega) {
			got := f.snapshot(g).Lookup("shop-a", "create-order")
			g.Expect(got).NotTo(BeNil())
			g.Expect(*got).To(Equal(snapshot.Rule{Tenant: "shop-a", Route: "create-order", Capacity: 200,
				RefillTokens: 100, RefillPeriodMs: 1000, Source: f.ns + "/orders"}))
			obj := f.get(g, rule)
			g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
			g.Expect(obj.Status.Rate).To(Equal("100/s"))
			for _, t := range []string{v1alpha1.ConditionAccepted, v1alpha1.ConditionProgrammed, v1alpha1.ConditionReady} {
				g.Expect(condition(obj, t).Status).NotTo(BeEmpty())
				g.Expect(condition(obj, t).Status).To(Equal(metav1.ConditionTrue), t)
			}
			g.Expect(obj.Status.PublishedVersion).To(Equal(f.snapshot(g).Version()))
			g.Expect(condition(obj, v1alpha1.ConditionProgrammed).Message).To(ContainSubstring(
				fmt.Sprintf("version %d", obj.Status.PublishedVersion)))
			firstVersion = obj.Status.PublishedVersion
		}, 20*time.Second).Should(Succeed())

		By("changing the rate to 10 per minute")
		obj := f.get(Default, rule)
		obj.Spec.Capacity = 5
		obj.Spec.RefillPerSecond = nil
		obj.Spec.Refill = &v1alpha1.Refill{Tokens: 10, Period: metav1.Duration{Duration: time.Minute}}
		Expect(k8s.Update(ctx, obj)).To(Succeed())
		Eventually(func(g Gomega) {
			got := f.snapshot(g).Lookup("shop-a", "create-order")
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Capacity).To(BeEquivalentTo(5))
			g.Expect(got.RefillTokens).To(BeEquivalentTo(10))
			g.Expect(got.RefillPeriodMs).To(BeEquivalentTo(60_000))
			obj := f.get(g, rule)
			g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
			g.Expect(obj.Status.Rate).To(Equal("10/1m"))
			g.Expect(obj.Status.PublishedVersion).To(BeNumerically(">", firstVersion))
		}, 20*time.Second).Should(Succeed())

		By("deleting it")
		Expect(k8s.Delete(ctx, obj)).To(Succeed())
		Eventually(func(g Gomega) {
			set := f.snapshot(g)
			g.Expect(set.Lookup("shop-a", "create-order")).To(BeNil())
			g.Expect(set.Len()).To(Equal(0))
		}, 20*time.Second).Should(Succeed())
	})

	It("lets the oldest of two rules for the same tenant and route win, and hands over when it is deleted", func() {
		f := newFixture()
		winner := f.newRule("first", "shop-b", "list", 10, 1)
		Expect(k8s.Create(ctx, winner)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(meta.IsStatusConditionTrue(f.get(g, winner).Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}, 20*time.Second).Should(Succeed())

		// Creation timestamps have one-second resolution: make the second rule
		// unambiguously younger.
		time.Sleep(1100 * time.Millisecond)
		loser := f.newRule("second", "shop-b", "list", 99, 9)
		loser.Namespace = f.ns2
		Expect(k8s.Create(ctx, loser)).To(Succeed())

		Eventually(func(g Gomega) {
			obj := f.get(g, loser)
			acc := condition(obj, v1alpha1.ConditionAccepted)
			g.Expect(acc).NotTo(BeNil())
			g.Expect(acc.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(acc.Reason).To(Equal(v1alpha1.ReasonConflict))
			// The winner is in another namespace: its name is not told.
			g.Expect(acc.Message).To(ContainSubstring("an older RateLimitRule in another namespace"))
			g.Expect(acc.Message).NotTo(ContainSubstring("first"))
			g.Expect(acc.Message).NotTo(ContainSubstring(f.ns + "/"))
			g.Expect(condition(obj, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(condition(obj, v1alpha1.ConditionProgrammed).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(f.capacity(g, "shop-b", "list")).To(BeEquivalentTo(10))
		}, 20*time.Second).Should(Succeed())

		By("recording a Conflict event on the loser")
		Eventually(func(g Gomega) {
			var evs eventsv1.EventList
			g.Expect(k8s.List(ctx, &evs, client.InNamespace(f.ns2))).To(Succeed())
			var reasons []string
			for _, e := range evs.Items {
				if e.Regarding.Name == "second" {
					reasons = append(reasons, e.Reason)
				}
			}
			g.Expect(reasons).To(ContainElement(v1alpha1.ReasonConflict))
		}, 20*time.Second).Should(Succeed())

		By("deleting the winner")
		Expect(k8s.Delete(ctx, winner)).To(Succeed())
		Eventually(func(g Gomega) {
			obj := f.get(g, loser)
			g.Expect(meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionAccepted)).To(BeTrue())
			g.Expect(meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
			got := f.snapshot(g).Lookup("shop-b", "list")
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Capacity).To(BeEquivalentTo(99))
			g.Expect(got.Source).To(Equal(f.ns2 + "/second"))
		}, 20*time.Second).Should(Succeed())
	})

	It("repairs a shard ConfigMap that was deleted or corrupted by hand", func() {
		f := newFixture()
		Expect(k8s.Create(ctx, f.newRule("r", "shop-c", "*", 3, 1))).To(Succeed())
		Eventually(func(g Gomega) { g.Expect(f.snapshot(g).Lookup("shop-c", "x")).NotTo(BeNil()) }, 20*time.Second).Should(Succeed())

		cms := f.shardConfigMaps(Default)
		Expect(cms).To(HaveLen(1))
		cm := cms[0]
		cm.BinaryData[snapshot.DataKey] = []byte("garbage")
		Expect(k8s.Update(ctx, &cm)).To(Succeed())
		Eventually(func(g Gomega) { g.Expect(f.snapshot(g).Lookup("shop-c", "x")).NotTo(BeNil()) }, 20*time.Second).Should(Succeed())

		Expect(k8s.Delete(ctx, &cm)).To(Succeed())
		Eventually(func(g Gomega) { g.Expect(f.snapshot(g).Lookup("shop-c", "x")).NotTo(BeNil()) }, 20*time.Second).Should(Succeed())
	})

	It("spreads 6,000 rules over shards under the size bound and makes no writes after a restart", func() {
		f := newFixture()
		// Enough for two shards; 20,000 and 100,000 rules are measured by
		// BenchmarkPublish against the same API server, since creating them
		// one by one through it takes minutes.
		const n = 6_000
		By("creating the rules")
		createRules(f, n)
		By("waiting for the snapshot")

		Eventually(func(g Gomega) {
			set := f.snapshot(g)
			g.Expect(set.Len()).To(Equal(n))
		}, 3*time.Minute, time.Second).Should(Succeed())

		cms := f.shardConfigMaps(Default)
		Expect(len(cms)).To(Equal(snapshot.ShardCount(n, 0)))
		Expect(len(cms)).To(BeNumerically(">", 1))
		for _, cm := range cms {
			Expect(len(cm.BinaryData[snapshot.DataKey])).To(BeNumerically("<", snapshot.MaxShardBytes), cm.Name)
			Expect(cm.Size()).To(BeNumerically("<", 1<<20), cm.Name)
		}
		By("waiting for every rule to be Ready")
		Eventually(func(g Gomega) {
			g.Expect(readyCount(g, f)).To(Equal(n))
		}, 5*time.Minute, 2*time.Second).Should(Succeed())

		By("restarting the controller")
		before := resourceVersions(f)
		passes := histogramCount()
		writes := testutil.ToFloat64(configMapWrites.WithLabelValues("update")) + testutil.ToFloat64(configMapWrites.WithLabelValues("create"))
		patches := testutil.ToFloat64(statusPatches)
		f.stopManager()
		f.start()
		// Wait for the new manager's first pass, then check nothing was written.
		Eventually(func() int { return histogramCount() }, time.Minute).Should(BeNumerically(">", passes))
		Consistently(func(g Gomega) {
			g.Expect(resourceVersions(f)).To(Equal(before))
		}, 5*time.Second, time.Second).Should(Succeed())
		Expect(testutil.ToFloat64(configMapWrites.WithLabelValues("update")) + testutil.ToFloat64(configMapWrites.WithLabelValues("create"))).To(Equal(writes))
		Expect(testutil.ToFloat64(statusPatches)).To(Equal(patches))
	})
})

// histogramCount is the number of snapshot passes observed by any manager.
func histogramCount() int {
	var m dto.Metric
	Expect(publishDuration.Write(&m)).To(Succeed())
	return int(m.GetHistogram().GetSampleCount())
}

// createRules creates n rules with distinct tenants, with a few writers.
func createRules(f *fixture, n int) {
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				r := f.newRule(fmt.Sprintf("r-%d", i), fmt.Sprintf("tenant-%d", i), "route", int64(i%1000+1), 10)
				if err := k8s.Create(context.Background(), r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		Expect(err).NotTo(HaveOccurred())
	}
}

func readyCount(g Gomega, f *fixture) int {
	var list v1alpha1.RateLimitRuleList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(f.ns))).To(Succeed())
	ready := 0
	for i := range list.Items {
		if meta.IsStatusConditionTrue(list.Items[i].Status.Conditions, v1alpha1.ConditionReady) {
			ready++
		}
	}
	return ready
}

// resourceVersions maps every shard ConfigMap and rule of f to its
// resourceVersion, to detect writes.
func resourceVersions(f *fixture) map[string]string {
	out := map[string]string{}
	for _, cm := range f.shardConfigMaps(Default) {
		out["cm/"+cm.Name] = cm.ResourceVersion
	}
	var list v1alpha1.RateLimitRuleList
	Expect(k8s.List(context.Background(), &list, client.InNamespace(f.ns))).To(Succeed())
	for _, r := range list.Items {
		out["rule/"+r.Name] = r.ResourceVersion
	}
	return out
}

var _ = Describe("An empty cluster", func() {
	It("still gets a (empty) snapshot, so gateways can become ready", func() {
		f := newFixture()
		Eventually(func(g Gomega) {
			g.Expect(f.snapshot(g).Len()).To(Equal(0))
		}, 20*time.Second).Should(Succeed())
	})
})
