package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kptr "k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// The Gateway API flow a user follows: kubectl apply a GatewayClass, a
// Gateway, an HTTPRoute and a RateLimitRule that targets the route, then
// send traffic through a gateway started with --gateway-api. The backends are
// echo servers on loopback published through a Service and an EndpointSlice
// that the spec writes, as the EndpointSlice controller would.

const gwNS = "shop"

// gatewayAPIManifest is what a user applies: the Gateway API docs' simple
// gateway example, adapted to tollgate's class, plus a rule for the route.
const gatewayAPIManifest = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: tollgate
spec:
  controllerName: tollgate.dev/gateway-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: shop-gateway
  namespace: shop
spec:
  gatewayClassName: tollgate
  listeners:
  - name: http
    protocol: HTTP
    port: 80
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: orders
  namespace: shop
spec:
  parentRefs:
  - name: shop-gateway
  hostnames:
  - shop.example.com
  rules:
  - name: orders
    matches:
    - path:
        type: PathPrefix
        value: /orders
    backendRefs:
    - name: echo
      port: 8080
---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata:
  name: shop-a-orders
  namespace: shop
spec:
  tenant: shop-a
  targetRef:
    group: gateway.networking.k8s.io
    kind: HTTPRoute
    name: orders
    sectionName: orders
  capacity: 2
  refill:
    tokens: 1
    period: 1h
`

// hostIP is a non-loopback address of this machine: the API server refuses
// loopback endpoint addresses.
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	Expect(err).NotTo(HaveOccurred())
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	Skip("this machine has no non-loopback IPv4 address to publish echo servers in EndpointSlices")
	return ""
}

// echoServer starts an echo server on ip that answers with its name, the
// Host and the path, and returns its port.
func echoServer(ip, name string) int32 {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
			time.Sleep(d)
		}
		// The request headers come back as Echo-<name> response headers.
		for k, v := range r.Header {
			w.Header()["Echo-"+k] = v
		}
		fmt.Fprintf(w, "%s %s %s", name, r.Host, r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	DeferCleanup(srv.Close)
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// echoSlice is an EndpointSlice of the echo Service with one endpoint,
// ip:port (each echo server has a slice of its own, as their ports differ).
func echoSlice(name, ip string, port int32, ready bool) *discoveryv1.EndpointSlice {
	return serviceSlice(gwNS, "echo", name, ip, port, ready)
}

// serviceSlice is an EndpointSlice of Service ns/svc with one endpoint.
func serviceSlice(ns, svc, name, ip string, port int32, ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: kptr.To("http"), Port: kptr.To(port), Protocol: kptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: kptr.To(ready)}}},
	}
}

type gwResult struct {
	status     int
	body       string
	retryAfter string
	limit      string
	header     http.Header
}

// noRedirects lets a spec see a redirect's answer.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func sendHost(gw *gatewayProc, host, path, key string, headers ...string) gwResult {
	req, err := http.NewRequest("GET", gw.url+path, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Host = host
	req.Header.Set("X-Api-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := noRedirects.Do(req)
	Expect(err).NotTo(HaveOccurred())
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return gwResult{res.StatusCode, string(b), res.Header.Get("Retry-After"), res.Header.Get("X-RateLimit-Limit"), res.Header}
}

// parentCondition is the condition t of rt's first parent status.
func parentCondition(ctx context.Context, name, t string) string {
	var rt gwv1.HTTPRoute
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: name}, &rt); err != nil || len(rt.Status.Parents) == 0 {
		return "<none>"
	}
	return condition(rt.Status.Parents[0].Conditions, t)
}

func parentMessage(ctx context.Context, name, t string) string {
	var rt gwv1.HTTPRoute
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: name}, &rt); err != nil || len(rt.Status.Parents) == 0 {
		return ""
	}
	if c := meta.FindStatusCondition(rt.Status.Parents[0].Conditions, t); c != nil {
		return c.Message
	}
	return ""
}

func applyYAML(name, yaml string) {
	path := filepath.Join(workDir, name+".yaml")
	Expect(os.WriteFile(path, []byte(yaml), 0o644)).To(Succeed())
	out, err := kubectl("apply", "-f", path)
	Expect(err).NotTo(HaveOccurred(), out)
}

// featuresRoute exercises filters and a weighted split; rule "late" is
// added by an edit.
const featuresRoute = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: features
  namespace: shop
spec:
  parentRefs:
  - name: shop-gateway
  hostnames:
  - features.example.com
  rules:
  - name: split
    matches:
    - path: {type: PathPrefix, value: /split}
    backendRefs:
    - {name: blue, port: 8080, weight: 3}
    - {name: green, port: 8080, weight: 1}
  - name: headers
    matches:
    - path: {type: PathPrefix, value: /headers}
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Env, value: test}]
        add: [{name: X-Added, value: "1"}]
        remove: [X-Remove]
    backendRefs:
    - {name: blue, port: 8080}
  - name: rewrite
    matches:
    - path: {type: PathPrefix, value: /old}
    filters:
    - type: URLRewrite
      urlRewrite:
        hostname: rewritten.example.com
        path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}
    backendRefs:
    - {name: blue, port: 8080}
  - name: full
    matches:
    - path: {type: Exact, value: /full}
    filters:
    - type: URLRewrite
      urlRewrite:
        path: {type: ReplaceFullPath, replaceFullPath: /replaced}
    backendRefs:
    - {name: green, port: 8080}
  - name: slow
    matches:
    - path: {type: PathPrefix, value: /slow}
    timeouts: {request: 2s, backendRequest: 300ms}
    backendRefs:
    - {name: blue, port: 8080}
  - name: redirect
    matches:
    - path: {type: PathPrefix, value: /go}
    filters:
    - type: RequestRedirect
      requestRedirect: {scheme: https, hostname: secure.example.com, statusCode: 301}
`

