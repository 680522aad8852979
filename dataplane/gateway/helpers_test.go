package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/dataplane/redisconf"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// echoUpstream answers every request with 200 and a description of what it
// received, so tests can check what the gateway forwarded.
func echoUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// An upstream that sends its own limit header: the gateway's must win.
		w.Header().Set("X-RateLimit-Remaining", "999")
		w.Header().Set("X-Upstream", "echo")
		fmt.Fprintf(w, "%s %s host=%s xff=%s xfh=%s xfp=%s key=%s tenant=%s body=%s\n", r.Method, r.URL.RequestURI(), r.Host,
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"),
			r.Header.Get("X-Api-Key"), r.Header.Get("X-Tollgate-Tenant"), body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// env is a temporary directory with a routes file and a rules directory.
type env struct {
	dir, routes, rules string
}

func newEnv(t *testing.T, upstream string, rules string) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{dir: dir, routes: filepath.Join(dir, "routes.yaml"), rules: filepath.Join(dir, "rules")}
	if err := os.Mkdir(e.rules, 0o755); err != nil {
		t.Fatal(err)
	}
	e.writeRoutes(t, fmt.Sprintf(`routes:
  - id: create-order
    methods: [POST]
    path: /orders
    upstream: %[1]s
  - id: list-orders
    methods: [GET]
    path: /orders
    upstream: %[1]s
  - id: api
    pathPrefix: /api
    stripPrefix: true
    upstream: %[1]s/v1
  - id: broken
    path: /broken
    upstream: http://127.0.0.1:1
`, upstream))
	e.writeRules(t, rules)
	return e
}

func (e *env) writeRoutes(t *testing.T, content string) {
	t.Helper()
	writeAtomic(t, e.routes, content)
}

func (e *env) writeRules(t *testing.T, content string) {
	t.Helper()
	writeAtomic(t, filepath.Join(e.rules, "rules.yaml"), content)
}

// writeAtomic replaces a file with a rename, as Kubernetes volume updates do.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// rule renders a RateLimitRule manifest.
func rule(name, tenant, route string, capacity int64, refill string, extra ...string) string {
	return fmt.Sprintf(`---
apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata:
  name: %s
spec:
  tenant: "%s"
  route: "%s"
  capacity: %d
  %s
%s
`, name, tenant, route, capacity, refill, indent(extra))
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// slow is a refill so slow that nothing refills during a test.
const slow = "refill: {tokens: 1, period: 168h}"

// running is a gateway serving in the background.
type running struct {
	*gateway.Gateway
	url  string
	stop func()
}

// options returns standalone gateway options for e.
func (e *env) options(redisAddr string) gateway.Options {
	var o gateway.Options
	// Start from the flag defaults, as the command does.
	fs := newFlagSet()
	o.AddFlags(fs)
	o.Listen, o.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	o.RoutesFile, o.RulesPath = e.routes, e.rules
	// The tests send tenant ids as keys; identity_test.go covers the
	// default (mapped) mode.
	o.Identity = gateway.IdentityHeaderIsTenant
	o.ReloadInterval = 20 * time.Millisecond
	o.Redis = redisconf.Options{Addrs: []string{redisAddr}, Mode: redisconf.ModeStandalone, PoolSize: 64, DialTimeout: 10 * time.Second}
	// Tests assert exact counts: a slow, shared test machine must not turn a
	// late Redis answer into a local decision.
	o.RedisTimeout = 30 * time.Second
	o.ShutdownGrace = 2 * time.Second
	return o
}

// start runs a gateway until the test ends.
func start(t *testing.T, o gateway.Options, log logr.Logger) *running {
	t.Helper()
	gw, err := gateway.New(o, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("gateway stopped with %v", err)
			}
		})
	}
	t.Cleanup(stop)
	waitFor(t, 10*time.Second, "gateway ready", gw.Ready)
	return &running{Gateway: gw, url: "http://" + gw.Addr(), stop: stop}
}

// partialCluster starts a Redis Cluster of three masters that keeps
// serving the slots of the live ones when a master dies
// (cluster-require-full-coverage no), its client, and master, the address
// of the master that holds a key.
func partialCluster(t *testing.T) (*redistest.Cluster, *redis.ClusterClient, func(key string) string) {
	t.Helper()
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	for _, n := range cluster.Nodes() {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	cc := cluster.Client(t)
	master := func(key string) string {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	return cluster, cc, master
}

// clusterGateways starts two gateways (--replicas 2) of e on cluster, with
// a short Redis timeout and breaker period so that a dead master's breaker
// opens and probes quickly.
func clusterGateways(t *testing.T, cluster *redistest.Cluster, e *env) []*running {
	t.Helper()
	var gws []*running
	for range 2 {
		o := e.options(cluster.Addrs()[0])
		o.Redis.Mode, o.Redis.Addrs = "cluster", cluster.Addrs()
		o.Replicas = 2
		o.RedisTimeout, o.BreakerOpenFor = 100*time.Millisecond, 200*time.Millisecond
		gws = append(gws, start(t, o, testLogger(t)))
	}
	return gws
}

// testLogger logs into the test's output.
func testLogger(t *testing.T) logr.Logger {
	return funcr.New(func(prefix, args string) { t.Log(prefix, args) }, funcr.Options{})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}

// send sends one request and returns the response with its body read.
func send(t *testing.T, method, url, key string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(body)
}

// scrape returns the gateway's /metrics text.
func scrape(t *testing.T, gw *running) string {
	t.Helper()
	res, err := client.Get("http://" + gw.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// metricValue returns the value of one series (name{labels} as Prometheus
// prints it, labels sorted), or 0 when absent.
func metricValue(t *testing.T, gw *running, series string) float64 {
	t.Helper()
	v, _ := findMetric(scrape(t, gw), series)
	return v
}

// findMetric returns the value of one series in a /metrics text, and
// whether it is there.
func findMetric(text, series string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
