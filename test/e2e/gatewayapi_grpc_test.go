package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kptr "k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
)

// GRPCRoute and HTTP/2: real grpc-go servers behind three gateway
// processes (--gateway-api --h2c --tls-listen, one membership group, the
// suite's redis-server) that a controller with --gateway-h2c programs;
// grpc-go clients over h2c and TLS; an HTTPRoute to a backend that speaks
// only h2c (appProtocol kubernetes.io/h2c); curl over h2.

const grpcNS = "grpc"

// grpcEcho is grpc.testing.TestService answering as name: UnaryCall
// echoes the payload with the header x-backend: name (a payload "hold"
// waits for the call's end, counted in canceled; the last deadline is
// kept), EmptyCall answers with that header, StreamingOutputCall sends the
// responses asked for, FullDuplexCall echoes each message.
type grpcEcho struct {
	testpb.UnimplementedTestServiceServer
	name     string
	calls    atomic.Int64
	canceled chan struct{}
	deadline atomic.Pointer[time.Time]
}

func (e *grpcEcho) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	e.calls.Add(1)
	if d, ok := ctx.Deadline(); ok {
		e.deadline.Store(&d)
	}
	if string(req.GetPayload().GetBody()) == "hold" {
		<-ctx.Done()
		e.canceled <- struct{}{}
		return nil, ctx.Err()
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", e.name))
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (e *grpcEcho) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", e.name))
	return &testpb.Empty{}, nil
}

func (e *grpcEcho) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for _, p := range req.GetResponseParameters() {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	return nil
}

func (e *grpcEcho) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// startGRPCEcho serves a grpcEcho on ip and returns it with its port.
func startGRPCEcho(ip, name string) (*grpcEcho, int32) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	Expect(err).NotTo(HaveOccurred())
	e := &grpcEcho{name: name, canceled: make(chan struct{}, 16)}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, e)
	go func() { _ = srv.Serve(ln) }()
	DeferCleanup(srv.Stop)
	return e, int32(ln.Addr().(*net.TCPAddr).Port)
}

// startH2COnly serves HTTP/2 without TLS only (no HTTP/1.1) on ip,
// answering with the protocol it received; it returns its port.
func startH2COnly(ip string) int32 {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "h2c-only %s %s", r.Proto, r.URL.Path)
	})}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	DeferCleanup(srv.Close)
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// grpcService is a Service ns/name with one port 50051 (appProtocol
// unless "") and its EndpointSlice with one ready endpoint ip:port.
func grpcService(ctx context.Context, ns, name, appProtocol, ip string, port int32) {
	sp := corev1.ServicePort{Name: "grpc", Port: 50051}
	if appProtocol != "" {
		sp.AppProtocol = kptr.To(appProtocol)
	}
	Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{sp}}})).To(Succeed())
	Expect(k8s.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: kptr.To("grpc"), Port: kptr.To(port), Protocol: kptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: kptr.To(true)}}},
	})).To(Succeed())
}

const grpcGatewayManifest = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: rpc, namespace: grpc}
spec:
  gatewayClassName: tollgate
  listeners:
  - {name: http, protocol: HTTP, port: 80, hostname: "*.rpc.example.com"}
  - name: https
    protocol: HTTPS
    port: 443
    hostname: "*.rpc.example.com"
    tls: {certificateRefs: [{name: rpc-cert}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: echo, namespace: grpc}
spec:
  parentRefs: [{name: rpc}]
  hostnames: [echo.rpc.example.com]
  rules:
  - name: unary
    matches: [{method: {service: grpc.testing.TestService, method: UnaryCall}}]
    backendRefs: [{name: echo-a, port: 50051}]
  - name: canary
    matches: [{method: {service: grpc.testing.TestService, method: EmptyCall}, headers: [{name: x-canary, value: "1"}]}]
    backendRefs: [{name: echo-b, port: 50051}]
  - name: service
    matches: [{method: {service: grpc.testing.TestService}}]
    backendRefs: [{name: echo-a, port: 50051, weight: 3}, {name: echo-b, port: 50051, weight: 1}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: remote, namespace: grpc}
spec:
  parentRefs: [{name: rpc}]
  hostnames: [remote.rpc.example.com]
  rules:
  - backendRefs: [{name: echo-remote, namespace: grpc-backends, port: 50051}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: h2c, namespace: grpc}
spec:
  parentRefs: [{name: rpc}]
  hostnames: [web.rpc.example.com]
  rules:
  - name: h2c
    matches: [{path: {type: PathPrefix, value: /h2c}}]
    backendRefs: [{name: h2c-only, port: 50051}]
  - name: plain
    matches: [{path: {type: PathPrefix, value: /plain}}]
    backendRefs: [{name: h2c-only-plain, port: 50051}]
---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: echo-unary, namespace: grpc}
spec:
  tenant: burst
  targetRef: {group: gateway.networking.k8s.io, kind: GRPCRoute, name: echo, sectionName: unary}
  capacity: 30
  refill: {tokens: 1, period: 168h}
---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: echo-bulk, namespace: grpc}
spec:
  tenant: bulk
  targetRef: {group: gateway.networking.k8s.io, kind: GRPCRoute, name: echo}
  capacity: 1000000
  refillPerSecond: 1000000
`

var _ = Describe("GRPCRoute and HTTP/2", Ordered, Label("e2e"), func() {
	ctx := context.Background()
	var gws []*gatewayProc
	var tlsAddrs []string
	var echoA *grpcEcho
	roots := x509.NewCertPool()
	crt, key := certtest.New("rpc", "*.rpc.example.com")

	// client dials gateway i over h2c or TLS for host.
	client := func(i int, overTLS bool, host string) testpb.TestServiceClient {
		target, creds := strings.TrimPrefix(gws[i].url, "http://"), insecure.NewCredentials()
		if overTLS {
			target, creds = tlsAddrs[i], credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12})
		}
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithAuthority(host))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cc.Close)
		return testpb.NewTestServiceClient(cc)
	}
	call := func(c testpb.TestServiceClient, tenant string, kv ...string) (*status.Status, metadata.MD, metadata.MD) {
		var header, trailer metadata.MD
		cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, append([]string{"x-api-key", tenant}, kv...)...), 20*time.Second)
		defer cancel()
		_, err := c.UnaryCall(cctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hi")}}, grpc.Header(&header), grpc.Trailer(&trailer))
		return status.Convert(err), header, trailer
	}

	BeforeAll(func() {
		ip := hostIP()
		Expect(roots.AppendCertsFromPEM(crt)).To(BeTrue())
		for _, ns := range []string{grpcNS, "grpc-backends"} {
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Annotations: map[string]string{v1alpha1.AnnotationTenants: "*"}}})).To(Succeed())
		}
		ensureGatewayService(ctx)
		var portA, portB, portR int32
		echoA, portA = startGRPCEcho(ip, "echo-a")
		_, portB = startGRPCEcho(ip, "echo-b")
		_, portR = startGRPCEcho(ip, "echo-remote")
		grpcService(ctx, grpcNS, "echo-a", "", ip, portA)
		grpcService(ctx, grpcNS, "echo-b", "", ip, portB)
		grpcService(ctx, "grpc-backends", "echo-remote", "", ip, portR)
		h2cPort := startH2COnly(ip)
		grpcService(ctx, grpcNS, "h2c-only", "kubernetes.io/h2c", ip, h2cPort)
		grpcService(ctx, grpcNS, "h2c-only-plain", "", ip, h2cPort)
		Expect(k8s.Create(ctx, certSecret(grpcNS, "rpc-cert", crt, key))).To(Succeed())
		for i := range 3 {
			name := fmt.Sprintf("gw-grpc-%d", i+1)
			listen, admin, tlsAddr := fmt.Sprintf("127.0.0.1:%d", freePort()), fmt.Sprintf("127.0.0.1:%d", freePort()), fmt.Sprintf("127.0.0.1:%d", freePort())
			gw := &gatewayProc{proc: startProc(name, binary, "gateway", "--kubeconfig", kubeconfig, "--snapshot-namespace", namespace,
				"--gateway-api", "--h2c", "--tls-listen", tlsAddr, "--redis-addr", redisSrv.addr(), "--listen", listen, "--admin-listen", admin,
				"--pod-name", name, "--membership-group", "tollgate-grpc", "--lease-duration", "3s",
				"--identity", "header-is-tenant", "--redis-timeout", "2s"), url: "http://" + listen, admin: "http://" + admin}
			DeferCleanup(gw.stop)
			gws, tlsAddrs = append(gws, gw), append(tlsAddrs, tlsAddr)
		}
		for _, gw := range gws {
			gw.waitReady()
		}
		applyYAML("gatewayclass", "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: tollgate}\nspec: {controllerName: tollgate.dev/gateway-controller}\n")
		applyYAML("grpc-gateway", grpcGatewayManifest)
	})

	It("reports the GRPCRoute features, the listeners' kinds and the GRPCRoutes' statuses", func() {
		Eventually(func(g Gomega) {
			var c gwv1.GatewayClass
			g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tollgate"}, &c)).To(Succeed())
			var names []string
			for _, f := range c.Status.SupportedFeatures {
				names = append(names, string(f.Name))
			}
			g.Expect(names).To(ContainElements("GRPCRoute", "GRPCRouteNamedRouteRule", "HTTPRouteBackendProtocolH2C"))
			var gw gwv1.Gateway
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: grpcNS, Name: "rpc"}, &gw)).To(Succeed())
			g.Expect(gw.Status.Listeners).To(HaveLen(2))
			for _, l := range gw.Status.Listeners {
				g.Expect(l.SupportedKinds).To(ContainElement(HaveField("Kind", gwv1.Kind("GRPCRoute"))), string(l.Name))
				g.Expect(l.AttachedRoutes).To(BeEquivalentTo(3), string(l.Name))
				g.Expect(condition(l.Conditions, "Programmed")).To(Equal("True/Programmed"), string(l.Name))
			}
			var rt gwv1.GRPCRoute
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: grpcNS, Name: "echo"}, &rt)).To(Succeed())
			g.Expect(rt.Status.Parents).To(HaveLen(1))
			g.Expect(condition(rt.Status.Parents[0].Conditions, "Accepted")).To(Equal("True/Accepted"))
			g.Expect(condition(rt.Status.Parents[0].Conditions, "ResolvedRefs")).To(Equal("True/ResolvedRefs"))
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: grpcNS, Name: "remote"}, &rt)).To(Succeed())
			g.Expect(condition(rt.Status.Parents[0].Conditions, "ResolvedRefs")).To(Equal("False/RefNotPermitted"))
			var rule v1alpha1.RateLimitRule
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: grpcNS, Name: "echo-unary"}, &rule)).To(Succeed())
			g.Expect(condition(rule.Status.Conditions, "Ready")).To(Equal("True/Ready"))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		var rule v1alpha1.RateLimitRule
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: grpcNS, Name: "echo-unary"}, &rule)).To(Succeed())
		for _, gw := range gws {
			Eventually(func() float64 { return metric(gw.admin+"/metrics", "tollgate_gateway_snapshot_version") }, 20*time.Second, 20*time.Millisecond).
				Should(BeNumerically(">=", rule.Status.PublishedVersion))
		}
	})

	It("serves unary, server-streaming and bidirectional calls over h2c and TLS, by method, header and weight", func() {
		for i := range gws {
			for _, overTLS := range []bool{false, true} {
				c := client(i, overTLS, "echo.rpc.example.com")
				Eventually(func() codes.Code { st, _, _ := call(c, "probe"); return st.Code() }, 20*time.Second, 50*time.Millisecond).Should(Equal(codes.OK), gws[i].logTail)
				st, header, _ := call(c, "probe")
				Expect(st.Code()).To(Equal(codes.OK))
				Expect(header.Get("x-backend")).To(Equal([]string{"echo-a"}))
				Expect(header.Get("x-ratelimit-limit")).To(Equal([]string{"20"}))

				stream, err := c.StreamingOutputCall(metadata.AppendToOutgoingContext(ctx, "x-api-key", "probe"),
					&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1}, {Size: 2}}})
				Expect(err).NotTo(HaveOccurred())
				for n := 1; n <= 2; n++ {
					msg, err := stream.Recv()
					Expect(err).NotTo(HaveOccurred())
					Expect(msg.GetPayload().GetBody()).To(HaveLen(n))
				}
				_, err = stream.Recv()
				Expect(errors.Is(err, io.EOF)).To(BeTrue(), fmt.Sprint(err))

				bidi, err := c.FullDuplexCall(metadata.AppendToOutgoingContext(ctx, "x-api-key", "probe"))
				Expect(err).NotTo(HaveOccurred())
				for n := range 2 {
					body := []byte(fmt.Sprintf("ping %d", n))
					Expect(bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})).To(Succeed())
					msg, err := bidi.Recv()
					Expect(err).NotTo(HaveOccurred())
					Expect(msg.GetPayload().GetBody()).To(Equal(body))
				}
				Expect(bidi.CloseSend()).To(Succeed())
			}
		}
		By("a header match: EmptyCall with x-canary: 1 goes to echo-b; without it the service rule splits 3:1")
		c := client(0, false, "echo.rpc.example.com")
		empty := func(kv ...string) string {
			var header metadata.MD
			_, err := c.EmptyCall(metadata.AppendToOutgoingContext(ctx, append([]string{"x-api-key", "bulk"}, kv...)...), &testpb.Empty{}, grpc.Header(&header))
			Expect(err).NotTo(HaveOccurred())
			return strings.Join(header.Get("x-backend"), ",")
		}
		Expect(empty("x-canary", "1")).To(Equal("echo-b"))
		seen := map[string]int{}
		for range 400 {
			seen[empty()]++
		}
		fmt.Fprintf(GinkgoWriter, "GRPCRoute weights 3:1 over 400 calls: %v\n", seen)
		Expect(seen).To(HaveLen(2))
		Expect(seen["echo-b"]).To(BeNumerically("~", 100, 30))
	})

	It("holds a limit on a GRPCRoute rule exactly across the three gateways, over h2c and TLS, and answers RESOURCE_EXHAUSTED", func() {
		const calls = 150
		var ok, exhausted atomic.Int64
		var wg sync.WaitGroup
		clients := map[int]testpb.TestServiceClient{}
		for i := range 6 {
			clients[i] = client(i%3, i >= 3, "echo.rpc.example.com")
		}
		gate := make(chan struct{})
		for n := range calls {
			wg.Go(func() {
				<-gate
				st, _, trailer := call(clients[n%6], "burst")
				switch st.Code() {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					if st.Message() != "rate limit exceeded" || len(trailer.Get("retry-after")) != 1 || trailer.Get("x-ratelimit-remaining")[0] != "0" {
						Fail(fmt.Sprintf("RESOURCE_EXHAUSTED %q with trailer %v", st.Message(), trailer))
					}
					exhausted.Add(1)
				default:
					Fail(fmt.Sprintf("call: %v", st))
				}
			})
		}
		close(gate)
		wg.Wait()
		AddReportEntry("GRPCRoute rule limit of 30 over 3 gateways", fmt.Sprintf("%d of %d admitted", ok.Load(), calls))
		Expect(ok.Load()).To(BeEquivalentTo(30))
		Expect(exhausted.Load()).To(BeEquivalentTo(calls - 30))
		By("a call without an API key: UNAUTHENTICATED")
		_, err := client(1, true, "echo.rpc.example.com").UnaryCall(ctx, &testpb.SimpleRequest{})
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated))
	})

	It("propagates the client's deadline and cancellation to the backend", func() {
		c := client(2, true, "echo.rpc.example.com")
		before := time.Now()
		cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-api-key", "probe"), 5*time.Second)
		defer cancel()
		_, err := c.UnaryCall(cctx, &testpb.SimpleRequest{})
		Expect(err).NotTo(HaveOccurred())
		d := echoA.deadline.Load()
		Expect(d).NotTo(BeNil())
		Expect(*d).To(BeTemporally("~", before.Add(5*time.Second), time.Second))
		cctx, cancel = context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-api-key", "probe"), 300*time.Millisecond)
		defer cancel()
		_, err = c.UnaryCall(cctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hold")}})
		Expect(status.Code(err)).To(Equal(codes.DeadlineExceeded))
		Eventually(echoA.canceled, 10*time.Second).Should(Receive())
	})

	It("refuses a cross-namespace gRPC backend until a ReferenceGrant from GRPCRoutes allows it", func() {
		c := client(0, false, "remote.rpc.example.com")
		st, _, _ := call(c, "probe")
		Expect(st.Code()).To(Equal(codes.Unavailable), st.Message())
		applyYAML("grpc-grant", `apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: grpc-routes, namespace: grpc-backends}
