package membership

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("List", func() {
	It("lists the live members with the admin port their Leases publish, and drops the dead", func() {
		ns := newNamespace(k8s)
		port := func(p string) func(*Options) {
			return func(o *Options) { o.Annotations = map[string]string{AnnotationAdminPort: p} }
		}
		startMember(cfg, ns, "gw-b", port("9091"))
		startMember(cfg, ns, "gw-a", port("9090"))
		startMember(cfg, ns, "gw-c", nil)
		other := startMember(cfg, ns, "gw-other", func(o *Options) { o.Group = "another-group" })
		ghostLease(ns, "gw-dead", dnsLabel("gw"), time.Now().Add(-time.Minute))
		Eventually(func(g Gomega) {
			ms, err := List(context.Background(), k8s, ns, "gw", time.Now())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ms).To(HaveLen(3))
			g.Expect([]string{ms[0].Pod, ms[1].Pod, ms[2].Pod}).To(Equal([]string{"gw-a", "gw-b", "gw-c"}))
			g.Expect([]int{ms[0].AdminPort, ms[1].AdminPort, ms[2].AdminPort}).To(Equal([]int{9090, 9091, 0}))
		}).Should(Succeed())
		ms, err := List(context.Background(), k8s, ns, "another-group", time.Now())
		Expect(err).NotTo(HaveOccurred())
		Expect(ms).To(HaveLen(1))
		groups, err := Groups(context.Background(), k8s, ns, time.Now())
		Expect(err).NotTo(HaveOccurred())
		Expect(groups).To(Equal([]string{"another-group", "gw"}), "the dead Lease's group counts only through live ones")
		other.stop()
		Eventually(func() ([]Member, error) { return List(context.Background(), k8s, ns, "another-group", time.Now()) }).Should(BeEmpty())
	})
})
