package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/httpguard"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/internal/lib/ratelog"
)

const logInterval = 10 * time.Second

// upstream is the forwarding state of one route: its reverse proxy (or its
// redirect) and its metric series, resolved once so the request path does
// no label lookups.
type upstream struct {
	// id is the route id (routing.Route.RouteID).
	id        string
	proxy     http.Handler
	decisions *metrics.DecisionCounters
	// timeout is the route's response-header timeout (the default's for
	// a route without one); it also bounds the read of an answer after
	// its client left (drain.go).
	timeout time.Duration
	// forwardAuthorization: the route forwards the Authorization header
	// even when the identity came from it.
	forwardAuthorization bool
	// identity is the route's identity mode (required, optional, none).
	identity routing.Identity
}

// numSources is the number of limiter.Source values; sourceName labels one.
const numSources = int(limiter.SourceFailClosed) + 1

func sourceName(i int) string { return limiter.Source(i).String() }

func (u *upstream) count(result metrics.Result, src limiter.Source) {
	u.decisions.Inc(result, int(src))
}

// upstreams builds and caches the upstream of every route of the current
// route table (the routing.Router in force). Transports are shared across reloads (keyed by response-header
// timeout) so a route reload keeps the connection pools; a new table drops
// those of timeouts it no longer has (retain), so route churn cannot grow
// them without bound.
type upstreams struct {
	metrics *metrics.Gateway
	log     *ratelog.Logger
	timeout time.Duration // of routes without one
	// tenantHeader (canonical) carries the tenant to the upstream.
	tenantHeader string
	cur          perTable[routing.Router, routing.Route]

	mu         sync.Mutex
	transports map[time.Duration]*upstreamTransport
	buffers    bufferPool
}

// perTable caches the upstreams of the current route table T, one per
// route K, built on first use; a new table (a reload) starts a new set, so a
// changed route gets a new proxy.
type perTable[T, K comparable] struct {
	cur atomic.Pointer[tableSet[T]]
	// swapped, if set, sees each table that takes the place of another,
	// once, on the request path of its first request.
	swapped func(T)
}

type tableSet[T comparable] struct {
	table T
	by    sync.Map // K -> *upstream
}

// get returns the upstream of key in table, built by build on first use.
func (c *perTable[T, K]) get(table T, key K, build func() *upstream) *upstream {
	s := c.cur.Load()
	for s == nil || s.table != table {
		next := &tableSet[T]{table: table}
		if c.cur.CompareAndSwap(s, next) {
			s = next
			if c.swapped != nil {
				c.swapped(table)
			}
			break
		}
		s = c.cur.Load()
	}
	if up, ok := s.by.Load(key); ok {
		return up.(*upstream)
	}
	up, _ := s.by.LoadOrStore(key, build())
	return up.(*upstream)
}

func newUpstreams(m *metrics.Gateway, log *ratelog.Logger, timeout time.Duration, tenantHeader string) *upstreams {
	u := &upstreams{metrics: m, log: log, timeout: timeout, tenantHeader: tenantHeader, transports: map[time.Duration]*upstreamTransport{}}
	u.cur.swapped = func(t routing.Router) { u.retain(t.HeaderTimeouts()) }
	return u
}

// get returns the upstream of route, a route of router.
func (u *upstreams) get(router routing.Router, route routing.Route) *upstream {
	return u.cur.get(router, route, func() *upstream {
		up := u.build(route)
		up.forwardAuthorization = route.ForwardsAuthorization()
		up.identity = route.Identity()
		return up
	})
}

// classCounters counts a route's responses by status class: index 1 for
// 1xx to 5 for 5xx.
type classCounters [6]prometheus.Counter

// build makes the upstream of route: its reverse proxy, with the transport
// for its response-header timeout and its request timeout, or its
// redirect; and its counters.
func (u *upstreams) build(route routing.Route) *upstream {
	id := route.RouteID()
	if redirect := route.Redirect(); redirect != nil {
		// The route's metric series as for a forwarding route; the reverse
		// proxy is replaced by the redirect.
		up := u.buildWith(id, 0, nil)
		responses := u.metrics.Responses.WithLabelValues(id, "3xx", metrics.OriginGateway)
		up.proxy = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			responses.Inc()
			redirect(w, r)
		})
		return up
	}
	up := u.buildWith(id, route.HeaderTimeout(), route.Rewrite)
	up.proxy = withGRPCDeadline(up.proxy)
	if timeout := route.RequestTimeout(); timeout > 0 {
		next := up.proxy
		up.proxy = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), timeout)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	return up
}

