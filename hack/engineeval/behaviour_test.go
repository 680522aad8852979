package engineeval

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/httpguard"
)

// TestClientDisconnectReachesUpstream: a client that goes away while the
// upstream is still working. net/http cancels the upstream request (the
// request's context ends, the transport closes the upstream connection);
// fasthttp does not: its handler has no per-request cancellation and
// HostClient.Do has no context, so the upstream request runs on to the
// end and holds an upstream connection. For the gateway that means a
// client that hangs up does not stop work it started upstream (a slow
// query, a long poll), the behaviour the issue asks to keep.
func TestClientDisconnectReachesUpstream(t *testing.T) {
	want := map[string]bool{"net/http": true, "fasthttp": false}
	forEngine(t, func(t *testing.T, e engine) {
		arrived, canceled := make(chan struct{}), make(chan bool, 1)
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			canceled <- ctxWait(r.Context(), 3*time.Second)
		})
		c := dial(t, e.start(t, up, 30*time.Second))
		c.send(t, "GET /slow HTTP/1.1\r\nHost: example.test\r\n\r\n")
		if !within(arrived, 5*time.Second) {
			t.Fatal("the request did not reach the upstream")
		}
		c.Close()
		if got := <-canceled; got != want[e.name] {
			t.Errorf("upstream request canceled after the client left: %v, want %v", got, want[e.name])
		}
	})
}

// TestResponseStreamsBeforeUpstreamEnds: the upstream sends a first part
// and waits; the client must see it before the upstream finishes (server-
// sent events, long downloads). Both engines stream it (fasthttp with the
// HostClient's StreamResponseBody and the response handed to the server as
// a body stream).
func TestResponseStreamsBeforeUpstreamEnds(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		release := make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			within(release, 5*time.Second)
			_, _ = io.WriteString(w, "data: last\n\n")
		})
		c := dial(t, e.start(t, up, 30*time.Second))
		c.send(t, "GET /events HTTP/1.1\r\nHost: example.test\r\n\r\n")
		res := c.response(3 * time.Second)
		if res == nil {
			t.Fatal("no response headers before the upstream finished")
		}
		buf := make([]byte, len("data: first"))
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "data: first" {
			t.Fatalf("first event before the upstream finished: %q, %v", buf, err)
		}
		once.Do(func() { close(release) })
	})
}

// TestRequestBodyStreamsUpstream: the client sends the first part of its
// body and waits; the upstream must get that part before the client
// finishes (uploads are not buffered whole, and a slow trickle of data
// flows). net/http forwards every part at once. fasthttp (the server's
// StreamRequestBody, the HostClient writing the body stream) does so for a
// chunked body, but holds back the first part of a Content-Length body: 5
// or 5,000 bytes wait for more, 70,000 bytes pass. Large uploads stream; a
// slow one with a length stalls until enough has come.
func TestRequestBodyStreamsUpstream(t *testing.T) {
	cases := []struct {
		name, head string
		first      int // bytes in the first part, of the 100,000 sent
		chunked    bool
		want       map[string]bool
	}{
		{"content-length 5 bytes first", "Content-Length: 100000\r\n", 5, false, map[string]bool{"net/http": true, "fasthttp": false}},
		{"content-length 5000 bytes first", "Content-Length: 100000\r\n", 5000, false, map[string]bool{"net/http": true, "fasthttp": false}},
		{"content-length 70000 bytes first", "Content-Length: 100000\r\n", 70000, false, map[string]bool{"net/http": true, "fasthttp": true}},
		{"chunked 5 bytes first", "Transfer-Encoding: chunked\r\n", 5, true, map[string]bool{"net/http": true, "fasthttp": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEngine(t, func(t *testing.T, e engine) {
				gotFirst, done := make(chan struct{}), make(chan int, 1)
				up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
					n, _ := io.ReadFull(r.Body, make([]byte, tc.first))
					close(gotFirst)
					rest, _ := io.Copy(io.Discard, r.Body)
					done <- n + int(rest)
				})
				c := dial(t, e.start(t, up, 30*time.Second))
				c.send(t, "POST /upload HTTP/1.1\r\nHost: example.test\r\n"+tc.head+"\r\n"+bodyPart(tc.first, tc.chunked, false))
				if got := within(gotFirst, 2*time.Second); got != tc.want[e.name] {
					t.Errorf("the upstream got the first part before the rest was sent: %v, want %v", got, tc.want[e.name])
				}
				c.send(t, bodyPart(100000-tc.first, tc.chunked, true))
				if got := <-done; got != 100000 {
					t.Errorf("upstream got %d bytes", got)
				}
			})
		})
	}
}

