package controllers

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
)

// kubectl runs the real kubectl (the same version as the API server) against
// the suite's API server and returns stdout, stderr and the error.
func kubectl(args ...string) (string, string, error) {
	bin, err := envtestutil.Kubectl()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := envtestutil.WriteKubeconfig(testEnv, GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

var _ = Describe("kubectl", func() {
	It("applies the samples and shows them Ready in kubectl get rlr", func() {
		f := newFixture()
		samples := filepath.Join(envtestutil.RepoRoot(), "config", "samples")
		out, errOut, err := kubectl("apply", "-n", f.ns, "-f", samples)
		Expect(err).NotTo(HaveOccurred(), errOut)
		Expect(out).To(ContainSubstring("ratelimitrule.ratelimit.tollgate.dev/shop-a-create-order created"))

		Eventually(func(g Gomega) {
			out, errOut, err := kubectl("get", "rlr", "-n", f.ns)
			g.Expect(err).NotTo(HaveOccurred(), errOut)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "TENANT", "ROUTE", "TARGET", "CAPACITY", "RATE", "READY", "REASON", "EXPIRES", "AGE"}))
			g.Expect(lines).To(HaveLen(13))
			g.Expect(out).To(MatchRegexp(`shop-a-create-order\s+shop-a\s+create-order\s+200\s+100/s\s+True\s+Ready`))
			g.Expect(out).To(MatchRegexp(`reports-per-minute\s+\*\s+reports\s+3\s+10/1m\s+True`))
			g.Expect(out).To(MatchRegexp(`shop-b-hourly\s+shop-b\s+\*\s+50\s+1000/1h\s+True`))
			g.Expect(out).To(MatchRegexp(`default\s+\*\s+\*\s+20\s+10/s\s+True`))
			g.Expect(out).To(MatchRegexp(`shop-c-list-orders-concurrency\s+shop-c\s+list-orders\s+1000\s+500/s\s+True`))
			g.Expect(out).To(MatchRegexp(`shop-c-export-cost\s+shop-c\s+export\s+1000\s+100/s\s+True`))
			g.Expect(out).To(MatchRegexp(`chat-completions-tokens\s+\*\s+chat-completions\s+100000\s+100000/1m\s+True`))
			g.Expect(out).To(MatchRegexp(`partner-x-monthly\s+partner-x\s+create-order\s+100\s+50/s\s+True`))
			g.Expect(out).To(MatchRegexp(`login-per-address\s+\*\s+login\s+5\s+5/1m\s+True`))
			g.Expect(out).To(MatchRegexp(`tenant-budget\s+\*\s+\*\s+1000\s+1000/s\s+True`))
			g.Expect(out).To(MatchRegexp(`export-shared\s+\*\s+export\s+50\s+50/s\s+True`))
			g.Expect(out).To(MatchRegexp(`reports-per-org\s+\*\s+reports\s+300\s+300/1m\s+True`))
		}, 30*time.Second).Should(Succeed())
		set := f.snapshot(Default)
		Expect(set.Len()).To(Equal(12))
		Expect(set.Lookup("shop-c", "list-orders").MaxInFlight).To(BeEquivalentTo(4))
		Expect(set.Lookup("shop-c", "export").Cost.Header).To(Equal("X-Cost"))
		Expect(set.Lookup("shop-q", "chat-completions").Cost.Response.MaxDebt).To(BeEquivalentTo(20000))
		Expect(set.Lookup("shop-q", "chat-completions").Cost.Response.ClientGone()).To(BeEquivalentTo(500))
		Expect(set.Lookup("shop-a", "create-order").Capacity).To(BeEquivalentTo(200))
		Expect(set.Lookup("shop-z", "reports").RefillPeriodMs).To(BeEquivalentTo(60_000))
		Expect(set.Lookup("partner-x", "create-order").QuotaLimit).To(BeEquivalentTo(1_000_000))
	})

	It("refuses a bad manifest at apply time with a message naming the field", func() {
		f := newFixture()
		bad := filepath.Join(GinkgoT().TempDir(), "bad.yaml")
		Expect(os.WriteFile(bad, []byte(`apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata:
  name: bad
spec:
  tenant: "shop:a"
  route: create-order
  capacity: 0
  refillPerSecond: 100
`), 0o600)).To(Succeed())
		_, errOut, err := kubectl("apply", "-n", f.ns, "-f", bad)
		Expect(err).To(HaveOccurred())
		Expect(errOut).To(ContainSubstring("spec.capacity"))
		Expect(errOut).To(ContainSubstring("spec.tenant"))
	})

	It("documents every spec field in kubectl explain", func() {
		out, errOut, err := kubectl("explain", "rlr.spec")
		Expect(err).NotTo(HaveOccurred(), errOut)
		for _, field := range []string{"tenant", "route", "capacity", "refillPerSecond", "refill"} {
			Expect(out).To(MatchRegexp(`(?m)^\s+`+field+`\s+<`), field)
		}
		Expect(out).To(ContainSubstring("X-Api-Key"))
		out, _, err = kubectl("explain", "rlr.spec.refill.period")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("168h"))
	})
})