// buildWith builds the upstream of route id: a reverse proxy with rewrite
// (then the X-Forwarded headers, then forwardIdentity), the response-header
// timeout (0: the default) and the route's counters.
func (u *upstreams) buildWith(id string, timeout time.Duration, rewrite func(*httputil.ProxyRequest)) *upstream {
	up := &upstream{id: id, decisions: u.metrics.DecisionCounters(id, numSources, sourceName)}
	// The upstream's answers, and the 502/504 written when it failed; a
	// client too slow to send its body gets the gateway's own 408.
	var classes classCounters
	for c := 1; c <= 5; c++ {
		classes[c] = u.metrics.Responses.WithLabelValues(id, codeClass(c*100), metrics.OriginUpstream)
	}
	clientTimeout := u.metrics.Responses.WithLabelValues(id, codeClass(http.StatusRequestTimeout), metrics.OriginGateway)
	// The gateway's own 5xx of the route, at 0 before the first: a counter
	// born at 1 shows no increase to Prometheus's rate().
	u.metrics.Responses.WithLabelValues(id, codeClass(http.StatusServiceUnavailable), metrics.OriginGateway)
	observe := u.metrics.UpstreamDuration.WithLabelValues(id)
	u.mu.Lock()
	if timeout == 0 {
		timeout = u.timeout
	}
	transport := u.transport(timeout)
	u.mu.Unlock()
	up.timeout = timeout
	up.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if rewrite != nil { // nil: a redirect, which forwards nothing
				rewrite(pr)
			}
			pr.SetXForwarded()
			u.forwardIdentity(pr)
		},
		Transport: timedTransport{base: transport, observe: observe},
		// No periodic flush: ReverseProxy already flushes every write of a
		// streamed response (unknown length, or text/event-stream), and a
		// response of known length then goes out in one write with its
		// headers. (-1 here cost a timer goroutine and a separate write
		// for the headers of every response: ~17 % of the gateway's CPU in
		// the bench profile.)
		BufferPool:     &u.buffers,
		ModifyResponse: classes.modifyResponse,
		ErrorHandler:   u.errorHandler(id, &classes, clientTimeout),
	}
	return up
}

// forwardIdentity replaces what the client said about who it is with what
// the gateway found: the API key never leaves the gateway, and the tenant
// header holds the tenant the handler put on the inbound request (after
// removing the client's copy). It runs after the route's rewrite, so no
// RequestHeaderModifier sets either header, and after the reverse proxy
// dropped the hop-by-hop headers, so a client that names the tenant header
// in Connection does not remove it.
func (u *upstreams) forwardIdentity(pr *httputil.ProxyRequest) {
	pr.Out.Header.Del(identity.HeaderName)
	if t := pr.In.Header[u.tenantHeader]; len(t) > 0 {
		pr.Out.Header[u.tenantHeader] = t
	} else {
		delete(pr.Out.Header, u.tenantHeader)
	}
}

// modifyResponse prepares an upstream's response for the client: it drops
// the headers the gateway owns and counts the response.
func (classes *classCounters) modifyResponse(res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The connection carries another protocol from now on.
		if c := httpguard.FromContext(res.Request.Context()); c != nil {
			c.Passthrough()
		}
	}
	for _, h := range ownHeaders {
		res.Header.Del(h)
	}
	if m := meterOf(res.Request.Context()); m != nil {
		m.start(res)
	}
	classes[min(max(res.StatusCode/100, 1), 5)].Inc()
	return nil
}

// errorHandler answers the requests of route whose forwarding failed: 408
// when the client's body came too slowly (counted by clientTimeout), 504
// when the upstream timed out or the request's own deadline passed, 502
// otherwise (counted in classes, against the upstream), and nothing when
// the client went away.
func (u *upstreams) errorHandler(route string, classes *classCounters, clientTimeout prometheus.Counter) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, req *http.Request, err error) {
		if b, ok := req.Context().Value(bodyKey{}).(*deadlineBody); ok && b.timedOut.Load() {
			// The client, not the upstream, was too slow.
			clientTimeout.Inc()
			w.Header().Set("Connection", "close")
			writeError(w, req, http.StatusRequestTimeout, "request body not received in time")
			return
		}
		if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
			return // the client went away; nobody reads an answer
		}
		status, msg := http.StatusBadGateway, "upstream unavailable"
		var ne net.Error
		// Past the request's own deadline (a gRPC call's grpc-timeout) the
		// answer is a timeout whatever the upstream said first: an upstream
		// honouring the same deadline resets the stream at that moment.
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) || pastDeadline(req.Context()) {
			status, msg = http.StatusGatewayTimeout, "upstream timed out"
		}
		u.log.Error(err, "upstream request failed", "route", route, "status", status)
		classes[status/100].Inc()
		writeError(w, req, status, msg)
	}
}