// bodyPart is n bytes of a body, as one chunk when chunked (then the last
// chunk too when last).
func bodyPart(n int, chunked, last bool) string {
	b := strings.Repeat("x", n)
	if !chunked {
		return b
	}
	b = fmt.Sprintf("%x\r\n%s\r\n", n, b)
	if last {
		b += "0\r\n\r\n"
	}
	return b
}

// TestBareLineEndsInHeaders: a header block whose lines end in a bare LF
// (or hold a bare CR) must be refused: a front proxy that splits lines only
// on CRLF sees one header where the gateway would see two (request
// smuggling; dataplane/httpguard). The gateway's net/http setup refuses
// them with 400. fasthttp's server accepts the bare LF as a line end and
// forwards the injected header upstream; it refuses the bare CR.
func TestBareLineEndsInHeaders(t *testing.T) {
	cases := []struct {
		name, block string
		want        map[string]string // engine -> status code, or "injected"
	}{
		{"bare LF", "GET /a HTTP/1.1\r\nHost: example.test\r\nX-Note: a\nX-Injected: 1\r\n\r\n",
			map[string]string{"net/http": "400", "fasthttp": "injected"}},
		{"bare CR", "GET /a HTTP/1.1\r\nHost: example.test\r\nX-Note: a\rX-Injected: 1\r\n\r\n",
			map[string]string{"net/http": "400", "fasthttp": "400"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEngine(t, func(t *testing.T, e engine) {
				up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("X-Injected") != "" {
						w.Header().Set("X-Saw", "injected")
					}
				})
				c := dial(t, e.start(t, up, 30*time.Second))
				c.send(t, tc.block)
				res := c.response(3 * time.Second)
				if res == nil {
					t.Fatal("no response")
				}
				got := res.Header.Get("X-Saw")
				if got == "" {
					got = res.Status[:3]
				}
				if got != tc.want[e.name] {
					t.Errorf("got %s (status %s), want %s", got, res.Status, tc.want[e.name])
				}
			})
		})
	}
}

// TestUpgradePassesThrough: a WebSocket handshake answered 101 by the
// upstream must leave a two-way byte pipe between client and upstream.
// httputil.ReverseProxy does it; fasthttp's HostClient has no notion of a
// protocol switch (it cannot hand its connection over), so the bare proxy
// cannot pass an Upgrade through: the client never gets the upstream's
// bytes. A port would need its own dial, hijack and copy for Upgrade
// requests, outside the HostClient's pool, timeouts and metrics.
func TestUpgradePassesThrough(t *testing.T) {
	want := map[string]bool{"net/http": true, "fasthttp": false}
	forEngine(t, func(t *testing.T, e engine) {
		up := upstream(t, upgradeEcho)
		c := dial(t, e.start(t, up, 30*time.Second))
		c.send(t, "GET /ws HTTP/1.1\r\nHost: example.test\r\nConnection: Upgrade\r\nUpgrade: tollgate-test\r\n\r\n")
		status := c.statusLine(3 * time.Second)
		got := false
		if strings.HasPrefix(status, "HTTP/1.1 101") {
			for line := status; line != ""; line = c.statusLine(time.Second) {
			}
			c.send(t, "ping\n")
			got = c.statusLine(2*time.Second) == "echo: ping"
		}
		if got != want[e.name] {
			t.Errorf("upgraded pipe works: %v, want %v (status line %q)", got, want[e.name], status)
		}
	})
}

