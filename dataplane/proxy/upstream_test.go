package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/internal/lib/ratelog"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// connUpstream is a real upstream that counts the connections opened to it
// and those closed.
type connUpstream struct {
	*httptest.Server
	opened, closed atomic.Int64
}

func newConnUpstream(t *testing.T) *connUpstream {
	u := &connUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.opened.Add(1)
		case http.StateClosed:
			u.closed.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// routeTable is a routes file of one route to upstream with timeout.
func routeTable(t *testing.T, upstream, timeout string) (*routes.Table, routing.Route) {
	t.Helper()
	table, err := routes.Parse([]byte(fmt.Sprintf("routes:\n  - id: r\n    pathPrefix: /\n    upstream: %s\n    timeout: %s\n", upstream, timeout)))
	if err != nil {
		t.Fatal(err)
	}
	return table, table.Lookup("GET", "", "/").Route
}

// forwardOnce sends GET / through up, fails on anything but 200, and
// returns once the transport has put the connection back in its idle pool
// (which it does on a goroutine of its own after the body's end).
func forwardOnce(t *testing.T, up *upstream) {
	t.Helper()
	idle := make(chan error, 1)
	req := httptest.NewRequest("GET", "/", nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{PutIdleConn: func(err error) { idle <- err }}))
	w := httptest.NewRecorder()
	up.proxy.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	select {
	case err := <-idle:
		if err != nil {
			t.Fatalf("the connection was not kept idle: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not return to the idle pool within 10s")
	}
}

func (u *upstreams) numTransports() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.transports)
}

// TestTransportsBoundedOnRouteChurn: route authors choose timeouts, and
// every reload may bring new ones. The transports (one per timeout, each
// with its pool of idle connections) are those of the current route table
// plus the default, however many tables came before; a dropped transport's
// idle connections are closed. A reload that keeps a timeout keeps its
// transport and its connections.
func TestTransportsBoundedOnRouteChurn(t *testing.T) {
	srv := newConnUpstream(t)
	u := newUpstreams(metrics.NewGateway(prometheus.NewRegistry()), ratelog.New(logr.Discard(), time.Second), 30*time.Second, DefaultTenantHeader)
	t.Cleanup(u.closeIdle)
	const tables = 50
	for i := 1; i <= tables; i++ {
		table, route := routeTable(t, srv.URL, fmt.Sprintf("%dms", i*100)) // never the default, 30s
		forwardOnce(t, u.get(table, route))
	}
	if n := u.numTransports(); n > 2 {
		t.Fatalf("%d transports after %d route tables with one timeout each, want at most 2 (the current table's and the default)", n, tables)
	}
	// Each table's request left an idle connection in its transport; all
	// but the current table's are closed.
	deadline := time.Now().Add(10 * time.Second)
	for srv.closed.Load() < tables-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections of dropped transports closed", srv.closed.Load(), tables-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if opened, closed := srv.opened.Load(), srv.closed.Load(); opened != tables || closed != tables-1 {
		t.Fatalf("%d connections opened, %d closed; want %d and %d", opened, closed, tables, tables-1)
	}

	// A reload with the same timeout: the same transport, the same
	// connection.
	table, route := routeTable(t, srv.URL, fmt.Sprintf("%dms", tables*100))
	forwardOnce(t, u.get(table, route))
	if opened := srv.opened.Load(); opened != tables {
		t.Fatalf("a reload with an unchanged timeout opened a new connection (%d in all)", opened)
	}
}

// TestGatewayAPITransportsBounded: the same bound for HTTPRoute tables,
// whose authors choose timeouts.backendRequest.
func TestGatewayAPITransportsBounded(t *testing.T) {
	var table *httproutes.Table
	h := New(Options{Router: func() routing.Router { return table }, Metrics: metrics.NewGateway(prometheus.NewRegistry()),
		Logger: logr.Discard(), UpstreamTimeout: 30 * time.Second})
	t.Cleanup(h.Close)
	const tables = 50
	for i := 1; i <= tables; i++ {
		table = httproutes.New(&routetable.Table{Rules: []routetable.Rule{{ID: "shop_web__0", Route: "shop/web",
			Matches: []routetable.Match{{PathType: routetable.PathPrefix, PathValue: "/"}}, BackendTimeoutMs: int64(i) * 100}}})
		h.upstreams.get(table, table.Rules()[0])
	}
	if n := h.upstreams.numTransports(); n > 2 {
		t.Fatalf("%d transports after %d HTTPRoute tables with one backend timeout each, want at most 2", n, tables)
	}
}

// TestErrorHandlerPastTheCallsDeadline: a gRPC call whose grpc-timeout
// passed while it was forwarded ends DEADLINE_EXCEEDED (504) whatever error
// the upstream's side gave first: an upstream that honours the forwarded
// grpc-timeout resets the stream at the same moment the gateway cancels it,
// and its reset must not turn the answer into UNAVAILABLE (502). A failure
// before the deadline stays a 502.
func TestErrorHandlerPastTheCallsDeadline(t *testing.T) {
	u := newUpstreams(metrics.NewGateway(prometheus.NewRegistry()), ratelog.New(logr.Discard(), time.Second), 30*time.Second, DefaultTenantHeader)
	var classes classCounters
	for i := range classes {
		classes[i] = prometheus.NewCounter(prometheus.CounterOpts{Name: fmt.Sprintf("c%d", i)})
	}
	handle := u.errorHandler("r", &classes, prometheus.NewCounter(prometheus.CounterOpts{Name: "t"}))
	reset := errors.New("stream error: stream ID 3; CANCEL; received from peer")
	for _, tc := range []struct {
		name string
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		want string
	}{
		{"past the deadline", func(c context.Context) (context.Context, context.CancelFunc) {
			return context.WithDeadline(c, time.Now().Add(-time.Millisecond))
		}, "4"},
		{"past the deadline, its timer not run yet", func(c context.Context) (context.Context, context.CancelFunc) {
			return lateTimer{c, time.Now().Add(-time.Millisecond)}, func() {}
		}, "4"},
		{"before the deadline", func(c context.Context) (context.Context, context.CancelFunc) {
			return context.WithDeadline(c, time.Now().Add(time.Hour))
		}, "14"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/pkg.Svc/Call", nil)
			req.Header.Set("Content-Type", "application/grpc")
			req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
			ctx, cancel := tc.ctx(req.Context())
			defer cancel()
			req = req.WithContext(ctx)
			rec := httptest.NewRecorder()
			handle(rec, req, reset)
			if got := rec.Result().Trailer.Get("Grpc-Status") + rec.Header().Get("Grpc-Status"); got != tc.want {
				t.Fatalf("grpc-status %q, want %q", got, tc.want)
			}
		})
	}
}

// lateTimer is a context whose deadline has passed but whose timer has not
// fired yet, as on a loaded machine.
type lateTimer struct {
	context.Context
	d time.Time
}

func (l lateTimer) Deadline() (time.Time, bool) { return l.d, true }