// pastDeadline reports whether ctx's deadline has passed: its timer fired,
// or is due and has not run yet (a loaded machine runs timers late, and
// the upstream's own timer for the same deadline may win).
func pastDeadline(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// writeError writes a gateway answer to a forwarded request whose
// forwarding failed: a small JSON body, or to a gRPC call its grpc-status.
func writeError(w http.ResponseWriter, req *http.Request, status int, msg string) {
	if IsGRPC(req) {
		WriteGRPCStatus(w, status, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":` + strconv.Quote(msg) + "}\n"))
}

// transport returns the shared transport for a response-header timeout. The
// caller holds u.mu.
func (u *upstreams) transport(timeout time.Duration) *upstreamTransport {
	if t, ok := u.transports[timeout]; ok {
		return t
	}
	t := &upstreamTransport{http1: NewTransport(timeout), h2c: NewH2CTransport(timeout)}
	u.transports[timeout] = t
	return t
}

// upstreamTransport sends the requests of the routes of one
// response-header timeout: over HTTP/1.1 (or HTTP/2 to an https upstream
// that offers it by ALPN), or over HTTP/2 without TLS to an upstream the
// route's Rewrite addressed as routing.SchemeH2C.
type upstreamTransport struct {
	http1, h2c *http.Transport
}

func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != routing.SchemeH2C {
		return t.http1.RoundTrip(req)
	}
	// A shallow copy with an http URL: a RoundTripper does not change
	// its request.
	out, u := *req, *req.URL
	u.Scheme = "http"
	out.URL = &u
	return t.h2c.RoundTrip(&out)
}

// CloseIdleConnections closes the idle connections of both transports.
func (t *upstreamTransport) CloseIdleConnections() {
	t.http1.CloseIdleConnections()
	t.h2c.CloseIdleConnections()
}

// retain keeps the transports of the timeouts in keep (0: the default),
// the current table's, and the default's; it drops the others and closes
// their idle connections. A proxy of an older table that still holds a
// dropped transport (a request in flight) keeps using it; the connections
// it returns idle close after the transport's IdleConnTimeout.
func (u *upstreams) retain(keep []time.Duration) {
	want := map[time.Duration]bool{u.timeout: true}
	for _, d := range keep {
		if d == 0 {
			d = u.timeout
		}
		want[d] = true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for d, t := range u.transports {
		if !want[d] {
			t.CloseIdleConnections()
			delete(u.transports, d)
		}
	}
}

// NewTransport is the gateway's transport to upstreams, with a response
// header timeout (the benchmark's bare reverse proxy uses it too). It does
// not ask for gzip on its own (DisableCompression): an upstream receives the
// client's Accept-Encoding, or none, and its answer reaches the client as
// it was sent. (Go's default adds Accept-Encoding: gzip to a request
// without one and decompresses the answer, dropping its Content-Encoding.)
func NewTransport(responseHeaderTimeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // the gateway talks to upstreams directly
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: responseHeaderTimeout,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true,
	}
}

// NewH2CTransport is NewTransport for upstreams that speak HTTP/2 without
// TLS (h2c with prior knowledge: gRPC servers, Services whose port says
// appProtocol kubernetes.io/h2c), for http URLs. Requests share a
// connection per upstream, opening another when its streams are all in
// use; a connection silent for 30 s is pinged, and closed when the ping
// goes unanswered for 15 s (a dead upstream does not hold its streams).
func NewH2CTransport(responseHeaderTimeout time.Duration) *http.Transport {
	t := NewTransport(responseHeaderTimeout)
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	return t
}

func (u *upstreams) closeIdle() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, t := range u.transports {
		t.CloseIdleConnections()
	}
}

// timedTransport observes the time to response headers.
type timedTransport struct {
	base    http.RoundTripper
	observe prometheus.Observer
}

func (t timedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	res, err := t.base.RoundTrip(req)
	t.observe.Observe(time.Since(start).Seconds())
	return res, err
}

// bufferPool recycles the 32 KiB copy buffers of the reverse proxies.
type bufferPool struct{ p sync.Pool }

// NewBufferPool returns a pool of copy buffers like the one the gateway's
// reverse proxies use, for a bare proxy measured against them.
func NewBufferPool() httputil.BufferPool { return new(bufferPool) }

func (b *bufferPool) Get() []byte {
	if v := b.p.Get(); v != nil {
		return *v.(*[]byte)
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