func condition(conds []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason
}

var _ = Describe("Gateway API", Ordered, Label("e2e"), func() {
	ctx := context.Background()
	var gw *gatewayProc
	var ip string
	var echo1 int32

	BeforeAll(func() {
		// Echo servers live as long as the container (DeferCleanup in
		// BeforeAll).
		ip = hostIP()
		echo1 = echoServer(ip, "echo-1")
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gwNS, Annotations: map[string]string{
			v1alpha1.AnnotationTenants: "*",
		}}})).To(Succeed())
		// blue and green in the route's namespace, remote in another one.
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "backends"}})).To(Succeed())
		for _, b := range [][2]string{{gwNS, "blue"}, {gwNS, "green"}, {"backends", "remote"}} {
			Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: b[0], Name: b[1]},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}})).To(Succeed())
			Expect(k8s.Create(ctx, serviceSlice(b[0], b[1], b[1]+"-1", ip, echoServer(ip, b[1]), true))).To(Succeed())
		}
		// The chart's gateway Service; the controller reports its address.
		ensureGatewayService(ctx)
		Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "echo"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}})).To(Succeed())
		// A gateway in Gateway API mode (its own membership group: the
		// suite's three gateways count each other). It is ready once it has
		// loaded the route table, empty at first.
		listen, admin := fmt.Sprintf("127.0.0.1:%d", freePort()), fmt.Sprintf("127.0.0.1:%d", freePort())
		gw = &gatewayProc{proc: startProc("gw-gatewayapi", binary, "gateway", "--kubeconfig", kubeconfig, "--snapshot-namespace", namespace,
			"--gateway-api", "--redis-addr", redisSrv.addr(), "--listen", listen, "--admin-listen", admin,
			"--pod-name", "gw-gatewayapi", "--membership-group", "tollgate-gatewayapi", "--lease-duration", "3s",
			"--identity", "header-is-tenant", "--redis-timeout", "2s"), url: "http://" + listen, admin: "http://" + admin}
		DeferCleanup(gw.stop)
		gw.waitReady()
	})

	It("serves the user's flow: kubectl apply, then 200, 200, 429 through the route, with statuses on all four objects", func() {
		Expect(k8s.Create(ctx, echoSlice("echo-1", ip, echo1, true))).To(Succeed())
		manifest := filepath.Join(workDir, "gateway-api.yaml")
		Expect(os.WriteFile(manifest, []byte(gatewayAPIManifest), 0o644)).To(Succeed())
		out, err := kubectl("apply", "-f", manifest)
		Expect(err).NotTo(HaveOccurred(), out)

		By("the statuses")
		Eventually(func(g Gomega) {
			var c gwv1.GatewayClass
			g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tollgate"}, &c)).To(Succeed())
			g.Expect(condition(c.Status.Conditions, "Accepted")).To(Equal("True/Accepted"))
			g.Expect(condition(c.Status.Conditions, "SupportedVersion")).To(Equal("True/SupportedVersion"))

			var gwo gwv1.Gateway
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: "shop-gateway"}, &gwo)).To(Succeed())
			g.Expect(condition(gwo.Status.Conditions, "Accepted")).To(Equal("True/Accepted"))
			g.Expect(condition(gwo.Status.Conditions, "Programmed")).To(Equal("True/Programmed"))
			g.Expect(gwo.Status.Addresses).To(HaveLen(1))
			g.Expect(gwo.Status.Listeners).To(HaveLen(1))
			l := gwo.Status.Listeners[0]
			g.Expect(l.AttachedRoutes).To(BeEquivalentTo(1))
			for _, t := range []string{"Accepted", "Programmed", "ResolvedRefs"} {
				g.Expect(condition(l.Conditions, t)).To(HavePrefix("True/"), t)
			}
			g.Expect(condition(l.Conditions, "Conflicted")).To(Equal("False/NoConflicts"))

			var rt gwv1.HTTPRoute
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: "orders"}, &rt)).To(Succeed())
			g.Expect(rt.Status.Parents).To(HaveLen(1))
			g.Expect(string(rt.Status.Parents[0].ControllerName)).To(Equal("tollgate.dev/gateway-controller"))
			g.Expect(condition(rt.Status.Parents[0].Conditions, "Accepted")).To(Equal("True/Accepted"))
			g.Expect(condition(rt.Status.Parents[0].Conditions, "ResolvedRefs")).To(Equal("True/ResolvedRefs"))

			var rule v1alpha1.RateLimitRule
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: "shop-a-orders"}, &rule)).To(Succeed())
			g.Expect(condition(rule.Status.Conditions, "Ready")).To(Equal("True/Ready"))
		}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		out, err = kubectl("get", "rlr", "-n", gwNS)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+TENANT\s+ROUTE\s+TARGET\s+CAPACITY`))
		Expect(out).To(MatchRegexp(`shop-a-orders\s+shop-a\s+orders\s+2\s+1/1h\s+True`))

		var rule v1alpha1.RateLimitRule
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: "shop-a-orders"}, &rule)).To(Succeed())
		Eventually(func() float64 { return metric(gw.admin+"/metrics", "tollgate_gateway_snapshot_version") }, 10*time.Second, 10*time.Millisecond).
			Should(BeNumerically(">=", rule.Status.PublishedVersion))

		By("200, 200, 429 for tenant shop-a")
		var got []int
		for range 3 {
			got = append(got, sendHost(gw, "shop.example.com", "/orders/42", "shop-a").status)
		}
		Expect(got).To(Equal([]int{200, 200, 429}), gw.logTail)
		r := sendHost(gw, "shop.example.com", "/orders/42", "shop-a")
		Expect(r.status).To(Equal(429))
		Expect(r.limit).To(Equal("2"))
		Expect(r.retryAfter).NotTo(BeEmpty())
		By("another tenant (no rule of its own) has the default rule, and the backend sees the client's Host")
		r = sendHost(gw, "shop.example.com", "/orders/42", "walk-in")
		Expect(r.status).To(Equal(200))
		Expect(r.body).To(Equal("echo-1 shop.example.com /orders/42"))
		Expect(r.limit).To(Equal("20"))
		By("the backend receives the tenant in X-Tollgate-Tenant, never the API key nor a client's own tenant header")
		r = sendHost(gw, "shop.example.com", "/orders/42", "walk-in", "X-Tollgate-Tenant", "shop-a")
		Expect(r.status).To(Equal(200))
		Expect(r.header.Values("Echo-X-Api-Key")).To(BeEmpty())
		Expect(r.header.Values("Echo-X-Tollgate-Tenant")).To(Equal([]string{"walk-in"}))
		By("404 for another host or path")
		Expect(sendHost(gw, "other.example.com", "/orders/42", "walk-in").status).To(Equal(404))
		Expect(sendHost(gw, "shop.example.com", "/ordersx", "walk-in").status).To(Equal(404))
		By("the route label of the metrics is the HTTPRoute rule")
		Expect(metric(gw.admin+"/metrics", "tollgate_gateway_decisions_total", `route="shop_orders_orders"`)).To(BeNumerically(">", 0))
	})

	It("follows EndpointSlice changes without a restart", func() {
		polls := 0
		seen := func() map[string]int {
			// A fresh tenant per poll: its bucket (the default rule) never
			// runs dry.
			polls++
			tenant := fmt.Sprintf("scale-%d", polls)
			out := map[string]int{}
			for range 15 {
				r := sendHost(gw, "shop.example.com", "/orders/1", tenant)
				if r.status != 200 {
					out[fmt.Sprint(r.status)]++
					continue
				}
				out[strings.Fields(r.body)[0]]++
			}
			return out
		}
		By("scaled up to three ready endpoints")
		Expect(k8s.Create(ctx, echoSlice("echo-2", ip, echoServer(ip, "echo-2"), true))).To(Succeed())
		Expect(k8s.Create(ctx, echoSlice("echo-3", ip, echoServer(ip, "echo-3"), true))).To(Succeed())
		Eventually(seen, 10*time.Second, 50*time.Millisecond).Should(SatisfyAll(HaveKey("echo-1"), HaveKey("echo-2"), HaveKey("echo-3"), HaveLen(3)))
		By("scaled down: echo-1 and echo-2 not ready")
		for _, name := range []string{"echo-1", "echo-2"} {
			var s discoveryv1.EndpointSlice
			Expect(k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: name}, &s)).To(Succeed())
			s.Endpoints[0].Conditions.Ready = kptr.To(false)
			Expect(k8s.Update(ctx, &s)).To(Succeed())
		}
		Eventually(seen, 10*time.Second, 50*time.Millisecond).Should(Equal(map[string]int{"echo-3": 15}))
		By("no ready endpoint left: 503")
		Expect(k8s.DeleteAllOf(ctx, &discoveryv1.EndpointSlice{}, client.InNamespace(gwNS),
			client.MatchingLabels{discoveryv1.LabelServiceName: "echo"})).To(Succeed())
		Eventually(seen, 10*time.Second, 50*time.Millisecond).Should(Equal(map[string]int{"503": 15}))
	})

	It("applies RequestHeaderModifier, URLRewrite and RequestRedirect, and splits traffic by weight", func() {
		// A generous limit for the tenant of this spec, on the whole route.
		applyYAML("bulk", `apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: bulk, namespace: shop}
