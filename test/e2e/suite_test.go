// Package e2e runs tollgate as it runs in a cluster: a real kube-apiserver and
// etcd (envtest), `tollgate controller` and three `tollgate gateway`
// processes pointed at it as pods would be, a real redis-server, an echo
// upstream, and the real kubectl. The specs carry the label "e2e":
//
//	go test ./test/e2e/ -ginkgo.label-filter=e2e -ginkgo.v
package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/internal/testutil/jwttest"
	"github.com/tollgate-dev/tollgate/internal/testutil/proctest"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	// The gateways also take bearer tokens from this issuer (its keys in
	// a JWKS file), so that the dashboard's token panels have data.
	issuer = jwttest.NewIssuer(t)
	issuerToken = issuer.Sign(t, "k1", issuer.Claims("dash-token"))
	RunSpecs(t, "tollgate end to end")
}

const namespace = "tollgate-system"

var (
	testEnv    *envtest.Environment
	k8s        client.Client
	kubeconfig string
	binary     string
	workDir    string
	issuer     *jwttest.Issuer
	// issuerToken is a token of issuer for tenant dash-token, valid an hour.
	issuerToken string
	redisSrv    *redisProc
	upstream    string
	controller  *proc
	gateways    []*gatewayProc
)

var _ = BeforeSuite(func() {
	workDir = GinkgoT().TempDir()
	By("building bin/tollgate")
	binary = filepath.Join(workDir, "tollgate")
	// Under the race detector (make test) a race build: it links from the
	// packages the tests already compiled, and the gateway and controller
	// processes are race-checked too. Otherwise the image's build flags
	// (Makefile GO_BUILD_FLAGS, Dockerfile).
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if raceEnabled {
		build = exec.Command("go", append(append([]string{"build"}, envtestutil.RaceBuildFlags()...), "-o", binary, ".")...)
		build.Env = os.Environ()
	}
	build.Dir = envtestutil.RepoRoot()
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))

	By("starting kube-apiserver and etcd")
	testEnv, err = envtestutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	// The Gateway API's standard CRDs, as shipped in its module.
	testEnv.CRDDirectoryPaths = append(testEnv.CRDDirectoryPaths, gatewayAPICRDs())
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(gwv1.Install(scheme)).To(Succeed())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err = envtestutil.WriteKubeconfig(testEnv, workDir)
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
	// The rules live in "default": as a cluster administrator would, allow
	// it every tenant under the controller's default namespace policy.
	var def corev1.Namespace
	Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "default"}, &def)).To(Succeed())
	def.Annotations = map[string]string{v1alpha1.AnnotationTenants: "*", v1alpha1.AnnotationAllowWildcardTenant: "true"}
	Expect(k8s.Update(context.Background(), &def)).To(Succeed())

	By("starting redis-server and the upstream")
	redisSrv = startRedis()
	upstream = startUpstream()

	By("starting the controller and three gateways")
	controller = startController()
	routes := filepath.Join(workDir, "routes.yaml")
	Expect(os.WriteFile(routes, []byte(fmt.Sprintf(`routes:
  - id: create-order
    methods: [POST]
    path: /orders
    upstream: %[1]s
  - id: list-orders
    methods: [GET]
    path: /orders
    upstream: %[1]s
`, upstream)), 0o644)).To(Succeed())
	for i := range 3 {
		gateways = append(gateways, startGateway(fmt.Sprintf("gw-%d", i+1), routes))
	}
	for _, g := range gateways {
		g.waitReady()
	}
})

