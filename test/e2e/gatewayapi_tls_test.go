package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
)

// HTTPS listeners: certificate Secrets referenced by a Gateway, the
// listener statuses the controller reports for them, and a gateway started
// with --tls-listen that terminates TLS with the certificate chosen by SNI.

const tlsNS = "secure"

// tlsGatewayManifest has one listener per kind of certificate reference.
const tlsGatewayManifest = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: web
  namespace: secure
spec:
  gatewayClassName: tollgate
  listeners:
  - name: https
    protocol: HTTPS
    port: 443
    hostname: shop.example.com
    tls:
      mode: Terminate
      certificateRefs:
      - kind: Secret
        name: shop-cert
  - name: shared
    protocol: HTTPS
    port: 443
    hostname: "*.shared.example.com"
    tls:
      certificateRefs:
      - name: shared-cert
        namespace: certs
  - name: missing
    protocol: HTTPS
    port: 443
    hostname: missing.example.com
    tls:
      certificateRefs:
      - name: no-such-secret
  - name: opaque
    protocol: HTTPS
    port: 443
    hostname: opaque.example.com
    tls:
      certificateRefs:
      - name: opaque-cert
  - name: tls
    protocol: TLS
    port: 443
    hostname: tls.example.com
    tls:
      mode: Passthrough
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: shop
  namespace: secure
spec:
  parentRefs:
  - name: web
    sectionName: https
  rules:
  - name: all
    backendRefs:
    - name: web
      port: 8080
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: shared
  namespace: secure
spec:
  parentRefs:
  - name: web
    sectionName: shared
  hostnames:
  - api.shared.example.com
  rules:
  - backendRefs:
    - name: web
      port: 8080
---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata:
  name: shop-b
  namespace: secure
spec:
  tenant: shop-b
  targetRef:
    group: gateway.networking.k8s.io
    kind: HTTPRoute
    name: shop
  capacity: 2
  refill:
    tokens: 1
    period: 1h