// upgradeEcho answers an Upgrade request with 101 and then echoes lines.
func upgradeEcho(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "tollgate-test" {
		http.Error(w, "upgrade required", http.StatusUpgradeRequired)
		return
	}
	conn, rw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tollgate-test\r\n\r\n")
	_ = rw.Flush()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := rw.ReadString('\n')
	if err != nil {
		return
	}
	_, _ = rw.WriteString("echo: " + line)
	_ = rw.Flush()
}

// TestExpectContinue: a client that sends "Expect: 100-continue" waits for
// a go-ahead before its body. Through net/http the go-ahead comes only
// when the body is needed: the transport forwards the Expect header and
// waits for the upstream, so an upstream that refuses at once (here 403)
// is answered without the body ever being sent (and the gateway's own 429
// too, as it never reads the body). fasthttp's server answers
// "100 Continue" before its handler runs, so the client sends its body
// whatever the upstream (or the limiter) would decide. (Its
// ContinueHandler sees only the headers, before the handler: the limiter
// could decide there, the upstream cannot.)
func TestExpectContinue(t *testing.T) {
	want := map[string]string{"net/http": "HTTP/1.1 403 Forbidden", "fasthttp": "HTTP/1.1 100 Continue"}
	forEngine(t, func(t *testing.T, e engine) {
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusForbidden)
		})
		c := dial(t, e.start(t, up, 30*time.Second))
		c.send(t, "POST /upload HTTP/1.1\r\nHost: example.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
		if got := c.statusLine(3 * time.Second); got != want[e.name] {
			t.Errorf("first answer before the body: %q, want %q", got, want[e.name])
		}
	})
}

// TestHopByHopAndXForwardedFor: hop-by-hop headers (and those the
// Connection header names) stay on their hop, and the client's address is
// appended to X-Forwarded-For. fasthttp does neither by itself; the bare
// proxy's own code does both (as httputil.ReverseProxy does), so a port
// keeps them with a few lines. The proxy sees the Connection header's
// tokens in fasthttp too.
func TestHopByHopAndXForwardedFor(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		seen := make(chan http.Header, 1)
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() })
		c := dial(t, e.start(t, up, 30*time.Second))
		c.send(t, "GET /h HTTP/1.1\r\nHost: example.test\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\n"+
			"Keep-Alive: timeout=5\r\nProxy-Authorization: Basic eA==\r\nTe: gzip\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n")
		if res := c.response(3 * time.Second); res == nil || res.StatusCode != http.StatusOK {
			t.Fatalf("response %v", res)
		}
		h := <-seen
		for _, name := range []string{"X-Secret", "Keep-Alive", "Proxy-Authorization", "Te"} {
			if v := h.Get(name); v != "" {
				t.Errorf("upstream got hop-by-hop %s: %q", name, v)
			}
		}
		if got := h.Get("X-Forwarded-For"); got != "192.0.2.1, 127.0.0.1" {
			t.Errorf("X-Forwarded-For %q", got)
		}
	})
}

// TestResponseTimeoutSpansTheBody: the gateway's per-route timeout bounds
// the wait for the upstream's response headers (ResponseHeaderTimeout), so
// a stream that started in time may run longer. fasthttp has no such
// timeout: the HostClient's ReadTimeout bounds the whole response, body
// included, also when streamed, so a stream that outlives it is cut. A port
// would need to give up either the upstream timeout or long responses.
func TestResponseTimeoutSpansTheBody(t *testing.T) {
	want := map[string]bool{"net/http": true, "fasthttp": false}
	forEngine(t, func(t *testing.T, e engine) {
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < 5; i++ {
				_, _ = io.WriteString(w, "tick\n")
				w.(http.Flusher).Flush()
				time.Sleep(500 * time.Millisecond)
			}
		})
		c := dial(t, e.start(t, up, time.Second))
		c.send(t, "GET /stream HTTP/1.1\r\nHost: example.test\r\n\r\n")
		res := c.response(3 * time.Second)
		if res == nil {
			t.Fatal("no response headers")
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		body, err := io.ReadAll(res.Body)
		got := err == nil && strings.Count(string(body), "tick\n") == 5
		if got != want[e.name] {
			t.Errorf("a 2.5 s stream under a 1 s timeout arrived whole: %v, want %v (%d bytes, %v)", got, want[e.name], len(body), err)
		}
	})
}