var _ = AfterSuite(func() {
	for _, g := range gateways {
		g.stop()
	}
	if controller != nil {
		controller.stop()
	}
	if redisSrv != nil {
		redisSrv.stop()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// proc is a child process whose output goes to a log file.
type proc struct{ *proctest.Proc }

func startProc(name, bin string, args ...string) *proc {
	p := &proc{proctest.New(workDir, name, bin, args...)}
	p.start()
	return p
}

func (p *proc) start() { Expect(p.Start()).To(Succeed()) }

// stop interrupts the process and waits, killing it after 10s.
func (p *proc) stop() { p.Stop(10 * time.Second) }

// logTail returns the end of the process's log, for failure messages.
func (p *proc) logTail() string { return p.Tail(4000) }

func freePort() int {
	addr, err := proctest.FreeAddr()
	Expect(err).NotTo(HaveOccurred())
	_, port, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(port)
	Expect(err).NotTo(HaveOccurred())
	return n
}

// redisProc is a redis-server that specs stop and start again on its port.
type redisProc struct {
	*proc
	port int
}

func startRedis() *redisProc {
	bin, err := exec.LookPath("redis-server")
	Expect(err).NotTo(HaveOccurred(), "redis-server is missing: run hack/install-deps.sh")
	port := freePort()
	r := &redisProc{port: port, proc: &proc{proctest.New(workDir, "redis", bin,
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workDir)}}
	r.start()
	return r
}

func (r *redisProc) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

func (r *redisProc) start() {
	r.proc.start()
	Eventually(func() error {
		c, err := net.Dial("tcp", r.addr())
		if err == nil {
			c.Close()
		}
		return err
	}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
}

func (r *redisProc) kill() { r.Kill() }

func startUpstream() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %s\n", r.Method, r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	DeferCleanup(srv.Close)
	return "http://" + ln.Addr().String()
}

func startController() *proc {
	probe := freePort()
	p := startProc("controller", binary, "controller", "--kubeconfig", kubeconfig, "--snapshot-namespace", namespace,
		"--leader-elect=false", "--gateway-api", "--gateway-h2c", "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", freePort()),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", probe), "--log-level", "debug",
		// The region rebalancer, for the dashboard's Regions row: eu is the
		// suite's Redis, us an address nothing listens on (an unreachable
		// region).
		"--region-rebalance", "--region-interval", "1s", "--region-read-timeout", "200ms",
		"--region-redis", fmt.Sprintf("eu=%s,us=127.0.0.1:%d", redisSrv.addr(), freePort()))
	Eventually(func() int { return proctest.Status(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe)) }, 30*time.Second).Should(Equal(200), p.logTail)
	return p
}

// controllerMetricsAddr is the controller's --metrics-bind-address.
func controllerMetricsAddr() string {
	for i, a := range controller.Args {
		if a == "--metrics-bind-address" {
			return controller.Args[i+1]
		}
	}
	return ""
}

// gatewayProc is one gateway replica.
type gatewayProc struct {
	*proc
	url, admin string
}

func startGateway(name, routes string) *gatewayProc {
	listen, admin := fmt.Sprintf("127.0.0.1:%d", freePort()), fmt.Sprintf("127.0.0.1:%d", freePort())
	p := startProc(name, binary, "gateway", "--kubeconfig", kubeconfig, "--snapshot-namespace", namespace,
		"--routes", routes, "--redis-addr", redisSrv.addr(), "--listen", listen, "--admin-listen", admin,
		"--pod-name", name, "--lease-duration", "3s",
		// The specs send tenant ids as keys; a real deployment maps keys
		// with --api-keys-file. Bearer tokens of the test issuer work too.
		"--identity", "header-is-tenant,jwt", "--jwt-jwks-file", jwksFile(),
		"--jwt-issuer", issuer.URL, "--jwt-audience", "api", "--jwt-tenant-claim", "org_id",
		// A generous deadline: a shared test machine must not turn a slow
		// Redis answer into a local decision where the spec counts exactly.
		"--redis-timeout", "2s", "--breaker-open-for", "200ms")
	return &gatewayProc{proc: p, url: "http://" + listen, admin: "http://" + admin}
}

// jwksFile writes the test issuer's keys to a file of workDir, once.
func jwksFile() string {
	path := filepath.Join(workDir, "jwks.json")
	if _, err := os.Stat(path); err != nil {
		Expect(os.WriteFile(path, issuer.JWKS(), 0o644)).To(Succeed())
	}
	return path
}

func (g *gatewayProc) waitReady() {
	Eventually(func() int { return proctest.Status(g.admin + "/readyz") }, 30*time.Second).Should(Equal(200), g.logTail)
}

// metric returns the sum of the series of name whose labels contain every
// given label="value" pair, from a /metrics URL.
func metric(url, name string, labels ...string) float64 {
	res, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			sum += v
		}
	}
	return sum
}

// gatewayAPICRDs is the directory of the Gateway API's standard-channel CRDs
// in the module cache (the version in go.mod).
func gatewayAPICRDs() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	Expect(err).NotTo(HaveOccurred())
	return filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
}
