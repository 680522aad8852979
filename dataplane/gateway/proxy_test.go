package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

func newFlagSet() *pflag.FlagSet { return pflag.NewFlagSet("test", pflag.ContinueOnError) }

func TestSeedCheckAndHeaders(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("shop-a", "shop-a", "create-order", 2, slow))
	gw := start(t, e.options(srv.Addr()), testLogger(t))

	want := []struct {
		status    int
		remaining string
	}{{200, "1"}, {200, "0"}, {429, "0"}}
	for i, w := range want {
		res, body := send(t, "POST", gw.url+"/orders", "shop-a")
		if res.StatusCode != w.status {
			t.Fatalf("request %d: status %d, want %d (%s)", i+1, res.StatusCode, w.status, body)
		}
		if got := res.Header.Get("X-RateLimit-Remaining"); got != w.remaining {
			t.Fatalf("request %d: X-RateLimit-Remaining %q, want %q", i+1, got, w.remaining)
		}
		if got := res.Header.Values("X-RateLimit-Remaining"); len(got) != 1 {
			t.Fatalf("request %d: %d X-RateLimit-Remaining headers (the upstream's must be dropped)", i+1, len(got))
		}
		if got := res.Header.Get("X-RateLimit-Limit"); got != "2" {
			t.Fatalf("request %d: X-RateLimit-Limit %q, want 2", i+1, got)
		}
		if w.status == 200 && !strings.HasPrefix(body, "POST /orders") {
			t.Fatalf("request %d: upstream did not get the request: %q", i+1, body)
		}
	}
	// One token per 168h: the third request must wait that long, exactly.
	res, _ := send(t, "POST", gw.url+"/orders", "shop-a")
	ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q: %v", res.Header.Get("Retry-After"), err)
	}
	if full := 168 * 3600; ra < full-5 || ra > full {
		t.Fatalf("Retry-After = %d, want about %d (one token takes 168h)", ra, full)
	}
}

func TestRetryAfterIsExactAndHonoured(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	// One token every 2 seconds.
	e := newEnv(t, up.URL, rule("r", "shop-a", "create-order", 1, "refill: {tokens: 1, period: 2s}"))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	if res, _ := send(t, "POST", gw.url+"/orders", "shop-a"); res.StatusCode != 200 {
		t.Fatalf("first: %d", res.StatusCode)
	}
	res, _ := send(t, "POST", gw.url+"/orders", "shop-a")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "2" {
		t.Fatalf("second: %d Retry-After %q, want 429 and 2", res.StatusCode, res.Header.Get("Retry-After"))
	}
	time.Sleep(2 * time.Second)
	if res, _ := send(t, "POST", gw.url+"/orders", "shop-a"); res.StatusCode != 200 {
		t.Fatalf("after waiting Retry-After: %d, want 200", res.StatusCode)
	}
}

func TestIdentityAndRoutingErrors(t *testing.T) {
	srv := redistest.Start(t)
	redis := srv.Client(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("d", "*", "*", 100, "refillPerSecond: 100"))
	gw := start(t, e.options(srv.Addr()), testLogger(t))

	cases := []struct {
		name, method, path, key string
		status                  int
	}{
		{"no key", "POST", "/orders", "", 401},
		{"overlong key", "POST", "/orders", strings.Repeat("k", 5000), 400},
		{"hash tag braces", "POST", "/orders", "{shop-a}", 400},
		{"colon", "POST", "/orders", "shop:a", 400},
		{"65 characters", "POST", "/orders", strings.Repeat("a", 65), 400},
		{"unknown route", "GET", "/nothing/here", "shop-a", 404},
		{"method not allowed", "DELETE", "/orders", "shop-a", 405},
		{"unclean path", "GET", "/api/../orders", "shop-a", 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, body := send(t, c.method, gw.url+c.path, c.key)
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d (%s)", res.StatusCode, c.status, body)
			}
			if res.Header.Get("X-RateLimit-Remaining") != "" {
				t.Fatal("a request that was not limited carries limit headers")
			}
		})
	}
	// None of those reached Redis.
	if n := redis.DBSize(context.Background()).Val(); n != 0 {
		t.Fatalf("%d keys in Redis after requests that must not touch it", n)
	}

	// Control characters never get past the HTTP server (raw request: Go's
	// client refuses to send them).
	for _, raw := range []string{"shop\x01a", "shop\x7fa", "shop a\r\nX-Evil: 1"} {
		status := rawRequest(t, gw.Addr(), "POST /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: "+raw+"\r\nContent-Length: 0\r\n\r\n")
		if status < 400 || status >= 500 {
			t.Fatalf("key %q: status %d, want 4xx", raw, status)
		}
	}
	// Two keys are ambiguous.
	status := rawRequest(t, gw.Addr(), "POST /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: a\r\nX-Api-Key: b\r\nContent-Length: 0\r\n\r\n")
	if status != 400 {
		t.Fatalf("two X-Api-Key headers: status %d, want 400", status)
	}
	// Huge headers are refused.
	status = rawRequest(t, gw.Addr(), "POST /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: a\r\nX-Junk: "+strings.Repeat("j", 100<<10)+"\r\n\r\n")
	if status != 431 {
		t.Fatalf("100 KiB header: status %d, want 431", status)
	}
}

// rawRequest writes req on a new connection and returns the status code.
func rawRequest(t *testing.T, addr, req string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func TestForwarding(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("d", "*", "*", 100, "refillPerSecond: 100"))
	gw := start(t, e.options(srv.Addr()), testLogger(t))

	res, body := send(t, "GET", gw.url+"/api/items?x=1", "shop-a")
	if res.StatusCode != 200 || !strings.HasPrefix(body, "GET /v1/items?x=1 ") {
		t.Fatalf("prefix route: %d %q, want the prefix stripped and the upstream base path added", res.StatusCode, body)
	}
	// The tenant, never the key (forwarded_test.go has the details).
	for _, want := range []string{"xff=127.0.0.1", "xfh=" + gw.Addr(), "xfp=http", "key= ", "tenant=shop-a "} {
		if !strings.Contains(body, want) {
			t.Fatalf("upstream saw %q, missing %q", body, want)
		}
	}
	if res.Header.Get("X-Upstream") != "echo" || res.Header.Get("X-RateLimit-Remaining") != "99" {
		t.Fatalf("headers %v", res.Header)
	}

	// An unreachable upstream is a 502, not a limiter error, and still
	// carries the limit headers of the decision that was made.
	res, _ = send(t, "GET", gw.url+"/broken", "shop-a")
	if res.StatusCode != 502 || res.Header.Get("X-RateLimit-Remaining") == "" {
		t.Fatalf("broken upstream: %d %v, want 502 with limit headers", res.StatusCode, res.Header)
	}

	// Request bodies stream to the upstream.
	req, _ := http.NewRequest("POST", gw.url+"/orders", strings.NewReader("hello"))
	req.Header.Set("X-Api-Key", "shop-a")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), "body=hello") {
		t.Fatalf("body not forwarded: %q", b)
	}
}

func TestStreamingResponses(t *testing.T) {
	srv := redistest.Start(t)
	release := make(chan struct{})
	up := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "first")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprintln(w, "second")
	}))
	e := newEnv(t, up, rule("d", "*", "*", 100, "refillPerSecond: 100"))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	req, _ := http.NewRequest("GET", gw.url+"/orders", nil)
	req.Header.Set("X-Api-Key", "shop-a")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	line, err := r.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first chunk %q, %v: it must arrive while the upstream is still writing", line, err)
	}
	close(release)
	if line, _ = r.ReadString('\n'); line != "second\n" {
		t.Fatalf("second chunk %q", line)
	}
}

func httpServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func TestShadowModeNeverRejects(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("s", "shop-a", "create-order", 2, slow, "mode: Shadow"))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	for i := range 5 {
		res, _ := send(t, "POST", gw.url+"/orders", "shop-a")
		if res.StatusCode != 200 {
			t.Fatalf("request %d: %d, a shadow rule must never reject", i+1, res.StatusCode)
		}
		wouldReject := i >= 2
		if got := res.Header.Get("X-RateLimit-Shadow") == "would-reject"; got != wouldReject {
			t.Fatalf("request %d: X-RateLimit-Shadow %q, want would-reject=%v", i+1, res.Header.Get("X-RateLimit-Shadow"), wouldReject)
		}
	}
	if got := metricValue(t, gw, `tollgate_gateway_decisions_total{result="shadow_rejected",route="create-order",source="redis"}`); got != 3 {
		t.Fatalf("shadow_rejected metric = %v, want 3", got)
	}
}

func TestExactUnderConcurrencyThroughSeveralGatewaysWithSkewedClocks(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	const capacity = 50
	skews := []time.Duration{0, time.Hour, -time.Hour, 3 * time.Second}
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d gateways", n), func(t *testing.T) {
			tenant := fmt.Sprintf("tenant-%d", n)
			e := newEnv(t, up.URL, rule("r", tenant, "create-order", capacity, slow))
			var gws []*running
			for i := range n {
				o := e.options(srv.Addr())
				skew := skews[i]
				o.Clock = func() time.Time { return time.Now().Add(skew) }
				gws = append(gws, start(t, o, testLogger(t)))
			}
			codes := make(map[int]int)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 1000 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequest("POST", gws[i%n].url+"/orders", nil)
					req.Header.Set("X-Api-Key", tenant)
					res, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					res.Body.Close()
					mu.Lock()
					codes[res.StatusCode]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			if codes[200] != capacity || codes[429] != 1000-capacity {
				t.Fatalf("status counts %v, want exactly %d x 200 and the rest 429", codes, capacity)
			}
			for _, gw := range gws {
				if gw.BreakerState() != "closed" {
					t.Fatalf("breaker %s: a decision did not come from Redis", gw.BreakerState())
				}
			}
		})
	}
}

