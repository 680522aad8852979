package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// HTTP/2 from clients: every behaviour the gateway guarantees over
// HTTP/1.1 holds over h2c (--h2c) too, run side by side on one gateway;
// h2 over TLS is the e2e suite's (test/e2e/gatewayapi_grpc_test.go), as
// the HTTPS port needs the Gateway API.

// h2cClient speaks HTTP/2 without TLS, with prior knowledge.
func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// h2Upstream serves the paths the HTTP/2 tests use, below /v1 (the route
// "api" strips /api and adds /v1):
//
//	echo    the protocol and identity headers it received (as /v1/echo/orders)
//	sink    the size of the request body, once it was read
//	duplex  each line of the request body back as it arrives
//	hold    nothing until the request is canceled (arrived, canceled count)
//	usage   a JSON body with usage.total_tokens = u
type h2Upstream struct {
	*httptest.Server
	arrived, canceled chan string
	holds             atomic.Int64
}

func newH2Upstream(t *testing.T) *h2Upstream {
	u := &h2Upstream{arrived: make(chan string, 1024), canceled: make(chan string, 1024)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, "/v1/echo/orders") {
		case "":
			fmt.Fprintf(w, "proto=%s tenant=%s key=%s", r.Proto, r.Header.Get("X-Tollgate-Tenant"), r.Header.Get("X-Api-Key"))
		case "/v1/sink":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %d bytes", len(b))
		case "/v1/duplex":
			_ = http.NewResponseController(w).EnableFullDuplex()
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			sc := bufio.NewScanner(r.Body)
			for sc.Scan() {
				fmt.Fprintln(w, "echo "+sc.Text())
				w.(http.Flusher).Flush()
			}
		case "/v1/hold":
			u.holds.Add(1)
			u.arrived <- r.URL.RawQuery
			<-r.Context().Done()
			u.canceled <- r.URL.RawQuery
		case "/v1/usage":
			fmt.Fprintf(w, `{"usage":{"total_tokens":%s}}`, r.URL.Query().Get("u"))
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// h2Env is one gateway with --h2c over an h2Upstream, and a route "slow"
// with a 300 ms timeout to an upstream that never answers.
func h2Env(t *testing.T, rules string, tune func(*gateway.Options)) (*running, *h2Upstream, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	up := newH2Upstream(t)
	e := newEnv(t, up.URL, rules)
	e.writeRoutes(t, fmt.Sprintf(`routes:
  - {id: create-order, methods: [POST], path: /orders, upstream: %[1]s/v1/echo}
  - {id: api, pathPrefix: /api, stripPrefix: true, upstream: %[1]s/v1}
  - {id: slow, path: /slow, upstream: %[2]s, timeout: 300ms}
`, up.URL, silentUpstream(t)))
	o := e.options(srv.Addr())
	o.H2C = true
	if tune != nil {
		tune(&o)
	}
	return start(t, o, testLogger(t)), up, srv
}

// protocols are the clients every behaviour is checked with.
var protocols = []struct {
	name  string
	major int
	c     func() *http.Client
}{
	{"HTTP/1.1", 1, func() *http.Client { return client }},
	{"h2c", 2, h2cClient},
}

func do(t *testing.T, c *http.Client, req *http.Request, major int) (*http.Response, string) {
	t.Helper()
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.ProtoMajor != major {
		t.Fatalf("answered over %s, want HTTP/%d", res.Proto, major)
	}
	return res, string(b)
}

func newReq(t *testing.T, method, url, key string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	return req
}

// TestHTTP2Limits: over h2c as over HTTP/1.1, the limit, its headers, the
// 429's JSON body and Retry-After, the tenant header the upstream sees
// (never the key), a malformed request cost (400), and the 404 of no route.
func TestHTTP2Limits(t *testing.T) {
	rules := rule("h1", "HTTP-1.1", "create-order", 2, slow) + rule("h2", "h2c", "create-order", 2, slow) +
		rule("cost", "*", "api", 100, slow, "cost: {request: {header: X-Cost}}")
	gw, _, _ := h2Env(t, rules, nil)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			c := p.c()
			tenant := strings.ReplaceAll(p.name, "/", "-")
			var got []string
			for range 3 {
				res, body := do(t, c, newReq(t, "POST", gw.url+"/orders", tenant, nil), p.major)
				got = append(got, fmt.Sprintf("%d %s %s", res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), res.Header.Get("Retry-After")))
				switch res.StatusCode {
				case 200:
					if want := "proto=HTTP/1.1 tenant=" + tenant + " key="; body != want {
						t.Fatalf("upstream saw %q, want %q", body, want)
					}
				case 429:
					if body != `{"error":"rate limit exceeded"}`+"\n" || res.Header.Get("Content-Type") != "application/json" {
						t.Fatalf("429 body %q (%s)", body, res.Header.Get("Content-Type"))
					}
				}
			}
			if want := []string{"200 1 ", "200 0 ", "429 0 604800"}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("answers %q, want %q", got, want)
			}
			req := newReq(t, "GET", gw.url+"/api/echo", tenant, nil)
			req.Header.Set("X-Cost", "many")
			if res, body := do(t, c, req, p.major); res.StatusCode != 400 || !strings.Contains(body, "X-Cost") {
				t.Fatalf("malformed cost: %d %s", res.StatusCode, body)
			}
			if res, _ := do(t, c, newReq(t, "GET", gw.url+"/nowhere", tenant, nil), p.major); res.StatusCode != 404 {
				t.Fatalf("no route: %d", res.StatusCode)
			}
		})
	}
}

