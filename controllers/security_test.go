package controllers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Hostile or clumsy edits of the snapshot ConfigMaps: the controller must
// neither destroy what is not its own nor wedge on what was changed under it.
var _ = Describe("Snapshot ConfigMaps edited by others", func() {
	ctx := context.Background()
	const wait = 40 * time.Second

	// ready waits until rule is Ready at its current generation and the
	// published snapshot gives tenant/route the capacity want.
	ready := func(f *fixture, rule *v1alpha1.RateLimitRule, tenant, route string, want int64) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			obj := f.get(g, rule)
			g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
			g.Expect(meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
			got := f.snapshot(g).Lookup(tenant, route)
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Capacity).To(Equal(want))
			g.Expect(obj.Status.PublishedVersion).To(BeNumerically("<=", f.snapshot(g).Version()))
		}, wait).Should(Succeed())
	}
	setCapacity := func(f *fixture, rule *v1alpha1.RateLimitRule, capacity int64) {
		GinkgoHelper()
		Eventually(func() error {
			obj := f.get(Default, rule)
			obj.Spec.Capacity = capacity
			return k8s.Update(ctx, obj)
		}, wait).Should(Succeed())
	}
	onlyShard := func(f *fixture) corev1.ConfigMap {
		GinkgoHelper()
		cms := f.shardConfigMaps(Default)
		Expect(cms).To(HaveLen(1))
		return cms[0]
	}

	It("leaves ConfigMaps that carry the snapshot label but are not its own alone, and reports them", func() {
		f := newFixture()
		label := map[string]string{snapshot.LabelSnapshot: f.snapName}
		foreign := []*corev1.ConfigMap{
			// Someone else's object that happens to carry the label.
			{ObjectMeta: metav1.ObjectMeta{Name: f.snapName + "-backup", Namespace: snapshotNS, Labels: label},
				Data: map[string]string{"note": "not tollgate's"}},
			// A shard-like name outside the current layout, but not managed
			// by the controller.
			{ObjectMeta: metav1.ObjectMeta{Name: f.snapName + "-3-of-4", Namespace: snapshotNS, Labels: label}},
		}
		for _, cm := range foreign {
			Expect(k8s.Create(ctx, cm)).To(Succeed())
		}
		rule := f.newRule("r", "shop-f", "*", 7, 1)
		Expect(k8s.Create(ctx, rule)).To(Succeed())
		Eventually(func(g Gomega) {
			obj := f.get(g, rule)
			g.Expect(meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}, wait).Should(Succeed())
		setCapacity(f, rule, 8) // another pass with a write

		Eventually(func(g Gomega) {
			var evs eventsv1.EventList
			g.Expect(k8s.List(ctx, &evs, client.InNamespace(snapshotNS))).To(Succeed())
			reported := map[string]bool{}
			for _, e := range evs.Items {
				if e.Reason == "ForeignConfigMap" && e.Regarding.Kind == "ConfigMap" {
					reported[e.Regarding.Name] = true
				}
			}
			g.Expect(reported).To(HaveKey(foreign[0].Name))
			g.Expect(reported).To(HaveKey(foreign[1].Name))
		}, wait).Should(Succeed())
		Expect(testutil.ToFloat64(foreignConfigMaps)).To(BeEquivalentTo(2))
		Consistently(func(g Gomega) {
			for _, cm := range foreign {
				var got corev1.ConfigMap
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), &got)).To(Succeed(), cm.Name)
				g.Expect(got.Data).To(Equal(cm.Data))
				g.Expect(got.BinaryData).To(BeEmpty())
			}
		}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
	})

	It("rewrites a shard whose snapshot label was removed by hand", func() {
		f := newFixture()
		rule := f.newRule("r", "shop-l", "*", 5, 1)
		Expect(k8s.Create(ctx, rule)).To(Succeed())
		ready(f, rule, "shop-l", "x", 5)

		cm := onlyShard(f)
		delete(cm.Labels, snapshot.LabelSnapshot)
		Expect(k8s.Update(ctx, &cm)).To(Succeed())
		setCapacity(f, rule, 6)

		ready(f, rule, "shop-l", "x", 6)
		Expect(onlyShard(f).Name).To(Equal(cm.Name))
	})

	It("never overwrites a ConfigMap of a shard's name that is not its own, and says so in the rules' status", func() {
		f := newFixture()
		squatter := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: snapshot.ConfigMapName(f.snapName, 0, 1), Namespace: snapshotNS},
			Data:       map[string]string{"owner": "someone else"},
		}
		Expect(k8s.Create(ctx, squatter)).To(Succeed())
		rule := f.newRule("r", "shop-s", "*", 5, 1)
		Expect(k8s.Create(ctx, rule)).To(Succeed())

		Eventually(func(g Gomega) {
			obj := f.get(g, rule)
			g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
			g.Expect(meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionAccepted)).To(BeTrue())
			for _, t := range []string{v1alpha1.ConditionProgrammed, v1alpha1.ConditionReady} {
				c := condition(obj, t)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse), t)
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPublishFailed), t)
				g.Expect(c.Message).To(ContainSubstring("is in the way"), t)
			}
		}, wait).Should(Succeed())
		Expect(testutil.ToFloat64(publishFailing)).To(BeEquivalentTo(1))
		var got corev1.ConfigMap
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(squatter), &got)).To(Succeed())
		Expect(got.Data).To(Equal(squatter.Data))

		By("removing it")
		Expect(k8s.Delete(ctx, squatter)).To(Succeed())
		ready(f, rule, "shop-s", "x", 5)
		Expect(testutil.ToFloat64(publishFailing)).To(BeEquivalentTo(0))
	})

	It("does not overflow on a version annotation raised near MaxInt64", func() {
		f := newFixture()
		rule := f.newRule("r", "shop-v", "*", 5, 1)
		Expect(k8s.Create(ctx, rule)).To(Succeed())
		ready(f, rule, "shop-v", "x", 5)

		cm := onlyShard(f)
		cm.Annotations[snapshot.AnnotationVersion] = strconv.FormatInt(1<<63-2, 10)
		Expect(k8s.Update(ctx, &cm)).To(Succeed())
		setCapacity(f, rule, 9)

		// The snapshot stays readable by gateways (f.snapshot decodes it as
		// they do) and the rule's status names a version it holds.
		ready(f, rule, "shop-v", "x", 9)
		Eventually(func(g Gomega) {
			v := f.snapshot(g).Version()
			g.Expect(v).To(BeNumerically(">", 0))
			g.Expect(v).To(BeNumerically("<=", snapshot.MaxVersion))
			g.Expect(f.get(g, rule).Status.PublishedVersion).To(Equal(v))
		}, wait).Should(Succeed())
	})

	It("reports exhausted versions in the status instead of staying Ready", func() {
		f := newFixture()
		rule := f.newRule("r", "shop-x", "*", 5, 1)
		Expect(k8s.Create(ctx, rule)).To(Succeed())
		ready(f, rule, "shop-x", "x", 5)

		// A well-formed shard at the highest version, as someone who can
		// write ConfigMaps could craft it.
		cur := onlyShard(f)
		sh, err := snapshot.FromConfigMap(&cur)
		Expect(err).NotTo(HaveOccurred())
		crafted, err := snapshot.NewShard(0, 1, snapshot.MaxVersion, sh.Rules).ConfigMap(snapshotNS, f.snapName)
		Expect(err).NotTo(HaveOccurred())
		crafted.ResourceVersion = cur.ResourceVersion
		Expect(k8s.Update(ctx, crafted)).To(Succeed())
		setCapacity(f, rule, 6)

		Eventually(func(g Gomega) {
			obj := f.get(g, rule)
			g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
			c := condition(obj, v1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPublishFailed))
			g.Expect(c.Message).To(ContainSubstring("version exhausted"))
		}, wait).Should(Succeed())
		Expect(testutil.ToFloat64(publishFailing)).To(BeEquivalentTo(1))
	})
})

