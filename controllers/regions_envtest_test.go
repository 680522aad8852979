package controllers

import (
	"context"
	"strings"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/procs"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
)

// The region rebalancer against the real API server: its status patches,
// the snapshot that follows them, the events, kubectl get -o wide.
var _ = Describe("Region rebalancer", func() {
	ctx := context.Background()

	It("writes the shares in force into status and the snapshot, lowered first, with an event naming the demand", func() {
		f := newFixture()
		rule := f.newRule("split", "shop-a", "orders", 100, 10)
		rule.Spec.Regions = []v1alpha1.RegionShare{{Name: "eu", Percent: 50}, {Name: "us", Percent: 50}}
		Expect(k8s.Create(ctx, rule)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(f.get(g, rule), v1alpha1.ConditionReady).Status).To(BeEquivalentTo("True"))
		}, 20*time.Second).Should(Succeed())

		clients := map[string]redis.UniversalClient{}
		rcs := map[string]*redis.Client{}
		for _, region := range []string{"eu", "us"} {
			srv, err := procs.StartRedis(procs.RedisConfig{Dir: GinkgoT().TempDir()})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(srv.Kill)
			rc := srv.Client()
			DeferCleanup(rc.Close)
			clients[region], rcs[region] = rc, rc
		}
		cs, err := kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
		stop := make(chan struct{})
		broadcaster.StartRecordingToSink(stop)
		DeferCleanup(func() { close(stop); broadcaster.Shutdown() })
		rb := NewRebalancer(RebalancerConfig{
			Store: kubeRules{client: k8s}, Regions: clients, Log: logr.Discard(),
			Recorder: broadcaster.NewRecorder(scheme, "tollgate-region-rebalancer"),
			Options: RegionOptions{Enabled: true, Interval: 400 * time.Millisecond,
				Shares: regionshares.Config{MaxStep: 20, Smoothing: 1, ConfirmWithin: time.Hour}},
		})
		src := f.ns + "/split"
		// The gateways' traffic, all along (a pass reads the interval
		// that ends when it reads each region).
		stopTraffic := make(chan struct{})
		trafficDone := make(chan struct{})
		go func() {
			defer close(trafficDone)
			for {
				select {
				case <-stopTraffic:
					return
				case <-time.After(10 * time.Millisecond):
				}
				_ = asksFor(rcs["eu"], src, "eu", 50, 9)
				_ = asksFor(rcs["us"], src, "us", 50, 1)
			}
		}()
		DeferCleanup(func() { close(stopTraffic); <-trafficDone })
		Eventually(func(g Gomega) {
			time.Sleep(500 * time.Millisecond) // an interval of traffic
			g.Expect(rb.Pass(ctx)).To(Succeed())
			obj := f.get(g, rule)
			g.Expect(obj.Status.RegionSplit).To(Equal("eu=50 us=30"), "us lowered first; status %+v", obj.Status.Regions)
			g.Expect(obj.Status.RegionChange).NotTo(BeNil())
		}, 60*time.Second).Should(Succeed())

		Eventually(func(g Gomega) {
			r := f.snapshot(g).Lookup("shop-a", "orders")
			us, _ := r.Share("us")
			eu, _ := r.Share("eu")
			g.Expect(us).To(BeEquivalentTo(30))
			g.Expect(eu).To(BeEquivalentTo(50), "eu is raised only once us confirmed")
		}, 20*time.Second).Should(Succeed())

		Eventually(func(g Gomega) {
			var evs eventsv1.EventList
			g.Expect(k8s.List(ctx, &evs, client.InNamespace(f.ns))).To(Succeed())
			var notes []string
			for _, e := range evs.Items {
				if e.Reason == "RegionSharesLowered" && e.Regarding.Name == "split" {
					notes = append(notes, e.Note)
				}
			}
			g.Expect(strings.Join(notes, "\n")).To(ContainSubstring("eu=50 us=50 → eu=50 us=30 (demand eu="))
		}, 20*time.Second).Should(Succeed())

		out, errOut, err := kubectl("get", "rlr", "split", "-n", f.ns, "-o", "wide")
		Expect(err).NotTo(HaveOccurred(), errOut)
		Expect(out).To(ContainSubstring("eu=50 us=30"))

		// The status reconciler's own passes keep the rebalancer's fields.
		patched := f.get(Default, rule)
		patched.Spec.Capacity = 120
		Expect(k8s.Update(ctx, patched)).To(Succeed())
		Eventually(func(g Gomega) {
			obj := f.get(g, rule)
			g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
			g.Expect(obj.Status.RegionSplit).To(Equal("eu=50 us=30"))
			g.Expect(f.capacity(g, "shop-a", "orders")).To(BeEquivalentTo(120))
			us, _ := f.snapshot(g).Lookup("shop-a", "orders").Share("us")
			g.Expect(us).To(BeEquivalentTo(30))
		}, 20*time.Second).Should(Succeed())
	})
})