spec:
  tenant: bulk
  targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: features}
  capacity: 1000000
  refillPerSecond: 1000000
`)
		applyYAML("features", featuresRoute)
		Eventually(func() string { return sendHost(gw, "features.example.com", "/split", "bulk").limit }, 10*time.Second, 50*time.Millisecond).Should(Equal("1000000"))
		Eventually(func() string { return parentCondition(ctx, "features", "Accepted") }, 10*time.Second, 50*time.Millisecond).Should(Equal("True/Accepted"))

		By("weights 3:1 over 2,000 requests: blue gets 75 % ± 5 %")
		blue := 0
		for range 2000 {
			r := sendHost(gw, "features.example.com", "/split/x", "bulk")
			Expect(r.status).To(Equal(200))
			if strings.HasPrefix(r.body, "blue ") {
				blue++
			}
		}
		fmt.Fprintf(GinkgoWriter, "weighted split: blue %d of 2000\n", blue)
		Expect(blue).To(BeNumerically("~", 1500, 100))

		By("RequestHeaderModifier: set, add, remove")
		r := sendHost(gw, "features.example.com", "/headers", "bulk", "X-Env", "prod", "X-Remove", "yes", "X-Added", "0")
		Expect(r.status).To(Equal(200))
		Expect(r.header.Values("Echo-X-Env")).To(Equal([]string{"test"}))
		Expect(r.header.Values("Echo-X-Added")).To(Equal([]string{"0", "1"}))
		Expect(r.header.Values("Echo-X-Remove")).To(BeEmpty())

		By("URLRewrite: hostname and ReplacePrefixMatch, ReplaceFullPath")
		Expect(sendHost(gw, "features.example.com", "/old/x/y", "bulk").body).To(Equal("blue rewritten.example.com /new/x/y"))
		Expect(sendHost(gw, "features.example.com", "/old", "bulk").body).To(Equal("blue rewritten.example.com /new"))
		Expect(sendHost(gw, "features.example.com", "/full", "bulk").body).To(Equal("green features.example.com /replaced"))

		By("timeouts.backendRequest: a backend slower than 300ms gets 504")
		Expect(sendHost(gw, "features.example.com", "/slow?sleep=50ms", "bulk").status).To(Equal(200))
		start := time.Now()
		Expect(sendHost(gw, "features.example.com", "/slow?sleep=3s", "bulk").status).To(Equal(504))
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))

		By("RequestRedirect")
		r = sendHost(gw, "features.example.com", "/go/x?q=1", "bulk")
		Expect(r.status).To(Equal(301))
		Expect(r.header.Get("Location")).To(Equal("https://secure.example.com/go/x?q=1"))
	})

	It("limits callers at every level: a per-address rule on an anonymous route, a tenant's budget on the Gateway, statuses", func() {
		By("the namespace may declare rules for every tenant (an anonymous caller has none)")
		var ns corev1.Namespace
		Expect(k8s.Get(ctx, types.NamespacedName{Name: gwNS}, &ns)).To(Succeed())
		ns.Annotations[v1alpha1.AnnotationAllowWildcardTenant] = "true"
		Expect(k8s.Update(ctx, &ns)).To(Succeed())
		applyYAML("callers", `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: login
  namespace: shop
  annotations: {ratelimit.tollgate.dev/identity: none}
