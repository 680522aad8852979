package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/explain"
	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// The rules of the stacked-limit tests: login 5 per client address
// (anonymous: identity none), every tenant 100 across its routes, shop-b
// 30 on r0 (tenant x route), and 20 per address on r3, on top.
var stackedRules = rule("login-per-address", "*", "login", 5, slow, "by: [{clientAddress: {}}]") +
	rule("tenant-budget", "*", "*", 100, slow, "by: [{tenant: {}}]") +
	rule("shop-b-r0", "shop-b", "r0", 30, slow) +
	rule("r3-per-address", "*", "r3", 20, slow, "by: [{clientAddress: {}}]") +
	rule("everyone", "*", "*", 1000, slow)

// stackedRoutes are login (anonymous) and r0..r3 (identified).
func stackedRoutes(upstream string) string {
	s := "routes:\n  - {id: login, path: /login, upstream: " + upstream + ", identity: none}\n"
	for i := range 4 {
		s += fmt.Sprintf("  - {id: r%d, path: /r%d, upstream: %s}\n", i, i, upstream)
	}
	return s
}

// stackedProcesses starts three gateway processes on redis (a standalone
// server, or a Cluster: mode), loopback as the trusted proxy so that
// X-Forwarded-For names the client, and returns their URLs and their
// admin ports' addresses.
func stackedProcesses(t *testing.T, mode string, addrs ...string) (urls, admins []string) {
	t.Helper()
	bin := buildTollgate(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, stackedRules)
	e.writeRoutes(t, stackedRoutes(up.URL))
	for i := range 3 {
		args := []string{"gateway", "--routes", e.routes, "--rules", e.rules, "--identity", gateway.IdentityHeaderIsTenant,
			"--redis-mode", mode, "--redis-timeout", "30s", "--replicas", "3", "--pod-name", fmt.Sprintf("gw-%d", i),
			"--trusted-proxies", "127.0.0.0/8", "--ietf-headers"}
		for _, a := range addrs {
			args = append(args, "--redis-addr", a)
		}
		p := startProcess(t, bin, args...)
		urls, admins = append(urls, p.url), append(admins, p.admin)
	}
	return urls, admins
}

// stackedInOneCall is the number of stacked requests the gateways at
// admins decided in one script call (their /metrics).
func stackedInOneCall(t *testing.T, admins []string) float64 {
	t.Helper()
	n := 0.0
	for _, a := range admins {
		res, err := client.Get("http://" + a + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		v, _ := findMetric(string(b), `tollgate_gateway_stacked_decisions_total{decided="one_call"}`)
		n += v
	}
	return n
}

// fire sends n requests at once, request i to urls[i%3] with path (or,
// for "", /r<i%4>) and headers(i), and returns how many were admitted;
// every answer must be 200 or 429.
func fire(t *testing.T, urls []string, n int, path string, headers func(i int) []string) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			p := path
			if p == "" {
				p = fmt.Sprintf("/r%d", i%4)
			}
			req, _ := http.NewRequest("POST", urls[i%len(urls)]+p, nil)
			hs := headers(i)
			for j := 0; j+1 < len(hs); j += 2 {
				req.Header.Set(hs[j], hs[j+1])
			}
			res, err := client.Do(req)
			if err != nil {
				t.Errorf("request: %v", err)
				return
			}
			res.Body.Close()
			switch res.StatusCode {
			case 200:
				admitted.Add(1)
			case 429:
			default:
				t.Errorf("%s: status %d", path, res.StatusCode)
			}
		}()
	}
	close(gate)
	wg.Wait()
	return int(admitted.Load())
}

// from is the headers of a request from client address a (through the
// trusted proxy), of tenant (none when "").
func from(a, tenant string) []string {
	h := []string{"X-Forwarded-For", a}
	if tenant != "" {
		h = append(h, "X-Api-Key", tenant)
	}
	return h
}