var _ = Describe("The namespace policy", func() {
	ctx := context.Background()
	const wait = 40 * time.Second

	setAnnotations := func(ns string, a map[string]string) {
		GinkgoHelper()
		Eventually(func() error {
			var obj corev1.Namespace
			if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
				return err
			}
			obj.Annotations = a
			return k8s.Update(ctx, &obj)
		}, wait).Should(Succeed())
	}
	refused := func(f *fixture, rule *v1alpha1.RateLimitRule, want string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			obj := f.get(g, rule)
			g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
			c := condition(obj, v1alpha1.ConditionAccepted)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonTenantNotAllowed))
			g.Expect(c.Message).To(ContainSubstring(want))
			g.Expect(meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionReady)).To(BeFalse())
		}, wait).Should(Succeed())
	}
	readyRule := func(f *fixture, rule *v1alpha1.RateLimitRule) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			obj := f.get(g, rule)
			g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
			g.Expect(meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}, wait).Should(Succeed())
	}

	It("accepts rules only for the tenants a namespace's annotations allow, and follows changes of them", func() {
		f := newFixture()
		// The second namespace may declare shop-a only.
		setAnnotations(f.ns2, map[string]string{v1alpha1.AnnotationTenants: "shop-a, shop-z"})

		// Created first, so it would win a conflict if it were allowed.
		intruder := f.newRule("intruder", "shop-b", "pay", 1000, 1000)
		intruder.Namespace = f.ns2
		Expect(k8s.Create(ctx, intruder)).To(Succeed())
		everyone := f.newRule("everyone", "*", "*", 1000, 1000)
		everyone.Namespace = f.ns2
		Expect(k8s.Create(ctx, everyone)).To(Succeed())
		own := f.newRule("own", "shop-a", "pay", 3, 1)
		own.Namespace = f.ns2
		Expect(k8s.Create(ctx, own)).To(Succeed())
		time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second resolution
		legit := f.newRule("legit", "shop-b", "pay", 5, 1)
		Expect(k8s.Create(ctx, legit)).To(Succeed())

		refused(f, intruder, `namespace `+f.ns2+` may not declare rules for tenant "shop-b"`)
		refused(f, everyone, `may not declare rules for every tenant`)
		readyRule(f, own)
		readyRule(f, legit)
		Eventually(func(g Gomega) {
			set := f.snapshot(g)
			g.Expect(capacityIn(g, set, "shop-b", "pay")).To(BeEquivalentTo(5), "the refused older rule takes no part")
			g.Expect(capacityIn(g, set, "shop-a", "pay")).To(BeEquivalentTo(3))
			g.Expect(set.Lookup("shop-q", "other")).To(BeNil(), "no wildcard rule is published")
		}, wait).Should(Succeed())
		Expect(testutil.ToFloat64(rulesByState.WithLabelValues("not_allowed"))).To(BeEquivalentTo(2))

		By("a cluster administrator allowing the wildcard tenant")
		setAnnotations(f.ns2, map[string]string{v1alpha1.AnnotationTenants: "shop-a", v1alpha1.AnnotationAllowWildcardTenant: "true"})
		readyRule(f, everyone)
		refused(f, intruder, `tenant "shop-b"`)
		Eventually(func(g Gomega) {
			g.Expect(f.snapshot(g).Lookup("shop-q", "other")).NotTo(BeNil())
		}, wait).Should(Succeed())

		By("and withdrawing shop-a")
		setAnnotations(f.ns2, map[string]string{v1alpha1.AnnotationAllowWildcardTenant: "true"})
		refused(f, own, `tenant "shop-a"`)
		Eventually(func(g Gomega) {
			g.Expect(f.capacity(g, "shop-a", "pay")).To(BeEquivalentTo(1000), "the wildcard rule applies")
		}, wait).Should(Succeed())
	})
})

