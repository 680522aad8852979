package engineeval

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/httpguard"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
)

// The tests run every behaviour through two bare proxies on real sockets:
// "net/http", the engine the gateway uses, set up as the gateway sets it up
// (httputil.ReverseProxy with proxy.NewTransport, the http.Server's
// timeouts, httpguard's listener), and "fasthttp", FastProxy. Each test
// states what each engine does; the net/http half shows the test can tell
// the difference, the fasthttp half records fasthttp v1.78.0's behaviour
// and fails if it changes.

// engine starts a bare proxy to upstream with a response(-header) timeout
// and returns its address.
type engine struct {
	name  string
	start func(t *testing.T, upstream string, timeout time.Duration) string
}

var engines = []engine{{"net/http", startNetHTTP}, {"fasthttp", startFast}}

// startNetHTTP serves net/http as the gateway does (dataplane/gateway
// serve.go, dataplane/proxy upstream.go), without the limiter.
func startNetHTTP(t *testing.T, upstream string, timeout time.Duration) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = proxy.NewTransport(timeout)
	rp.ModifyResponse = func(res *http.Response) error {
		if res.StatusCode == http.StatusSwitchingProtocols {
			if c := httpguard.FromContext(res.Request.Context()); c != nil {
				c.Passthrough()
			}
		}
		return nil
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		MaxHeaderBytes: 64 << 10, ConnContext: httpguard.ConnContext}
	ln := listen(t)
	go func() { _ = srv.Serve(httpguard.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// startFast serves FastProxy.
func startFast(t *testing.T, upstream string, timeout time.Duration) string {
	t.Helper()
	p, err := NewFastProxy(upstream, timeout)
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = p.Serve(ln) }()
	t.Cleanup(func() { _ = p.Server.Shutdown() })
	return ln.Addr().String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// upstream serves h on a real socket for the test's duration.
func upstream(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// rawConn is a client connection that writes raw bytes and reads lines.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// statusLine reads the next status line within d ("" when none came).
func (c *rawConn) statusLine(d time.Duration) string {
	_ = c.SetReadDeadline(time.Now().Add(d))
	line, _ := c.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n")
}

// response reads the next response within d (nil when none came).
func (c *rawConn) response(d time.Duration) *http.Response {
	_ = c.SetReadDeadline(time.Now().Add(d))
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil
	}
	return res
}

// within reports whether ch is closed within d.
func within(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// forEngine runs f for each engine as a subtest; want[engine] is what the
// test expects of it.
func forEngine(t *testing.T, f func(t *testing.T, e engine)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { f(t, e) })
	}
}

// ctxWait waits for ctx's end or d, and reports whether ctx ended.
func ctxWait(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(d):
		return false
	}
}

func dialOnce(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }
