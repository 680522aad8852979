package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/procs/kubeapi"
	"github.com/tollgate-dev/tollgate/internal/testutil/gobuild"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// heldUpstream is an upstream whose requests wait until the test lets them
// go (or their client goes away), and which counts how many it holds at
// once.
type heldUpstream struct {
	*httptest.Server
	gate              chan struct{} // closed: answer every request
	arrived, canceled chan struct{} // one value per request
	now, max          atomic.Int64
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	u := &heldUpstream{gate: make(chan struct{}), arrived: make(chan struct{}, 1000), canceled: make(chan struct{}, 1000)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.now.Add(1)
		defer u.now.Add(-1)
		for m := u.max.Load(); n > m && !u.max.CompareAndSwap(m, n); m = u.max.Load() {
		}
		u.arrived <- struct{}{}
		select {
		case <-u.gate:
			_, _ = io.WriteString(w, "done\n")
		case <-r.Context().Done():
			u.canceled <- struct{}{}
		}
	}))
	t.Cleanup(func() { u.open(); u.Close() })
	return u
}

var openOnce sync.Map

func (u *heldUpstream) open() {
	if _, done := openOnce.LoadOrStore(u, true); !done {
		close(u.gate)
	}
}

// receive waits for n values on ch.
func receive(t *testing.T, ch chan struct{}, n int, what string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for range n {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %d %s", n, what)
		}
	}
}

const concRule = "concurrency: {maxInFlight: 5, leaseSeconds: 60}"

// concCluster is three gateways on srv in front of up, with one rule for
// tenant shop on create-order.
func concCluster(t *testing.T, srv *redistest.Server, up string, rules string) []*running {
	t.Helper()
	e := newEnv(t, up, rules)
	var gws []*running
	for range 3 {
		o := e.options(srv.Addr())
		o.Replicas = 3
		o.IETFHeaders = true
		gws = append(gws, start(t, o, testLogger(t)))
	}
	return gws
}