// checkStacked runs the exact-count scenarios over three gateways.
func checkStacked(t *testing.T, urls []string) {
	// A per-address limit of 5 admits 5 per address: 12 addresses, 9 each.
	addr := func(i int) string { return fmt.Sprintf("198.51.100.%d", i%12) }
	if got := fire(t, urls, 12*9, "/login", func(i int) []string { return from(addr(i), "") }); got != 12*5 {
		t.Errorf("login from 12 addresses admitted %d, want %d (5 each)", got, 12*5)
	}
	// A tenant-wide 100 across 4 routes admits 100.
	if got := fire(t, urls, 160, "", func(i int) []string { return from(fmt.Sprintf("192.0.2.%d", i%50), "shop-a") }); got != 100 {
		t.Errorf("shop-a across r0..r3 admitted %d, want its budget of 100", got)
	}
	// Stacked: shop-b's 30 on r0 binds below the budget of 100; the 30
	// refused took nothing from the budget (same slot), so 70 are left
	// for r1 and r2.
	if got := fire(t, urls, 60, "/r0", func(i int) []string { return from(fmt.Sprintf("192.0.2.%d", i), "shop-b") }); got != 30 {
		t.Errorf("shop-b on r0 admitted %d, want its per-route 30", got)
	}
	// Cross-slot: 20 per address on r3 binds; the 20 refused took nothing
	// from shop-b's budget, which has 70 left, nor from the address.
	if got := fire(t, urls, 40, "/r3", func(i int) []string { return from("203.0.113.5", "shop-b") }); got != 20 {
		t.Errorf("shop-b on r3 from one address admitted %d, want the address's 20", got)
	}
	if got := fire(t, urls, 80, "/r1", func(i int) []string { return from(fmt.Sprintf("192.0.2.%d", i), "shop-b") }); got != 50 {
		t.Errorf("shop-b on r1 admitted %d, want the 50 its budget has left (100 - 30 - 20)", got)
	}
}

// TestStackedLimitsExactOverProcesses: three gateway processes sharing
// one redis-server admit exactly what each limit allows.
func TestStackedLimitsExactOverProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gateway processes")
	}
	srv := redistest.Start(t)
	urls, admins := stackedProcesses(t, "standalone", srv.Addr())
	checkStacked(t, urls)
	// On one server every stack of these rules can be decided in one call
	// (a call that fails or is late is decided in order instead).
	if n := stackedInOneCall(t, admins); n == 0 {
		t.Error("no stacked request was decided in one call")
	}
}

// TestStackedLimitsExactOverProcessesCluster: the same over a Redis
// Cluster of three masters, where the address buckets and the tenant's
// live in different slots.
func TestStackedLimitsExactOverProcessesCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gateway processes and a Redis Cluster")
	}
	cluster := redistest.StartCluster(t, 3)
	urls, admins := stackedProcesses(t, "cluster", cluster.Addrs()...)
	checkStacked(t, urls)
	// A tenant's route and budget share its slot: decided in one call; a
	// stack with an address's limit (another slot) is decided in order.
	if n := stackedInOneCall(t, admins); n == 0 {
		t.Error("no stacked request was decided in one call")
	}
}