// TestHTTP2Streams: over HTTP/2 the request body streams to the upstream
// and the response streams back at once, each piece as it comes: a piece of
// the answer arrives before the next piece of the request is sent (over
// HTTP/1.1 net/http's server is not full duplex: TestForwarding and
// TestStreamingResponses stream each way in turn).
func TestHTTP2Streams(t *testing.T) {
	gw, _, _ := h2Env(t, rule("r", "*", "*", 1000, slow), nil)
	c := h2cClient()
	pr, pw := io.Pipe()
	res, err := c.Do(newReq(t, "POST", gw.url+"/api/duplex", "duplex", pr))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewReader(res.Body)
	for i := range 3 {
		if _, err := fmt.Fprintf(pw, "ping %d\n", i); err != nil {
			t.Fatal(err)
		}
		line, err := lines.ReadString('\n')
		if want := fmt.Sprintf("echo ping %d\n", i); err != nil || line != want {
			t.Fatalf("piece %d: %q %v, want %q before the next piece is sent", i, line, err, want)
		}
	}
	pw.Close()
	if rest, _ := io.ReadAll(lines); len(rest) != 0 {
		t.Fatalf("after the request ended: %q", rest)
	}
}

// TestHTTP2ClientGone: a client that cancels its request (over HTTP/2 a
// stream reset, the connection staying open; over HTTP/1.1 a closed
// connection) cancels the upstream request.
func TestHTTP2ClientGone(t *testing.T) {
	gw, up, _ := h2Env(t, rule("r", "*", "*", 1000, slow), nil)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			req := newReq(t, "GET", gw.url+"/api/hold?"+p.name, "gone", nil).WithContext(ctx)
			errc := make(chan error, 1)
			go func() {
				res, err := p.c().Do(req)
				if err == nil {
					res.Body.Close()
				}
				errc <- err
			}()
			if got := receiveString(t, up.arrived); got != p.name {
				t.Fatalf("arrived %q", got)
			}
			cancel()
			if got := receiveString(t, up.canceled); got != p.name {
				t.Fatalf("canceled %q", got)
			}
			if err := <-errc; err == nil {
				t.Fatal("the canceled request got an answer")
			}
		})
	}
}

func receiveString(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("timed out")
	}
	return ""
}