spec:
  parentRefs: [{name: shop-gateway}]
  hostnames: [login.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /login}}]
    backendRefs: [{name: blue, port: 8080}]
---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: login-per-address, namespace: shop}
spec:
  tenant: "*"
  targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: login}
  by: [{clientAddress: {}}]
  capacity: 3
  refill: {tokens: 1, period: 1h}
---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: gateway-budget, namespace: shop}
spec:
  tenant: gw-tenant
  targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: shop-gateway}
  by: [{tenant: {}}]
  capacity: 4
  refill: {tokens: 1, period: 1h}
---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: no-such-gateway, namespace: shop}
spec:
  tenant: "*"
  targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: nope}
  shared: true
  capacity: 4
  refill: {tokens: 1, period: 1h}
`)
		ruleCond := func(name string) string {
			var rule v1alpha1.RateLimitRule
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: name}, &rule); err != nil {
				return err.Error()
			}
			return condition(rule.Status.Conditions, "Accepted")
		}
		Eventually(func(g Gomega) {
			g.Expect(ruleCond("login-per-address")).To(Equal("True/Accepted"))
			g.Expect(ruleCond("gateway-budget")).To(Equal("True/Accepted"))
			g.Expect(ruleCond("no-such-gateway")).To(Equal("False/TargetNotFound"))
			g.Expect(parentCondition(ctx, "login", "Accepted")).To(Equal("True/Accepted"))
		}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		Eventually(func() string { return sendHost(gw, "login.example.com", "/login", "").limit }, 10*time.Second, 50*time.Millisecond).Should(Equal("3"))

		By("anonymous login, without a credential: 3 per client address (one used by the wait above)")
		var got []int
		for range 3 {
			got = append(got, sendHost(gw, "login.example.com", "/login", "").status)
		}
		Expect(got).To(Equal([]int{200, 200, 429}), gw.logTail)

		By("tenant gw-tenant: 4 across every route of the Gateway, on top of each route's own limit")
		got = got[:0]
		for i := range 6 {
			path := []string{"/split/a", "/headers"}[i%2]
			got = append(got, sendHost(gw, "features.example.com", path, "gw-tenant").status)
		}
		Expect(got).To(Equal([]int{200, 200, 200, 200, 429, 429}), gw.logTail)
		Expect(sendHost(gw, "features.example.com", "/split/a", "walk-in-2").status).To(Equal(200))

		By("the login route and this spec's rules leave, so the later specs count the routes they attach")
		for _, o := range []client.Object{
			&gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "login"}},
			&v1alpha1.RateLimitRule{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "login-per-address"}},
			&v1alpha1.RateLimitRule{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "gateway-budget"}},
			&v1alpha1.RateLimitRule{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "no-such-gateway"}},
		} {
			Expect(k8s.Delete(ctx, o)).To(Succeed())
		}
		Eventually(func() int { return sendHost(gw, "login.example.com", "/login", "").status }, 10*time.Second, 50*time.Millisecond).Should(Equal(404))
	})

	It("propagates a live route edit (time measured)", func() {
		start := time.Now()
		out, err := kubectl("patch", "httproute", "features", "-n", gwNS, "--type", "json", "-p",
			`[{"op":"add","path":"/spec/rules/-","value":{"name":"late","matches":[{"path":{"type":"PathPrefix","value":"/late"}}],"backendRefs":[{"name":"green","port":8080}]}}]`)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() int { return sendHost(gw, "features.example.com", "/late", "bulk").status }, 10*time.Second, 10*time.Millisecond).Should(Equal(200),
			func() string { return controller.logTail() })
		elapsed := time.Since(start)
		AddReportEntry("HTTPRoute edit to traffic", elapsed.String())
		fmt.Fprintf(GinkgoWriter, "route edit propagated in %v (kubectl patch included)\n", elapsed)
	})

	It("keeps the last good route table when the ConfigMap is corrupted, and the controller rewrites it", func() {
		var cm corev1.ConfigMap
		key := types.NamespacedName{Namespace: namespace, Name: "tollgate-httproutes"}
		Expect(k8s.Get(ctx, key, &cm)).To(Succeed())
		good := cm.BinaryData["httproutes.json.gz"]
		errorsBefore := metric(gw.admin+"/metrics", "tollgate_gateway_reload_errors_total", `source="httproutes"`)
		cm.BinaryData["httproutes.json.gz"] = []byte("not gzip")
		Expect(k8s.Update(ctx, &cm)).To(Succeed())
		Eventually(func() float64 {
			return metric(gw.admin+"/metrics", "tollgate_gateway_reload_errors_total", `source="httproutes"`)
		}, 10*time.Second, 20*time.Millisecond).Should(BeNumerically(">", errorsBefore))
		Expect(sendHost(gw, "features.example.com", "/full", "bulk").status).To(Equal(200))
		// The next pass (any change; here a Service) rewrites the table.
		Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "nudge"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}})).To(Succeed())
		Eventually(func() []byte {
			Expect(k8s.Get(ctx, key, &cm)).To(Succeed())
			return cm.BinaryData["httproutes.json.gz"]
		}, 10*time.Second, 50*time.Millisecond).Should(Equal(good))
		Expect(sendHost(gw, "features.example.com", "/full", "bulk").status).To(Equal(200))
	})

	It("refuses a cross-namespace backend until a ReferenceGrant allows it", func() {
		applyYAML("cross", `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cross, namespace: shop}