`

// certSecret is a kubernetes.io/tls Secret.
func certSecret(ns, name string, crt, key []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
}

// ensureGatewayService creates the chart's gateway Service (whose address
// the controller reports) unless another spec did.
func ensureGatewayService(ctx context.Context) {
	err := k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "tollgate-gateway"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}}})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

type httpsResult struct {
	Status int
	CN     string // the common name of the certificate the gateway presented
	Body   string
	Header http.Header
}

// httpsGet sends GET path with Host host over a new TLS connection with
// server name sni, verifying the gateway's certificate against roots.
func httpsGet(addr, sni, host, path, tenant string, roots *x509.CertPool, headers ...string) (httpsResult, error) {
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{ServerName: sni, RootCAs: roots, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest("GET", "https://"+addr+path, nil)
	if err != nil {
		return httpsResult{}, err
	}
	req.Host = host
	req.Header.Set("X-Api-Key", tenant)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return httpsResult{}, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return httpsResult{Status: res.StatusCode, CN: res.TLS.PeerCertificates[0].Subject.CommonName, Body: string(b), Header: res.Header}, nil
}

// listenerConds are the conditions of each listener of Gateway secure/web.
func listenerConds(ctx context.Context) map[string]map[string]string {
	var gw gwv1.Gateway
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tlsNS, Name: "web"}, &gw); err != nil {
		return nil
	}
	out := map[string]map[string]string{}
	for _, l := range gw.Status.Listeners {
		out[string(l.Name)] = map[string]string{}
		for _, t := range []string{"Accepted", "ResolvedRefs", "Programmed"} {
			out[string(l.Name)][t] = condition(l.Conditions, t)
		}
	}
	return out
}

func listenerMessage(ctx context.Context, name, t string) string {
	var gw gwv1.Gateway
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tlsNS, Name: "web"}, &gw); err != nil {
		return ""
	}
	for _, l := range gw.Status.Listeners {
		if c := meta.FindStatusCondition(l.Conditions, t); string(l.Name) == name && c != nil {
			return c.Message
		}
	}
	return ""
}

var _ = Describe("Gateway API HTTPS listeners", Ordered, Label("e2e"), func() {
	ctx := context.Background()
	var gw *gatewayProc
	var tlsAddr string
	roots := x509.NewCertPool()
	shopCrt, shopKey := certtest.New("shop-1", "shop.example.com")
	sharedCrt, sharedKey := certtest.New("shared", "*.shared.example.com")

	BeforeAll(func() {
		ip := hostIP()
		Expect(roots.AppendCertsFromPEM(shopCrt)).To(BeTrue())
		Expect(roots.AppendCertsFromPEM(sharedCrt)).To(BeTrue())
		for _, ns := range []string{tlsNS, "certs"} {
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Annotations: map[string]string{
				v1alpha1.AnnotationTenants: "*",
			}}})).To(Succeed())
		}
		ensureGatewayService(ctx)
		Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: tlsNS, Name: "web"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}})).To(Succeed())
		Expect(k8s.Create(ctx, serviceSlice(tlsNS, "web", "web-1", ip, echoServer(ip, "web"), true))).To(Succeed())
		Expect(k8s.Create(ctx, certSecret(tlsNS, "shop-cert", shopCrt, shopKey))).To(Succeed())
		Expect(k8s.Create(ctx, certSecret("certs", "shared-cert", sharedCrt, sharedKey))).To(Succeed())
		opaque := certSecret(tlsNS, "opaque-cert", shopCrt, shopKey)
		opaque.Type = corev1.SecretTypeOpaque
		Expect(k8s.Create(ctx, opaque)).To(Succeed())

		listen, admin := fmt.Sprintf("127.0.0.1:%d", freePort()), fmt.Sprintf("127.0.0.1:%d", freePort())
		tlsAddr = fmt.Sprintf("127.0.0.1:%d", freePort())
		gw = &gatewayProc{proc: startProc("gw-https", binary, "gateway", "--kubeconfig", kubeconfig, "--snapshot-namespace", namespace,
			"--gateway-api", "--tls-listen", tlsAddr, "--redis-addr", redisSrv.addr(), "--listen", listen, "--admin-listen", admin,
			"--pod-name", "gw-https", "--membership-group", "tollgate-https", "--lease-duration", "3s",
			"--identity", "header-is-tenant", "--redis-timeout", "2s"), url: "http://" + listen, admin: "http://" + admin}
		DeferCleanup(gw.stop)
		gw.waitReady()
		applyYAML("gatewayclass", "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: tollgate}\nspec: {controllerName: tollgate.dev/gateway-controller}\n")
		applyYAML("tls-gateway", tlsGatewayManifest)
	})

	It("reports each listener's certificate references, and refuses Passthrough on HTTPS", func() {
		Eventually(listenerConds, 20*time.Second, 50*time.Millisecond).WithArguments(ctx).Should(Equal(map[string]map[string]string{
			"https":   {"Accepted": "True/Accepted", "ResolvedRefs": "True/ResolvedRefs", "Programmed": "True/Programmed"},
			"shared":  {"Accepted": "True/Accepted", "ResolvedRefs": "False/RefNotPermitted", "Programmed": "False/Invalid"},
			"missing": {"Accepted": "True/Accepted", "ResolvedRefs": "False/InvalidCertificateRef", "Programmed": "False/Invalid"},
			"opaque":  {"Accepted": "True/Accepted", "ResolvedRefs": "False/InvalidCertificateRef", "Programmed": "False/Invalid"},
			"tls":     {"Accepted": "False/UnsupportedProtocol", "ResolvedRefs": "True/ResolvedRefs", "Programmed": "False/Invalid"},
		}))
		Expect(listenerMessage(ctx, "missing", "ResolvedRefs")).To(ContainSubstring("Secret secure/no-such-secret not found"))
		Expect(listenerMessage(ctx, "opaque", "ResolvedRefs")).To(ContainSubstring(`of type "Opaque"`))
		By("the TLS Secret the gateways read holds only the usable certificate, and the route table only its name")
		var bundle corev1.Secret
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: namespace, Name: "tollgate-httproutes-tls"}, &bundle)).To(Succeed())
		// Other Gateways' certificates share the Secret (the GRPCRoute
		// container's, when it ran first): count this namespace's.
		var mine []string
		for k := range bundle.Data {
			if strings.HasPrefix(k, "secure.") {
				mine = append(mine, k)
			}
		}
		Expect(mine).To(ConsistOf("secure.shop-cert.crt", "secure.shop-cert.key"))
		Expect(bundle.Data).To(HaveKeyWithValue("secure.shop-cert.crt", shopCrt))
		var table corev1.ConfigMap
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: namespace, Name: "tollgate-httproutes"}, &table)).To(Succeed())
		Expect(fmt.Sprint(table.Data, table.BinaryData)).NotTo(ContainSubstring("PRIVATE KEY"))

		By("a ReferenceGrant in the Secret's namespace resolves the cross-namespace reference")
		applyYAML("cert-grant", `apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: gateways-in-secure, namespace: certs}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: secure}]
  to: [{group: "", kind: Secret, name: shared-cert}]
`)
		Eventually(func() string { return listenerConds(ctx)["shared"]["ResolvedRefs"] }, 20*time.Second, 50*time.Millisecond).Should(Equal("True/ResolvedRefs"))

		By("the API server refuses tls.mode Passthrough on an HTTPS listener")
		_, err := kubectlApplyString("passthrough", `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: passthrough, namespace: secure}
spec:
  gatewayClassName: tollgate
  listeners:
  - {name: https, protocol: HTTPS, port: 443, tls: {mode: Passthrough}}
