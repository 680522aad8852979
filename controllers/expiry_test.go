package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Temporary rules (spec.expiresAt) leave the snapshot at their expiry
// without anyone deleting or editing them.
var _ = Describe("RateLimitRule expiry", func() {
	ctx := context.Background()

	It("takes a boost out of the snapshot at its expiry, with no event, and says Expired in kubectl get", func() {
		f := newFixture()
		Expect(k8s.Create(ctx, f.newRule("default", "*", "*", 20, 10))).To(Succeed())
		boost := f.newRule("boost", "shop-a", "*", 500, 100)
		// A few seconds: long enough to be seen in force, short enough that
		// only the controller's own requeue can end it within the spec.
		expires := metav1.NewTime(time.Now().Add(5 * time.Second).Truncate(time.Second))
		boost.Spec.ExpiresAt = &expires
		Expect(k8s.Create(ctx, boost)).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(f.capacity(g, "shop-a", "create-order")).To(BeEquivalentTo(500), "the boost beats the * default")
			g.Expect(condition(f.get(g, boost), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		}, 20*time.Second).Should(Succeed())
		Expect(time.Now()).To(BeTemporally("<", expires.Time), "the boost was seen in force before its expiry")

		Eventually(func(g Gomega) {
			g.Expect(f.capacity(g, "shop-a", "create-order")).To(BeEquivalentTo(20), "the default is back")
			obj := f.get(g, boost)
			for _, t := range []string{v1alpha1.ConditionAccepted, v1alpha1.ConditionReady} {
				c := condition(obj, t)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse), t)
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonExpired), t)
			}
			g.Expect(condition(obj, v1alpha1.ConditionAccepted).Message).To(ContainSubstring("spec.expiresAt " + expires.UTC().Format(time.RFC3339) + " has passed"))
			g.Expect(obj.Status.Rate).To(Equal("100/s"))
		}, 20*time.Second).Should(Succeed())
		Expect(time.Now()).To(BeTemporally(">=", expires.Time))
		Expect(testutil.ToFloat64(rulesByState.WithLabelValues("expired"))).To(BeNumerically(">=", 1))

		out, errOut, err := kubectl("get", "rlr", "-n", f.ns)
		Expect(err).NotTo(HaveOccurred(), errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "TENANT", "ROUTE", "TARGET", "CAPACITY", "RATE", "READY", "REASON", "EXPIRES", "AGE"}))
		Expect(out).To(MatchRegexp(`boost\s+shop-a\s+\*\s+500\s+100/s\s+False\s+Expired\s+` + expires.UTC().Format(time.RFC3339)))
		Expect(out).To(MatchRegexp(`default\s+\*\s+\*\s+20\s+10/s\s+True\s+Ready\s+\d`), "a permanent rule has an empty EXPIRES column")

		By("moving the expiry to a later time: the boost is back")
		obj := f.get(Default, boost)
		obj.Spec.ExpiresAt = &metav1.Time{Time: time.Now().Add(time.Hour)}
		Expect(k8s.Update(ctx, obj)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(f.capacity(g, "shop-a", "create-order")).To(BeEquivalentTo(500))
			g.Expect(condition(f.get(g, boost), v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonReady))
		}, 20*time.Second).Should(Succeed())
	})

	It("refuses a rule whose expiry was already past at its creation (ExpiryInPast), with a Warning", func() {
		f := newFixture()
		rule := f.newRule("typo", "shop-b", "create-order", 50, 5)
		rule.Spec.ExpiresAt = &metav1.Time{Time: time.Now().Add(-24 * time.Hour)}
		Expect(k8s.Create(ctx, rule)).To(Succeed(), "the API server cannot compare with the present: the controller refuses it")
		Eventually(func(g Gomega) {
			obj := f.get(g, rule)
			c := condition(obj, v1alpha1.ConditionAccepted)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonExpiryInPast))
			g.Expect(c.Message).To(ContainSubstring("was already past when the rule was created"))
			g.Expect(condition(obj, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonExpiryInPast))
			g.Expect(f.snapshot(g).Lookup("shop-b", "create-order")).To(BeNil())
		}, 20*time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(warningEvents(g, f.ns, "typo")).To(ContainElement(v1alpha1.ReasonExpiryInPast))
		}, 20*time.Second).Should(Succeed())
	})

	It("asks for a pass at the earliest expiry on its clock, and drops each rule when the clock reaches it", func() {
		t0 := time.Now().Truncate(time.Second)
		var now atomic.Int64
		now.Store(t0.UnixNano())
		r := &SnapshotReconciler{
			client: k8s, apiReader: k8s, recorder: &events.FakeRecorder{},
			opts: Options{SnapshotNamespace: snapshotNS, SnapshotName: fmt.Sprintf("expiry-%d", specSeq.Add(1)), StatusWorkers: 1,
				Clock: func() time.Time { return time.Unix(0, now.Load()) }},
			state: newPublishedState(), statusQ: newStatusQueue(), written: map[string]writtenShard{},
		}
		rule := func(name, tenant string, capacity int64, expires time.Duration) v1alpha1.RateLimitRule {
			o := v1alpha1.RateLimitRule{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "expiry", UID: types.UID("uid-" + name), Generation: 1,
					CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute))},
				Spec: v1alpha1.RateLimitRuleSpec{Tenant: tenant, Route: "*", Capacity: capacity, RefillPerSecond: ptr.To[int64](1)},
			}
			if expires != 0 {
				o.Spec.ExpiresAt = &metav1.Time{Time: t0.Add(expires)}
			}
			return o
		}
		items := []v1alpha1.RateLimitRule{rule("default", "*", 20, 0), rule("day", "shop-a", 500, 24*time.Hour), rule("hour", "shop-b", 300, time.Hour)}
		pass := func() *snapshot.Set {
			Expect(r.sync(ctx, items, &tenantPolicy{open: true}, nil)).To(Succeed())
			return readSnapshot(r.opts.SnapshotName)
		}
		set := pass()
		Expect(set.Lookup("shop-a", "x").Capacity).To(BeEquivalentTo(500))
		Expect(set.Lookup("shop-b", "x").Capacity).To(BeEquivalentTo(300))
		Expect(r.untilExpiry()).To(Equal(time.Hour), "the earliest expiry")

		now.Store(t0.Add(time.Hour).UnixNano())
		set = pass()
		Expect(set.Lookup("shop-b", "x").Capacity).To(BeEquivalentTo(20), "shop-b's rule expired: the default decides")
		Expect(set.Lookup("shop-a", "x").Capacity).To(BeEquivalentTo(500))
		Expect(r.untilExpiry()).To(Equal(23 * time.Hour))
		st, _ := r.state.get("uid-hour")
		Expect(st.Reason).To(Equal(v1alpha1.ReasonExpired))

		now.Store(t0.Add(25 * time.Hour).UnixNano())
		set = pass()
		Expect(set.Lookup("shop-a", "x").Capacity).To(BeEquivalentTo(20))
		Expect(r.untilExpiry()).To(BeZero(), "no expiry left: no requeue")
	})
})

// readSnapshot decodes the snapshot named name from the API server.
func readSnapshot(name string) *snapshot.Set {
	f := &fixture{snapName: name}
	return f.snapshot(Default)
}

// warningEvents lists the reasons of the Warning events about the rule
// name in ns.
func warningEvents(g Gomega, ns, name string) []string {
	var evs eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &evs, client.InNamespace(ns))).To(Succeed())
	var reasons []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Type == "Warning" {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}