spec:
  parentRefs: [{name: shop-gateway}]
  hostnames: [cross.example.com]
  rules:
  - backendRefs: [{name: remote, namespace: backends, port: 8080}]
`)
		Eventually(func() string { return parentCondition(ctx, "cross", "ResolvedRefs") }, 10*time.Second, 50*time.Millisecond).Should(Equal("False/RefNotPermitted"))
		Eventually(func() string { return parentCondition(ctx, "cross", "Accepted") }, 10*time.Second, 50*time.Millisecond).Should(Equal("True/Accepted"))
		Eventually(func() int { return sendHost(gw, "cross.example.com", "/", "bulk").status }, 10*time.Second, 50*time.Millisecond).Should(Equal(500))

		applyYAML("grant", `apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: shop-routes, namespace: backends}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: shop}]
  to: [{group: "", kind: Service, name: remote}]
`)
		Eventually(func() string { return parentCondition(ctx, "cross", "ResolvedRefs") }, 10*time.Second, 50*time.Millisecond).Should(Equal("True/ResolvedRefs"))
		Eventually(func() string { return sendHost(gw, "cross.example.com", "/x", "bulk").body }, 10*time.Second, 50*time.Millisecond).Should(Equal("remote cross.example.com /x"))
	})

	It("reports invalid routes and unresolved backends, and keeps serving the other routes", func() {
		applyYAML("bad", `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bad, namespace: shop}