// Labelled norace: compiling 120,000 rules twice takes ~70 s under the race
// detector (the longest spec of the package, in the test command's longest
// package) and ~10 s without it; hack/test.sh runs it in its phase without
// the race detector.
var _ = Describe("One tenant with very many rules", Label("norace"), func() {
	It("does not stop publishing for every other tenant", func() {
		if raceEnabled {
			Skip("runs without the race detector: go test ./controllers -run TestControllers -args -ginkgo.label-filter=norace")
		}
		ctx := context.Background()
		// Format 1 placed every rule of a tenant in one shard, which held
		// about 97,000 rules like these within its 512 KiB bound (fewer with
		// longer names): past that, no shard count fitted and nothing was
		// published for anyone.
		const n = 120_000
		base := metav1.Now()
		mk := func(i int, ns, name, tenant, route string, capacity int64) v1alpha1.RateLimitRule {
			return v1alpha1.RateLimitRule{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1,
					CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second))},
				Spec: v1alpha1.RateLimitRuleSpec{Tenant: tenant, Route: route, Capacity: capacity, RefillPerSecond: ptr.To[int64](1)},
			}
		}
		items := make([]v1alpha1.RateLimitRule, 0, n+2)
		for i := range n {
			items = append(items, mk(i, "team-a", fmt.Sprintf("rule-%06d", i), "*", fmt.Sprintf("route-%06d", i), 100))
		}
		items = append(items, mk(n, "shop", "a", "shop-a", "create-order", 7), mk(n+1, "shop", "b", "shop-b", "*", 9))

		r := &SnapshotReconciler{
			client: k8s, apiReader: k8s, recorder: &events.FakeRecorder{},
			// Format 2, which the default (1, for gateways of the previous
			// version) is not: see "Snapshot format" for what 1 does here.
			opts:  Options{SnapshotNamespace: snapshotNS, SnapshotName: "one-big-tenant", StatusWorkers: 1, SnapshotFormat: snapshot.Format},
			state: newPublishedState(), statusQ: newStatusQueue(), written: map[string]writtenShard{},
		}
		Expect(r.sync(ctx, items, &tenantPolicy{open: true}, nil)).To(Succeed())

		By("in format 1 (the default) the error says which flag lifts the limit")
		r1 := &SnapshotReconciler{
			client: k8s, apiReader: k8s, recorder: &events.FakeRecorder{},
			opts:  Options{SnapshotNamespace: snapshotNS, SnapshotName: "one-big-tenant-format1", StatusWorkers: 1},
			state: newPublishedState(), statusQ: newStatusQueue(), written: map[string]writtenShard{},
		}
		Expect(r1.sync(ctx, items, &tenantPolicy{open: true}, nil)).To(MatchError(ContainSubstring("--snapshot-format=2")))
		st, ok := r1.state.get("uid-a")
		Expect(ok).To(BeTrue())
		Expect(st.PublishError).To(ContainSubstring("--snapshot-format=2"), "the rules' status says why")

		var list corev1.ConfigMapList
		Expect(k8s.List(ctx, &list, client.InNamespace(snapshotNS), client.MatchingLabels{snapshot.LabelSnapshot: "one-big-tenant"})).To(Succeed())
		var shards []*snapshot.Shard
		for i := range list.Items {
			Expect(len(list.Items[i].BinaryData[snapshot.DataKey])).To(BeNumerically("<=", snapshot.MaxShardBytes))
			sh, err := snapshot.FromConfigMap(&list.Items[i])
			Expect(err).NotTo(HaveOccurred())
			shards = append(shards, sh)
		}
		set, err := snapshot.Select(shards)
		Expect(err).NotTo(HaveOccurred())
		Expect(set.Len()).To(Equal(n + 2))
		Expect(set.Lookup("shop-a", "create-order").Capacity).To(BeEquivalentTo(7))
		Expect(set.Lookup("shop-b", "route-000001").Capacity).To(BeEquivalentTo(9))
		Expect(set.Lookup("shop-c", "route-119999").Capacity).To(BeEquivalentTo(100))
		Expect(set.Lookup("shop-c", "elsewhere")).To(BeNil())
		for _, uid := range []types.UID{"uid-a", "uid-b", "uid-rule-000000"} {
			st, ok := r.state.get(uid)
			Expect(ok).To(BeTrue())
			Expect(st.Accepted).To(BeTrue())
			Expect(st.PublishedVersion).To(BeNumerically(">", 0), string(uid))
		}
	})
})