// TestSameAnswersOverHTTPAndEnvoy: a rule written once keys the same
// bucket over HTTP (the client address behind a trusted proxy, a request
// header) and over Envoy (the remote_address entry, an entry the domain
// maps to the header): the two front doors share the limit.
func TestSameAnswersOverHTTPAndEnvoy(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("login-per-address", "*", "login", 5, slow, "by: [{clientAddress: {}}]")+
		rule("per-client", "*", "r1", 2, slow, `by: [{tenant: {}}, {header: {name: X-Client-Id}}]`)+
		rule("everyone", "*", "*", 1000, slow))
	e.writeRoutes(t, stackedRoutes(up.URL))
	o := e.options(srv.Addr())
	o.RLSListen, o.TrustedProxies, o.IETFHeaders = "127.0.0.1:0", "127.0.0.0/8", true
	o.RLSDomainsFile = e.writeDomains(t, "domains:\n  - {name: edge, tenantOptional: true, headers: {client_id: X-Client-Id}}\n")
	gw := start(t, o, testLogger(t))
	c := rlsClient(t, gw)
	httpCode := func(path string, hs ...string) int {
		req, _ := http.NewRequest("POST", gw.url+path, nil)
		for j := 0; j+1 < len(hs); j += 2 {
			req.Header.Set(hs[j], hs[j+1])
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	var got []string
	for range 3 {
		got = append(got, fmt.Sprint(httpCode("/login", "X-Forwarded-For", "198.51.100.1")))
	}
	for range 3 {
		res := call(t, c, "edge", 0, entries("route", "login", "remote_address", "198.51.100.1"))
		got = append(got, statusCodes(res))
	}
	got = append(got, fmt.Sprint(httpCode("/login", "X-Forwarded-For", "198.51.100.1")))
	want := "[200 200 200 OK OK OVER_LIMIT 429]"
	if fmt.Sprint(got) != want {
		t.Fatalf("login per address over HTTP and Envoy: %v, want %s", got, want)
	}
	res := call(t, c, "edge", 0, entries("route", "login", "remote_address", "198.51.100.2"))
	if h := headers(t, res); statusCodes(res) != "OK" || h["RateLimit-Policy"] != `"login-by-address";q=5;w=3024000` || h["X-RateLimit-Remaining"] != "4" {
		t.Fatalf("another address over Envoy: %s %v", statusCodes(res), h)
	}
	got = got[:0]
	got = append(got, fmt.Sprint(httpCode("/r1", "X-Api-Key", "shop-a", "X-Client-Id", "c1")))
	got = append(got, statusCodes(call(t, c, "edge", 0, entries("tenant", "shop-a", "route", "r1", "client_id", "c1"))))
	got = append(got, statusCodes(call(t, c, "edge", 0, entries("tenant", "shop-a", "route", "r1", "client_id", "c1"))))
	got = append(got, fmt.Sprint(httpCode("/r1", "X-Api-Key", "shop-a", "X-Client-Id", "c2")))
	if fmt.Sprint(got) != "[200 OK OVER_LIMIT 200]" {
		t.Fatalf("per client header over HTTP and Envoy: %v", got)
	}
	// An anonymous descriptor no rule limits is OK, without limit headers.
	if res := call(t, c, "edge", 0, entries("route", "r2")); statusCodes(res) != "OK" || len(res.ResponseHeadersToAdd) != 0 {
		t.Fatalf("anonymous r2: %s %v", statusCodes(res), res.ResponseHeadersToAdd)
	}
}

// TestExplainStackedLimits: explain lists every limit that applies to a
// tenant on a route from an address (the rule in force first), each
// bucket's tokens in Redis, and marks the one that decides.
func TestExplainStackedLimits(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("orders", "*", "*", 10, slow)+
		rule("budget", "*", "*", 3, slow, "by: [{tenant: {}}]")+
		rule("per-address", "*", "list-orders", 6, slow, "by: [{clientAddress: {ipv4Prefix: 24}}]"))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	if res, _ := send(t, "GET", gw.url+"/orders", "shop-a"); res.StatusCode != 200 {
		t.Fatalf("GET /orders: %d", res.StatusCode)
	}
	status, body := getExplain(t, gw, "tenant=shop-a&route=list-orders&address=127.0.0.9")
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	var r explain.Report
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Limits) != 3 {
		t.Fatalf("limits %+v, want 3", r.Limits)
	}
	got := []string{}
	for _, l := range r.Limits {
		tokens := -1.0
		if l.Redis != nil {
			tokens = math.Round(l.Redis.Tokens)
		}
		got = append(got, fmt.Sprintf("%s %s %v %v", l.Name, l.Kind, tokens, l.Binds))
	}
	// The rule in force first, then the other kinds in their order.
	want := []string{"list-orders  9 false", "list-orders-by-address address/24/64 5 false", "all-by-tenant tenant 2 true"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("limits\n%v\nwant\n%v", got, want)
	}
	if !strings.Contains(r.Limits[1].Key, "a:127.0.0.0/24") {
		t.Errorf("address key %q", r.Limits[1].Key)
	}
	if status, body := getExplain(t, gw, "tenant=shop-a&route=list-orders&address=nope"); status != 400 || !strings.Contains(body, "address") {
		t.Errorf("bad address: %d %s", status, body)
	}
}