spec:
  parentRefs: [{name: shop-gateway}]
  hostnames: [bad.example.com]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/b.*"}}]
    backendRefs: [{name: blue, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ghost, namespace: shop}
spec:
  parentRefs: [{name: shop-gateway}]
  hostnames: [ghost.example.com]
  rules:
  - backendRefs: [{name: nowhere, port: 8080}]
`)
		Eventually(func() string { return parentCondition(ctx, "bad", "Accepted") }, 10*time.Second, 50*time.Millisecond).Should(Equal("False/UnsupportedValue"))
		Expect(parentMessage(ctx, "bad", "Accepted")).To(ContainSubstring("spec.rules[0].matches[0].path.type RegularExpression is not supported"))
		Eventually(func() string { return parentCondition(ctx, "ghost", "ResolvedRefs") }, 10*time.Second, 50*time.Millisecond).Should(Equal("False/BackendNotFound"))
		Eventually(func() int { return sendHost(gw, "ghost.example.com", "/", "bulk").status }, 10*time.Second, 50*time.Millisecond).Should(Equal(500))
		Expect(sendHost(gw, "bad.example.com", "/b", "bulk").status).To(Equal(404))
		Expect(sendHost(gw, "features.example.com", "/full", "bulk").status).To(Equal(200))
		// orders, features, cross and ghost are attached; bad is not.
		Eventually(func() int32 {
			var gwo gwv1.Gateway
			Expect(k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: "shop-gateway"}, &gwo)).To(Succeed())
			return gwo.Status.Listeners[0].AttachedRoutes
		}, 10*time.Second, 50*time.Millisecond).Should(BeEquivalentTo(4))
	})

	It("refuses an invalid targetRef at apply time, naming the field", func() {
		for i, c := range []struct{ fields, want string }{
			{"targetRef: {group: gateway.networking.k8s.io, kind: Service, name: orders}", `spec.targetRef.kind: Unsupported value: "Service"`},
			{"route: orders\n  targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: orders}", "exactly one of spec.route and spec.targetRef must be set"},
			{"tenant2: x", "exactly one of spec.route and spec.targetRef must be set"},
		} {
			path := filepath.Join(workDir, fmt.Sprintf("bad-rule-%d.yaml", i))
			Expect(os.WriteFile(path, []byte(`apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: bad, namespace: shop}