// TestHTTP2Timeouts: over h2c as over HTTP/1.1, a route's timeout (504)
// and --client-body-timeout (408) hold.
func TestHTTP2Timeouts(t *testing.T) {
	gw, _, _ := h2Env(t, rule("r", "*", "*", 1000, slow), func(o *gateway.Options) { o.ClientBodyTimeout = 500 * time.Millisecond })
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			res, body := do(t, p.c(), newReq(t, "GET", gw.url+"/slow", "slow", nil), p.major)
			if res.StatusCode != 504 || !strings.Contains(body, "upstream timed out") {
				t.Fatalf("route timeout: %d %s", res.StatusCode, body)
			}
			pr, pw := io.Pipe()
			defer pw.Close()
			go func() { _, _ = io.WriteString(pw, "a") }() // then nothing more
			req := newReq(t, "POST", gw.url+"/api/sink", "slow", pr)
			req.ContentLength = 10
			res, body = do(t, p.c(), req, p.major)
			if res.StatusCode != 408 || !strings.Contains(body, "request body not received in time") {
				t.Fatalf("client body timeout: %d %s", res.StatusCode, body)
			}
		})
	}
}

// TestHTTP2ResponseCost: a response cost in a JSON body is found as the
// body streams over HTTP/2 and charged exactly.
func TestHTTP2ResponseCost(t *testing.T) {
	gw, _, srv := h2Env(t, rule("llm", "*", "api", 1000, slow, "cost: {response: {jsonField: usage.total_tokens}}"), nil)
	for i, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			tenant := fmt.Sprintf("llm-%d", i)
			for _, u := range []int{5, 17} {
				res, body := do(t, p.c(), newReq(t, "GET", fmt.Sprintf("%s/api/usage?u=%d", gw.url, u), tenant, nil), p.major)
				if res.StatusCode != 200 || !json.Valid([]byte(body)) {
					t.Fatalf("%d %s", res.StatusCode, body)
				}
			}
			wantTokens(t, srv, tenant, "api", 1000-2-5-17)
		})
	}
}

// TestH2COffByDefault: without --h2c the plain port speaks HTTP/1.1 only:
// an HTTP/2 client with prior knowledge gets no HTTP/2 connection; with
// it, HTTP/1.1 requests on the same port are still checked for bare LFs.
func TestH2COffByDefault(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, echoUpstream(t).URL, rule("r", "*", "*", 100, slow))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	if res, err := h2cClient().Do(newReq(t, "GET", gw.url+"/orders", "x", nil)); err == nil {
		res.Body.Close()
		t.Fatalf("an h2c request without --h2c: %s %d, want no HTTP/2 connection", res.Proto, res.StatusCode)
	}
	if res, _ := send(t, "GET", gw.url+"/orders", "x"); res.StatusCode != 200 {
		t.Fatalf("HTTP/1.1 without --h2c: %d", res.StatusCode)
	}

	h2, _, _ := h2Env(t, rule("r", "*", "*", 100, slow), nil)
	conn, err := net.Dial("tcp", h2.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /api/echo HTTP/1.1\r\nHost: x\r\nX-Note: a\nX-Api-Key: smuggled\r\n\r\n")
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 400") {
		t.Fatalf("a bare LF over HTTP/1.1 on an --h2c port: %q, want 400", line)
	}
}

// TestH2CCurl: the machine's curl over h2c with prior knowledge sees the
// limit and its headers as a Go client does.
func TestH2CCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	if out, _ := exec.Command(curl, "--version").Output(); !strings.Contains(string(out), "HTTP2") {
		t.Skip("this curl has no HTTP/2")
	}
	gw, _, _ := h2Env(t, rule("c", "curl", "create-order", 1, slow), nil)
	var got []string
	for range 2 {
		out, err := exec.Command(curl, "-sS", "-i", "--http2-prior-knowledge", "-X", "POST", "-H", "X-Api-Key: curl", gw.url+"/orders").CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		status, _, _ := strings.Cut(string(out), "\r\n")
		got = append(got, status)
		if !strings.Contains(strings.ToLower(string(out)), "x-ratelimit-remaining: 0") {
			t.Fatalf("curl saw no X-RateLimit-Remaining: 0:\n%s", out)
		}
	}
	if want := []string{"HTTP/2 200 ", "HTTP/2 429 "}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("curl: %q, want %q", got, want)
	}
}
