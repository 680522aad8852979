package controllers

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

var _ = Describe("A RateLimitRule with a calendar quota", func() {
	ctx := context.Background()

	It("publishes the quota, and refuses a time zone the IANA database does not know, naming spec.quota.timeZone", func() {
		f := newFixture()
		good := f.newRule("monthly", "shop-q", "create-order", 200, 100)
		good.Spec.Quota = &v1alpha1.Quota{Limit: 1_000_000, Period: v1alpha1.QuotaMonth, TimeZone: "Europe/Paris"}
		Expect(k8s.Create(ctx, good)).To(Succeed())
		// The schema's pattern accepts the shape of this name; only the
		// controller's compile step knows there is no such zone.
		bad := f.newRule("atlantis", "shop-q", "list-orders", 200, 100)
		bad.Spec.Quota = &v1alpha1.Quota{Limit: 10, Period: v1alpha1.QuotaDay, TimeZone: "Europe/Atlantis"}
		Expect(k8s.Create(ctx, bad)).To(Succeed())

		Eventually(func(g Gomega) {
			got := f.snapshot(g).Lookup("shop-q", "create-order")
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.QuotaLimit).To(BeEquivalentTo(1_000_000))
			g.Expect(got.QuotaPeriod).To(Equal(snapshot.QuotaMonth))
			g.Expect(got.QuotaZone).To(Equal("Europe/Paris"))
			g.Expect(f.snapshot(g).Lookup("shop-q", "list-orders")).To(BeNil())
			obj := f.get(g, bad)
			c := condition(obj, v1alpha1.ConditionAccepted)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(snapshot.ReasonInvalid))
			g.Expect(c.Message).To(ContainSubstring("spec.quota.timeZone"))
			g.Expect(c.Message).To(ContainSubstring("Europe/Atlantis"))
		}, 20*time.Second).Should(Succeed())
	})
})