`)
		Expect(err).To(MatchError(ContainSubstring("tls mode must be Terminate for protocol HTTPS")))
	})

	It("serves HTTPRoutes over HTTPS with the certificate chosen by SNI: 200, 200, 429", func() {
		Eventually(func() (httpsResult, error) {
			return httpsGet(tlsAddr, "shop.example.com", "shop.example.com", "/items", "probe", roots)
		}, 20*time.Second, 50*time.Millisecond).Should(And(HaveField("Status", 200), HaveField("CN", "shop-1")), gw.logTail)
		var got []int
		for range 3 {
			r, err := httpsGet(tlsAddr, "shop.example.com", "shop.example.com", "/items", "shop-b", roots)
			Expect(err).NotTo(HaveOccurred())
			got = append(got, r.Status)
		}
		Expect(got).To(Equal([]int{200, 200, 429}))
		r, err := httpsGet(tlsAddr, "shop.example.com", "shop.example.com", "/items", "probe", roots)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Body).To(Equal("web shop.example.com /items"))

		By("over HTTPS too the backend receives the tenant, never the API key nor a client's own tenant header")
		r, err = httpsGet(tlsAddr, "shop.example.com", "shop.example.com", "/items", "probe", roots, "X-Tollgate-Tenant", "shop-b")
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Status).To(Equal(200))
		Expect(r.Header.Values("Echo-X-Api-Key")).To(BeEmpty())
		Expect(r.Header.Values("Echo-X-Tollgate-Tenant")).To(Equal([]string{"probe"}))

		By("a wildcard listener's certificate for a subdomain")
		Eventually(func() (httpsResult, error) {
			return httpsGet(tlsAddr, "api.shared.example.com", "api.shared.example.com", "/", "probe", roots)
		}, 20*time.Second, 50*time.Millisecond).Should(And(HaveField("Status", 200), HaveField("CN", "shared")))

		By("421 for a Host that another listener's certificate serves than the connection's server name")
		r, err = httpsGet(tlsAddr, "api.shared.example.com", "shop.example.com", "/items", "probe", roots)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Status).To(Equal(http.StatusMisdirectedRequest))

		By("no certificate for a name no listener serves; the HTTPS-only route is not served over plain HTTP")
		_, err = httpsGet(tlsAddr, "missing.example.com", "missing.example.com", "/", "probe", roots)
		Expect(err).To(HaveOccurred())
		Expect(sendHost(gw, "shop.example.com", "/items", "probe").status).To(Equal(404))
	})

	It("picks up a rotated certificate for new connections, and keeps the last good one when the Secret turns bad", func() {
		crt2, key2 := certtest.New("shop-2", "shop.example.com")
		Expect(roots.AppendCertsFromPEM(crt2)).To(BeTrue())
		var s corev1.Secret
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: tlsNS, Name: "shop-cert"}, &s)).To(Succeed())
		s.Data = map[string][]byte{corev1.TLSCertKey: crt2, corev1.TLSPrivateKeyKey: key2}
		start := time.Now()
		Expect(k8s.Update(ctx, &s)).To(Succeed())
		Eventually(func() (httpsResult, error) {
			return httpsGet(tlsAddr, "shop.example.com", "shop.example.com", "/", "probe", roots)
		}, 20*time.Second, 20*time.Millisecond).Should(HaveField("CN", "shop-2"), gw.logTail)
		// For the record, not asserted: Secret update to the first new
		// connection with the new certificate, through the controller.
		AddReportEntry("certificate rotation reached new connections", time.Since(start).Round(time.Millisecond).String())

		By("a bad certificate: reported, and the last good one stays in use")
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: tlsNS, Name: "shop-cert"}, &s)).To(Succeed())
		s.Data[corev1.TLSCertKey] = []byte("not a certificate")
		Expect(k8s.Update(ctx, &s)).To(Succeed())
		Eventually(func() string { return listenerConds(ctx)["https"]["ResolvedRefs"] }, 20*time.Second, 50*time.Millisecond).
			Should(Equal("False/InvalidCertificateRef"))
		Expect(listenerMessage(ctx, "https", "ResolvedRefs")).To(ContainSubstring("last good certificate"))
		r, err := httpsGet(tlsAddr, "shop.example.com", "shop.example.com", "/", "probe", roots)
		Expect(err).NotTo(HaveOccurred())
		Expect(r).To(And(HaveField("Status", 200), HaveField("CN", "shop-2")))
	})
})

// kubectlApplyString applies yaml with kubectl and returns its output and
// error (which holds the output).
func kubectlApplyString(name, yaml string) (string, error) {
	path := fmt.Sprintf("%s/%s.yaml", workDir, name)
	Expect(os.WriteFile(path, []byte(yaml), 0o644)).To(Succeed())
	out, err := kubectl("apply", "-f", path)
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, out)
	}
	return out, nil
}