func TestRulesReloadWithoutRestart(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "shop-a", "create-order", 1, slow))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	send(t, "POST", gw.url+"/orders", "shop-a")
	if res, _ := send(t, "POST", gw.url+"/orders", "shop-a"); res.StatusCode != 429 {
		t.Fatalf("capacity 1: second request %d", res.StatusCode)
	}
	// Replace the rule by one for another route: shop-a's orders fall back
	// to the built-in default (burst 20).
	e.writeRules(t, rule("r", "shop-a", "list-orders", 1, slow))
	waitFor(t, 10*time.Second, "rules reload", func() bool {
		return gw.Rules().Lookup("shop-a", "create-order").Capacity == 20
	})
	// The bucket keeps its tokens across a rule change (none left here); the
	// new rule caps and refills them: 10 per second.
	if res, _ := send(t, "POST", gw.url+"/orders", "shop-a"); res.Header.Get("X-RateLimit-Limit") != "20" {
		t.Fatalf("after reload: limit %q, want the default's 20", res.Header.Get("X-RateLimit-Limit"))
	}
	time.Sleep(300 * time.Millisecond)
	if res, _ := send(t, "POST", gw.url+"/orders", "shop-a"); res.StatusCode != 200 {
		t.Fatalf("300ms after the reload: %d, want 200 (the default refills 10/s)", res.StatusCode)
	}
	// A broken file keeps the last good rules.
	e.writeRules(t, "apiVersion: ratelimit.tollgate.dev/v1alpha1\nkind: RateLimitRule\nmetadata: {name: x}\nspec: {tenant: 'a:b'}\n")
	waitFor(t, 10*time.Second, "reload error counted", func() bool {
		return metricValue(t, gw, `tollgate_gateway_reload_errors_total{source="rules"}`) >= 1
	})
	if gw.Rules().Lookup("shop-a", "list-orders").Capacity != 1 {
		t.Fatal("a malformed rules file replaced the last good rules")
	}
}

func TestIETFHeaders(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "shop-a", "create-order", 200, "refillPerSecond: 100"))
	o := e.options(srv.Addr())
	o.IETFHeaders = true
	gw := start(t, o, testLogger(t))
	res, _ := send(t, "POST", gw.url+"/orders", "shop-a")
	if got := res.Header.Get("RateLimit-Policy"); got != `"create-order";q=200;w=2` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if got := res.Header.Get("RateLimit"); got != `"create-order";r=199;t=1` {
		t.Fatalf("RateLimit %q", got)
	}
}

func TestAPIKeysNeverLogged(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "shop-a", "*", 1, slow))
	const secret = "sk_live_9f2a1c0b7e5d4f3a"
	keys := e.dir + "/keys.yaml"
	writeAtomic(t, keys, "keys:\n  - tenant: shop-a\n    key: "+secret+"\n")
	var logs bytes.Buffer
	var mu sync.Mutex
	log := funcr.New(func(prefix, args string) { mu.Lock(); logs.WriteString(prefix + args + "\n"); mu.Unlock() }, funcr.Options{Verbosity: 10})
	o := e.options(srv.Addr())
	o.APIKeysFile, o.Identity = keys, gateway.IdentityMapped
	gw := start(t, o, log)

	if res, body := send(t, "POST", gw.url+"/orders", secret); res.StatusCode != 200 || !strings.Contains(body, "POST /orders") {
		t.Fatalf("mapped key: %d %s", res.StatusCode, body)
	}
	if res, _ := send(t, "POST", gw.url+"/orders", secret); res.StatusCode != 429 {
		t.Fatalf("second request: %d, want 429 (the key maps to shop-a, capacity 1)", res.StatusCode)
	}
	if res, _ := send(t, "GET", gw.url+"/broken", secret+"x"); res.StatusCode != 401 {
		t.Fatalf("unknown key: %d, want 401", res.StatusCode)
	}
	// The key is not a Redis key: only the tenant is.
	rkeys := srv.Client(t).Keys(context.Background(), "*").Val()
	if len(rkeys) != 1 || rkeys[0] != "rl:{shop-a}" {
		t.Fatalf("Redis keys %v, want only rl:{shop-a} (shop-a's buckets)", rkeys)
	}
	metricsText := scrape(t, gw)
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), secret) || strings.Contains(metricsText, secret) {
		t.Fatal("an API key appeared in the logs or the metrics")
	}
}