// TestGracefulShutdown: on SIGTERM the gateway stops accepting and lets the
// requests in flight finish (http.Server.Shutdown). fasthttp's
// ShutdownWithContext does the same: the request in flight gets its whole
// answer, then its connection and the listener are closed.
func TestGracefulShutdown(t *testing.T) {
	arrived := make(chan struct{})
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		time.Sleep(300 * time.Millisecond)
		_, _ = io.WriteString(w, "finished")
	})
	p, err := NewFastProxy(up, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = p.Serve(ln) }()
	c := dial(t, ln.Addr().String())
	c.send(t, "GET /slow HTTP/1.1\r\nHost: example.test\r\n\r\n")
	if !within(arrived, 5*time.Second) {
		t.Fatal("the request did not reach the upstream")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- p.Server.ShutdownWithContext(ctx) }()
	res := c.response(3 * time.Second)
	if res == nil {
		t.Fatal("the request in flight got no answer")
	}
	body, _ := io.ReadAll(res.Body)
	if string(body) != "finished" {
		t.Errorf("in flight: body %q", body)
	}
	// The client connection is closed after that answer.
	if _, err := c.r.ReadByte(); err != io.EOF {
		t.Errorf("after the answer in flight: %v, want EOF", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if c2, err := dialOnce(ln.Addr().String()); err == nil {
		c2.Close()
		t.Error("a new connection was accepted after the shutdown")
	}
}

// TestNoHTTP2FromClients: HTTP/2 over cleartext with prior knowledge. The
// gateway does not serve HTTP/2 to clients today (no TLS on the proxy
// port, no h2c), and fasthttp has no HTTP/2 server either: both answer the
// HTTP/2 preface as HTTP/1.1. If the gateway ever serves HTTP/2, fasthttp
// would need net/http beside it for those clients.
func TestNoHTTP2FromClients(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
		c := dial(t, e.start(t, up, 30*time.Second))
		c.send(t, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
		if got := c.statusLine(3 * time.Second); !strings.HasPrefix(got, "HTTP/1.1 ") {
			t.Errorf("answer to the HTTP/2 preface %q, want an HTTP/1.1 status line", got)
		}
	})
}

// TestHTTPGuardMakesFastHTTPStrict: what a port would do about bare line
// ends. httpguard works on the connection, below any engine: under
// fasthttp's server its listener turns the bare LF that fasthttp accepts
// into a NUL, which fasthttp refuses with 400, and a clean request still
// passes. (The guard's other duties would need porting too: Connection:
// close on a connection it stopped following, via RequestCtx.Conn(), and
// Passthrough after a 101, which fasthttp cannot proxy anyway.)
func TestHTTPGuardMakesFastHTTPStrict(t *testing.T) {
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Injected") != "" {
			w.Header().Set("X-Saw", "injected")
		}
	})
	p, err := NewFastProxy(up, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = p.Serve(httpguard.Listener(ln)) }()
	t.Cleanup(func() { _ = p.Server.Shutdown() })
	for block, want := range map[string]string{
		"GET /a HTTP/1.1\r\nHost: example.test\r\nX-Note: a\nX-Injected: 1\r\n\r\n": "400 Bad Request",
		"GET /a HTTP/1.1\r\nHost: example.test\r\nX-Note: a\r\n\r\n":                "200 OK",
	} {
		c := dial(t, ln.Addr().String())
		c.send(t, block)
		res := c.response(3 * time.Second)
		if res == nil || res.Status != want || res.Header.Get("X-Saw") != "" {
			t.Errorf("%q: %v, want %s and nothing injected", block, res, want)
		}
	}
}