spec:
  from: [{group: gateway.networking.k8s.io, kind: GRPCRoute, namespace: grpc}]
  to: [{group: "", kind: Service, name: echo-remote}]
`)
		Eventually(func() string {
			var rt gwv1.GRPCRoute
			Expect(k8s.Get(ctx, types.NamespacedName{Namespace: grpcNS, Name: "remote"}, &rt)).To(Succeed())
			return condition(rt.Status.Parents[0].Conditions, "ResolvedRefs")
		}, 20*time.Second, 50*time.Millisecond).Should(Equal("True/ResolvedRefs"))
		Eventually(func() codes.Code { st, _, _ := call(c, "probe"); return st.Code() }, 20*time.Second, 50*time.Millisecond).Should(Equal(codes.OK))
	})

	It("speaks h2c to a Service port with appProtocol kubernetes.io/h2c, and HTTP/2 to clients over TLS (Go and curl)", func() {
		gw := gws[0]
		Eventually(func() string { return sendHost(gw, "web.rpc.example.com", "/h2c/x", "probe").body }, 20*time.Second, 50*time.Millisecond).
			Should(Equal("h2c-only HTTP/2.0 /h2c/x"), gw.logTail)
		By("the same backend without the appProtocol gets HTTP/1.1, which it refuses: 502")
		Expect(sendHost(gw, "web.rpc.example.com", "/plain", "probe").status).To(Equal(502))

		By("a Go client over TLS negotiates h2")
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "web.rpc.example.com"}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+tlsAddrs[0]+"/h2c/tls", nil)
		req.Host = "web.rpc.example.com"
		req.Header.Set("X-Api-Key", "probe")
		res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		Expect(res.Proto).To(Equal("HTTP/2.0"))
		Expect(string(body)).To(Equal("h2c-only HTTP/2.0 /h2c/tls"))

		By("curl --http2 over TLS")
		curl, err := exec.LookPath("curl")
		if err != nil {
			Skip("no curl")
		}
		if out, _ := exec.Command(curl, "--version").Output(); !strings.Contains(string(out), "HTTP2") {
			Skip("this curl has no HTTP/2")
		}
		ca := workDir + "/rpc-ca.pem"
		Expect(os.WriteFile(ca, crt, 0o644)).To(Succeed())
		_, port, _ := net.SplitHostPort(tlsAddrs[1])
		out, err := exec.Command(curl, "-sS", "-i", "--http2", "--cacert", ca, "--resolve", "web.rpc.example.com:"+port+":127.0.0.1",
			"-H", "X-Api-Key: probe", "https://web.rpc.example.com:"+port+"/h2c/curl").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).To(HavePrefix("HTTP/2 200"))
		Expect(strings.ToLower(string(out))).To(ContainSubstring("x-ratelimit-limit: 20"))
		Expect(string(out)).To(HaveSuffix("h2c-only HTTP/2.0 /h2c/curl"))
	})
})