func slotCount(t *testing.T, c redis.Cmdable, key string) int64 {
	t.Helper()
	n, err := c.ZCard(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConcurrencyLimitAcrossGateways: three gateways, maxInFlight 5, 50
// requests at once that the upstream holds: exactly 5 reach it (it never
// holds more), the 45 others get 429 with Retry-After: 1 and the
// concurrency item of the IETF headers; when the 5 end, their slots are
// released (the lease is 60s: only a release frees them this early) and the
// next 5 pass.
func TestConcurrencyLimitAcrossGateways(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeldUpstream(t)
	gws := concCluster(t, srv, up.URL, rule("conc", "shop", "create-order", 1000, slow, concRule))
	type answer struct {
		status             int
		retryAfter, policy string
	}
	answers := make(chan answer, 50)
	for i := range 50 {
		go func() {
			req, _ := http.NewRequest("POST", gws[i%3].url+"/orders", nil)
			req.Header.Set("X-Api-Key", "shop")
			res, err := client.Do(req)
			if err != nil {
				t.Errorf("request: %v", err)
				answers <- answer{}
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			answers <- answer{res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("RateLimit-Policy")}
		}()
	}
	receive(t, up.arrived, 5, "requests at the upstream")
	for range 45 {
		a := <-answers
		if a.status != http.StatusTooManyRequests || a.retryAfter != "1" || !strings.Contains(a.policy, `"create-order-concurrency";q=5;qu="concurrent-requests"`) {
			t.Fatalf("a request beyond the limit: %+v, want 429, Retry-After: 1 and the concurrency policy item", a)
		}
	}
	c := srv.Client(t)
	key := concurrency.Key("shop", "create-order")
	if n := slotCount(t, c, key); n != 5 {
		t.Fatalf("%d slots in Redis with 5 requests in flight", n)
	}
	var rejected float64
	for _, gw := range gws {
		rejected += metricValue(t, gw, `tollgate_gateway_concurrency_rejections_total{result="rejected",route="create-order",source="redis"}`)
	}
	if rejected != 45 {
		t.Fatalf("%v concurrency rejections counted, want 45", rejected)
	}
	if held := inFlightGauge(t, gws); held != 5 {
		t.Fatalf("tollgate_gateway_concurrency_in_flight adds up to %v, want 5", held)
	}
	up.open()
	for range 5 {
		if a := <-answers; a.status != http.StatusOK {
			t.Fatalf("an admitted request: %+v, want 200", a)
		}
	}
	if m := up.max.Load(); m != 5 {
		t.Fatalf("the upstream held %d requests at once, want 5", m)
	}
	waitFor(t, 30*time.Second, "slots released", func() bool { return slotCount(t, c, key) == 0 })
	if held := inFlightGauge(t, gws); held != 0 {
		t.Fatalf("tollgate_gateway_concurrency_in_flight adds up to %v after every request ended", held)
	}
	for i := range 5 {
		if res, _ := send(t, "POST", gws[i%3].url+"/orders", "shop"); res.StatusCode != http.StatusOK {
			t.Fatalf("after the releases: %d", res.StatusCode)
		}
	}
}

func inFlightGauge(t *testing.T, gws []*running) (sum float64) {
	t.Helper()
	for _, gw := range gws {
		sum += metricValue(t, gw, `tollgate_gateway_concurrency_in_flight{route="create-order"}`)
	}
	return sum
}

// TestConcurrencyLocalShareDuringOutage: with Redis gone, a LocalFallback
// rule admits max(1, maxInFlight/N) requests at once on each gateway: 6/3 =
// 2 here; the third gets 429 with Retry-After: 1.
func TestConcurrencyLocalShareDuringOutage(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeldUpstream(t)
	gws := concCluster(t, srv, up.URL, rule("conc", "shop", "create-order", 1000, slow, "concurrency: {maxInFlight: 6}"))
	srv.Kill()
	for range 2 {
		go func() {
			req, _ := http.NewRequest("POST", gws[0].url+"/orders", nil)
			req.Header.Set("X-Api-Key", "shop")
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
			}
		}()
	}
	receive(t, up.arrived, 2, "requests at the upstream")
	res, _ := send(t, "POST", gws[0].url+"/orders", "shop")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" ||
		!strings.Contains(res.Header.Get("RateLimit-Policy"), `"create-order-concurrency";q=2;`) {
		t.Fatalf("a third request on one gateway: %d %v, want 429, Retry-After: 1 and the local share q=2", res.StatusCode, res.Header)
	}
	if v := metricValue(t, gws[0], `tollgate_gateway_concurrency_rejections_total{result="rejected",route="create-order",source="local"}`); v != 1 {
		t.Fatalf("local rejections %v, want 1", v)
	}
	up.open()
}

// TestConcurrencyReleasedOnClientCancel: a client that goes away while its
// request waits at the upstream frees its slot.
func TestConcurrencyReleasedOnClientCancel(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeldUpstream(t)
	gws := concCluster(t, srv, up.URL, rule("conc", "shop", "create-order", 1000, slow, "concurrency: {maxInFlight: 1, leaseSeconds: 60}"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", gws[0].url+"/orders", nil)
		req.Header.Set("X-Api-Key", "shop")
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	receive(t, up.arrived, 1, "request at the upstream")
	c := srv.Client(t)
	key := concurrency.Key("shop", "create-order")
	if n := slotCount(t, c, key); n != 1 {
		t.Fatalf("%d slots held, want 1", n)
	}
	if res, _ := send(t, "POST", gws[1].url+"/orders", "shop"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second request while one is in flight: %d, want 429", res.StatusCode)
	}
	cancel()
	<-done
	receive(t, up.canceled, 1, "upstream request canceled")
	waitFor(t, 30*time.Second, "slot released", func() bool { return slotCount(t, c, key) == 0 })
}

// TestConcurrencyReleasedOnUpstreamFailure: an upstream that refuses the
// connection (502), or dies in the middle of its response body (the proxy
// aborts the handler with a panic), does not keep the slot.
func TestConcurrencyReleasedOnUpstreamFailure(t *testing.T) {
	srv := redistest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// A response that promises 1000 bytes and ends after 5.
			buf := make([]byte, 4096)
			_, _ = conn.Read(buf)
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nhello")
			conn.Close()
		}
	}()
	rules := rule("broken", "shop", "broken", 1000, slow, "concurrency: {maxInFlight: 1, leaseSeconds: 60}") +
		rule("cut", "shop", "create-order", 1000, slow, "concurrency: {maxInFlight: 1, leaseSeconds: 60}")
	gws := concCluster(t, srv, "http://"+ln.Addr().String(), rules)
	c := srv.Client(t)
	for i := range 3 {
		if res, _ := send(t, "GET", gws[i].url+"/broken", "shop"); res.StatusCode != http.StatusBadGateway {
			t.Fatalf("request %d to a refusing upstream: %d, want 502 (not 429: the slot came back)", i, res.StatusCode)
		}
		waitFor(t, 30*time.Second, "slot released", func() bool { return slotCount(t, c, concurrency.Key("shop", "broken")) == 0 })
	}
	for i := range 3 {
		req, _ := http.NewRequest("POST", gws[i].url+"/orders", nil)
		req.Header.Set("X-Api-Key", "shop")
		res, err := client.Do(req)
		if err == nil {
			if res.StatusCode != http.StatusOK {
				t.Fatalf("request %d to an upstream that dies mid-body: %d, want its 200 (then a cut body)", i, res.StatusCode)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		waitFor(t, 30*time.Second, "slot released", func() bool { return slotCount(t, c, concurrency.Key("shop", "create-order")) == 0 })
	}
}

// TestConcurrencyKilledGatewaySlotsExpire: a gateway process killed (SIGKILL)
// with requests in flight never releases their slots and stops renewing
// them: every slot expires by the lease after its last write in Redis time,
// and then another gateway gets them.
func TestConcurrencyKilledGatewaySlotsExpire(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary")
	}
	bin := buildTollgate(t)
	srv := redistest.Start(t)
	up := newHeldUpstream(t)
	e := newEnv(t, up.URL, rule("conc", "shop", "create-order", 1000, slow, "concurrency: {maxInFlight: 3, leaseSeconds: 2}"))
	victim := startProcess(t, bin, "gateway", "--routes", e.routes, "--rules", e.rules, "--identity", gateway.IdentityHeaderIsTenant,
		"--redis-addr", srv.Addr(), "--redis-timeout", "30s", "--replicas", "2", "--pod-name", "victim")
	for range 3 {
		go func() {
			req, _ := http.NewRequest("POST", victim.url+"/orders", nil)
			req.Header.Set("X-Api-Key", "shop")
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
			}
		}()
	}
	receive(t, up.arrived, 3, "requests at the upstream")
	c := srv.Client(t)
	key := concurrency.Key("shop", "create-order")
	victim.kill(t)
	lastWrite := redisNow(t, c) // the dead gateway writes nothing after this
	lease := int64(2000)
	slots := c.ZRangeWithScores(context.Background(), key, 0, -1).Val()
	for _, z := range slots {
		if !strings.HasPrefix(z.Member.(string), "victim-") || int64(z.Score) > lastWrite+lease {
			t.Fatalf("slot %v: want the victim's, expiring by the lease after its last write (%d)", z, lastWrite)
		}
	}
	for redisNow(t, c) <= lastWrite+lease {
		time.Sleep(50 * time.Millisecond)
	}
	o := e.options(srv.Addr())
	o.Replicas = 2
	live := start(t, o, testLogger(t))
	go func() {
		req, _ := http.NewRequest("POST", live.url+"/orders", nil)
		req.Header.Set("X-Api-Key", "shop")
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	receive(t, up.arrived, 1, "a request of the live gateway at the upstream")
	slots = c.ZRangeWithScores(context.Background(), key, 0, -1).Val()
	if len(slots) != 1 || strings.HasPrefix(slots[0].Member.(string), "victim-") {
		t.Fatalf("slots %v, want the live gateway's one", slots)
	}
	up.open()
}

// buildTollgate builds the tollgate command into a temporary directory.
func buildTollgate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tollgate")
	if err := gobuild.Tollgate(kubeapi.RepoRoot(), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// process is a tollgate gateway running as a child process.
type process struct {
	cmd   *exec.Cmd
	url   string
	admin string // the admin port's address
	done  chan struct{}
}

// startProcess runs bin with args and a free --listen and --admin-listen
// address, and waits until /readyz answers 200.
func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	listen, admin := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, append(args, "--listen", listen, "--admin-listen", admin)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, url: "http://" + listen, admin: admin, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill(t) })
	waitFor(t, 30*time.Second, "gateway process ready", func() bool {
		res, err := client.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return p
}

// kill sends SIGKILL and waits for the process to exit.
func (p *process) kill(t *testing.T) {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// redisNow is Redis's clock in Unix milliseconds.
func redisNow(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

// TestConcurrencyReleasedWhenUpgradeEnds: an upgraded connection
// (WebSocket-style, 101 Switching Protocols) holds its slot while it is
// open and gives it back when the client closes it.
func TestConcurrencyReleasedWhenUpgradeEnds(t *testing.T) {
	srv := redistest.Start(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.Copy(conn, brw) // echo until the client closes
	}))
	defer up.Close()
	gws := concCluster(t, srv, up.URL, rule("conc", "shop", "list-orders", 1000, slow, "concurrency: {maxInFlight: 1, leaseSeconds: 60}"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(gws[0].url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "GET /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	buf := make([]byte, 4096)
	n, _ := conn.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 101") {
		t.Fatalf("answer %q, want 101", buf[:n])
	}
	c := srv.Client(t)
	key := concurrency.Key("shop", "list-orders")
	if n := slotCount(t, c, key); n != 1 {
		t.Fatalf("%d slots held by an open upgraded connection, want 1", n)
	}
	if res, _ := send(t, "GET", gws[1].url+"/orders", "shop"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second request while the connection is open: %d, want 429", res.StatusCode)
	}
	conn.Close()
	waitFor(t, 30*time.Second, "slot released", func() bool { return slotCount(t, c, key) == 0 })
}

// TestRLSDoesNotEnforceConcurrency: the rate limit service cannot release
// slots (Envoy sends no end-of-request call), so a rule with
// spec.concurrency decides with its token bucket alone there, and the
// decisions are counted as unenforced; no slot is taken in Redis.
func TestRLSDoesNotEnforceConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("r", "shop", "create-order", 3, slow, "concurrency: {maxInFlight: 1}"))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	c := rlsClient(t, gw)
	var codes []string
	for range 4 {
		codes = append(codes, statusCodes(call(t, c, "envoy", 0, tr("shop", "create-order"))))
	}
	if got := strings.Join(codes, " "); got != "OK OK OK OVER_LIMIT" {
		t.Fatalf("codes %s, want the token bucket's OK OK OK OVER_LIMIT", got)
	}
	if v := metricValue(t, gw, "tollgate_rls_concurrency_unenforced_total"); v != 4 {
		t.Fatalf("unenforced decisions %v, want 4", v)
	}
	if n := slotCount(t, srv.Client(t), concurrency.Key("shop", "create-order")); n != 0 {
		t.Fatalf("%d slots taken by the rate limit service", n)
	}
}

// TestExplainConcurrency: /debug/explain shows the concurrency limit, its
// key and the slots held now in Redis (read without a write), and its text
// form says so.
func TestExplainConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeldUpstream(t)
	gws := concCluster(t, srv, up.URL, rule("conc", "shop", "create-order", 1000, slow, "concurrency: {maxInFlight: 5, leaseSeconds: 30}"))
	for range 2 {
		go func() {
			req, _ := http.NewRequest("POST", gws[0].url+"/orders", nil)
			req.Header.Set("X-Api-Key", "shop")
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
			}
		}()
	}
	receive(t, up.arrived, 2, "requests at the upstream")
	key := concurrency.Key("shop", "create-order")
	before := srv.Client(t).ZRangeWithScores(context.Background(), key, 0, -1).Val()
	r := explainOf(t, gws[1], "shop", "create-order")
	c := r.Concurrency
	if c == nil || c.Key != key || c.MaxInFlight != 5 || c.LeaseSeconds != 30 || c.Held == nil || *c.Held != 2 || c.Error != "" {
		t.Fatalf("concurrency %+v, want key %s, 5 in flight at most, 2 held", c, key)
	}
	after := srv.Client(t).ZRangeWithScores(context.Background(), key, 0, -1).Val()
	if len(after) != len(before) {
		t.Fatalf("explaining changed the slots: %v then %v", before, after)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "at most 5 in flight (HTTP proxy only), lease 30s") ||
		!strings.Contains(text.String(), key+"  2 held now") {
		t.Fatalf("text (%v):\n%s", err, text.String())
	}
	if r := explainOf(t, gws[1], "other", "create-order"); r.Concurrency != nil {
		t.Fatalf("a rule without concurrency: %+v", r.Concurrency)
	}
	up.open()
}

// holdOne sends one request for tenant shop through gw and returns once the
// upstream holds it.
func holdOne(t *testing.T, gw *running, up *heldUpstream) {
	t.Helper()
	hold(t, gw, up, "POST", "shop")
}

// hold sends one request (method on /orders) for tenant through gw and
// returns once the upstream holds it.
func hold(t *testing.T, gw *running, up *heldUpstream, method, tenant string) {
	t.Helper()
	go func() {
		req, _ := http.NewRequest(method, gw.url+"/orders", nil)
		req.Header.Set("X-Api-Key", tenant)
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	receive(t, up.arrived, 1, "request at the upstream")
}

// TestConcurrencyLongRequestKeepsItsSlot: a request that runs past its
// slot's first lease keeps the slot: the gateway renews it (the expiry
// moves, in Redis time) and a second request is still refused.
func TestConcurrencyLongRequestKeepsItsSlot(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeldUpstream(t)
	gws := concCluster(t, srv, up.URL, rule("conc", "shop", "create-order", 1000, slow, "concurrency: {maxInFlight: 1, leaseSeconds: 2}"))
	holdOne(t, gws[0], up)
	c := srv.Client(t)
	key := concurrency.Key("shop", "create-order")
	first := c.ZRangeWithScores(context.Background(), key, 0, -1).Val()
	if len(first) != 1 {
		t.Fatalf("slots %v, want 1", first)
	}
	for redisNow(t, c) <= int64(first[0].Score)+200 {
		time.Sleep(50 * time.Millisecond)
	}
	now := c.ZRangeWithScores(context.Background(), key, 0, -1).Val()
	if len(now) != 1 || now[0].Member != first[0].Member || now[0].Score <= first[0].Score {
		t.Fatalf("past the first lease: slots %v, want %v renewed", now, first)
	}
	if res, _ := send(t, "POST", gws[1].url+"/orders", "shop"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second request while the long one runs: %d, want 429", res.StatusCode)
	}
	up.open()
}

// TestConcurrencyShadow: a Shadow rule over its concurrency limit lets the
// request through, marked X-RateLimit-Shadow: would-reject, and counts it.
func TestConcurrencyShadow(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeldUpstream(t)
	gws := concCluster(t, srv, up.URL, rule("conc", "shop", "create-order", 1000, slow, "mode: Shadow", "concurrency: {maxInFlight: 1}"))
	holdOne(t, gws[0], up)
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", gws[1].url+"/orders", nil)
		req.Header.Set("X-Api-Key", "shop")
		res, err := client.Do(req)
		if err != nil {
			t.Errorf("request: %v", err)
			done <- nil
			return
		}
		res.Body.Close()
		done <- res
	}()
	receive(t, up.arrived, 1, "the second request at the upstream")
	up.open()
	res := <-done
	if res == nil || res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Shadow") != "would-reject" {
		t.Fatalf("second request under a Shadow rule: %v, want 200 marked would-reject", res)
	}
	if v := metricValue(t, gws[1], `tollgate_gateway_concurrency_rejections_total{result="shadow_rejected",route="create-order",source="redis"}`); v != 1 {
		t.Fatalf("shadow rejections %v, want 1", v)
	}
}