spec:
  tenant: shop-a
  `+c.fields+`
  capacity: 1
  refillPerSecond: 1
`), 0o644)).To(Succeed())
			out, err := kubectl("apply", "--validate=false", "-f", path)
			Expect(err).To(HaveOccurred(), c.fields)
			Expect(out).To(ContainSubstring(c.want), c.fields)
		}
	})

	It("answers 404 for a detached route and drops its parent status", func() {
		out, err := kubectl("patch", "httproute", "cross", "-n", gwNS, "--type", "json", "-p", `[{"op":"remove","path":"/spec/parentRefs"}]`)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() int { return sendHost(gw, "cross.example.com", "/x", "bulk").status }, 10*time.Second, 20*time.Millisecond).Should(Equal(404))
		Eventually(func() int {
			var rt gwv1.HTTPRoute
			Expect(k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: "cross"}, &rt)).To(Succeed())
			return len(rt.Status.Parents)
		}, 10*time.Second, 50*time.Millisecond).Should(BeZero())
	})

	It("answers 404 once the route is deleted", func() {
		out, err := kubectl("delete", "httproute", "orders", "-n", gwNS)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() int { return sendHost(gw, "shop.example.com", "/orders/1", "walk-in").status }, 10*time.Second, 50*time.Millisecond).Should(Equal(404))
		Expect(sendHost(gw, "features.example.com", "/full", "bulk").status).To(Equal(200))
		Eventually(func(g Gomega) {
			var rule v1alpha1.RateLimitRule
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: gwNS, Name: "shop-a-orders"}, &rule)).To(Succeed())
			g.Expect(condition(rule.Status.Conditions, "Accepted")).To(Equal("False/TargetNotFound"))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	})
})
