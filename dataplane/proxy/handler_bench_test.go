package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// The gateway's hot path without Redis: rule lookup in a 100,000-rule
// snapshot, identity, bucket and a local decision (BenchmarkDecide), and the
// whole handler with a rejection (BenchmarkHandlerReject, no upstream) or a
// forward to a loopback upstream (BenchmarkHandlerForward, next to its
// floor BenchmarkBareForward; BenchmarkHandlerForwardHTTPRoute through an
// HTTPRoute rule instead of a routes-file route).
//
//	go test -run '^$' -bench . -benchmem ./dataplane/proxy/

func newEngine(b *testing.B) *decision.Engine {
	var rs []snapshot.Rule
	for i := range 100_000 {
		rs = append(rs, snapshot.Rule{Tenant: fmt.Sprintf("tenant-%d", i), Route: "create-order", Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000})
	}
	rs = append(rs, snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1, RefillTokens: 1, RefillPeriodMs: 3600_000})
	store := rules.NewStore(snapshot.Rule{Tenant: "*", Route: "*", Capacity: 20, RefillTokens: 10, RefillPeriodMs: 1000})
	store.Replace(snapshot.Build(rs, 1))
	return decision.New(decision.Options{Rules: store, Limiter: limiter.NewLocal(limiter.LocalOptions{})})
}

func BenchmarkDecide(b *testing.B) {
	e := newEngine(b)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if d, _, _ := e.Decide(ctx, "tenant-4242", "create-order", 1); !d.Allowed {
			b.Fatal("rejected")
		}
	}
}

// newHandler is a handler with one route, POST /orders to upstream, in a
// routes file.
func newHandler(b *testing.B, upstream string) *proxy.Handler {
	table, err := routes.Parse([]byte("routes:\n  - id: create-order\n    methods: [POST]\n    path: /orders\n    upstream: " + upstream + "\n"))
	if err != nil {
		b.Fatal(err)
	}
	return routerHandler(b, table)
}

// routerHandler is the benchmarks' handler for router.
func routerHandler(b *testing.B, router routing.Router) *proxy.Handler {
	h := proxy.New(proxy.Options{
		Router:   func() routing.Router { return router },
		Decider:  newEngine(b),
		Identity: identity.Direct{},
		Metrics:  metrics.NewGateway(prometheus.NewRegistry()),
		Logger:   logr.Discard(),
	})
	b.Cleanup(h.Close)
	return h
}

func BenchmarkHandlerReject(b *testing.B) {
	h := newHandler(b, "http://127.0.0.1:1")
	req := httptest.NewRequest("POST", "/orders", nil)
	req.Header.Set("X-Api-Key", "unknown-tenant") // the *,* rule: one token, then 429
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
	}
}

func BenchmarkHandlerForward(b *testing.B) {
	up := okUpstream(b)
	forwardLoop(b, newHandler(b, up.URL), "tenant-4242")
}

// BenchmarkHandlerForwardHTTPRoute is BenchmarkHandlerForward in Gateway
// API mode: the route is an HTTPRoute rule (POST /orders, one backend
// with one endpoint, the loopback upstream), so routing picks the endpoint
// per request.
func BenchmarkHandlerForwardHTTPRoute(b *testing.B) {
	up := okUpstream(b)
	table := httproutes.New(&routetable.Table{Rules: []routetable.Rule{{
		ID: "create-order", Route: "shop/orders",
		Matches:  []routetable.Match{{PathType: routetable.PathExact, PathValue: "/orders", Method: "POST"}},
		Backends: []routetable.Backend{{Name: "shop/orders:8080", Weight: 1, Endpoints: []string{strings.TrimPrefix(up.URL, "http://")}}},
	}}})
	forwardLoop(b, routerHandler(b, table), "tenant-4242")
}

// okUpstream is a loopback upstream that answers "ok".
func okUpstream(b testing.TB) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	b.Cleanup(up.Close)
	return up
}

// forwardLoop sends POST /orders with key through h for the benchmark,
// failing on anything but 200.
func forwardLoop(b *testing.B, h http.Handler, key string) {
	req := httptest.NewRequest("POST", "/orders", nil)
	req.Header.Set("X-Api-Key", key)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkBareForward is BenchmarkHandlerForward's floor: a bare
// httputil.ReverseProxy with the gateway's transport and copy buffers to
// the same kind of upstream, so that the difference is the handler's own
// (routing, identity, the decision, headers, metrics).
func BenchmarkBareForward(b *testing.B) {
	u, err := url.Parse(okUpstream(b).URL)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = proxy.NewTransport(30 * time.Second)
	rp.BufferPool = proxy.NewBufferPool()
	forwardLoop(b, rp, "tenant-4242")
}
