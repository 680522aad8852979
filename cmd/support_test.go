package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/dataplane/redisconf"
	"github.com/tollgate-dev/tollgate/dataplane/top"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

const adminToken = "cli-test-token-0123456789abcdef"

// testSite is a routes file and a rules file for gateways in tests.
type testSite struct {
	dir, routes, rules, tokens string
}

// newTestSite writes the routes (create-order: POST /orders, list-orders:
// GET /orders, to an upstream answering 200), rules and an admin token
// file.
func newTestSite(t *testing.T, rules string) *testSite {
	t.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(upstream.Close)
	s := &testSite{dir: t.TempDir()}
	s.routes, s.rules, s.tokens = filepath.Join(s.dir, "routes.yaml"), filepath.Join(s.dir, "rules.yaml"), filepath.Join(s.dir, "tokens")
	for path, content := range map[string]string{
		s.routes: "routes:\n  - id: create-order\n    methods: [POST]\n    path: /orders\n    upstream: " + upstream.URL +
			"\n  - id: list-orders\n    methods: [GET]\n    path: /orders\n    upstream: " + upstream.URL + "\n",
		s.rules:  rules,
		s.tokens: "cli " + adminToken + "\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// start runs a standalone gateway of the site on Redis at redisAddr (tune
// changes its options) until the test ends.
func (s *testSite) start(t *testing.T, redisAddr string, tune func(*gateway.Options)) *gateway.Gateway {
	t.Helper()
	var o gateway.Options
	o.AddFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
	o.Listen, o.AdminListen, o.RoutesFile, o.RulesPath = "127.0.0.1:0", "127.0.0.1:0", s.routes, s.rules
	o.Identity = gateway.IdentityHeaderIsTenant
	o.AdminTokenFile = s.tokens
	o.Redis = redisconf.Options{Addrs: []string{redisAddr}, Mode: redisconf.ModeStandalone, PoolSize: 8, DialTimeout: 10 * time.Second}
	o.RedisTimeout = 10 * time.Second
	if tune != nil {
		tune(&o)
	}
	gw, err := gateway.New(o, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); !gw.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("gateway not ready")
		}
	}
	return gw
}

// runCommand runs `tollgate args...` and returns its output.
func runCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot("tollgate")
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

// admittedBy sends requests for tenant on create-order to each gateway in
// turn until every gateway refused twice in a row, and returns how many
// each admitted.
func admittedBy(t *testing.T, gws []*gateway.Gateway, tenant string) []int {
	t.Helper()
	got := make([]int, len(gws))
	refused := make([]int, len(gws))
	for i := 0; ; i = (i + 1) % len(gws) {
		done := true
		for _, r := range refused {
			done = done && r >= 2
		}
		if done {
			return got
		}
		if refused[i] >= 2 {
			continue
		}
		req, _ := http.NewRequest("POST", "http://"+gws[i].Addr()+"/orders", nil)
		req.Header.Set("X-Api-Key", tenant)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		switch res.StatusCode {
		case 200:
			got[i]++
			refused[i] = 0
		case 429:
			refused[i]++
		default:
			t.Fatalf("status %d", res.StatusCode)
		}
		if sum(got) > 10_000 {
			t.Fatal("the bucket never empties")
		}
	}
}

func sum(ns []int) int {
	s := 0
	for _, n := range ns {
		s += n
	}
	return s
}

// TestResetCommandAcrossGateways: `tollgate reset` against three gateways
// (two in region eu, one in us) on a real redis-server sets every key a
// bucket uses (shards, regions, a quota's shards) to exactly what it was
// asked, and no gateway keeps refusing from what it cached before.
func TestResetCommandAcrossGateways(t *testing.T) {
	t.Setenv("TOLLGATE_ADMIN_TOKEN", "")
	srv := redistest.Start(t)
	const slow = "refill: {tokens: 1, period: 168h}"
	rule := func(name, spec string) string {
		return "---\napiVersion: ratelimit.tollgate.dev/v1alpha1\nkind: RateLimitRule\nmetadata: {name: " + name + ", namespace: shop}\nspec: " + spec + "\n"
	}
	site := newTestSite(t, rule("plain", "{tenant: plain, route: create-order, capacity: 10, "+slow+"}")+
		rule("sharded", "{tenant: sharded, route: create-order, capacity: 12, hotKey: {shards: 4}, "+slow+"}")+
		rule("geo", "{tenant: geo, route: create-order, capacity: 20, hotKey: {shards: 2}, regions: [{name: eu, percent: 70}, {name: us, percent: 30}], "+slow+"}")+
		rule("quota", "{tenant: quota, route: create-order, capacity: 1000, refillPerSecond: 1000, quota: {limit: 10, period: Day}, regions: [{name: eu, percent: 50}, {name: us, percent: 50}]}")+
		rule("sq", "{tenant: sq, route: create-order, capacity: 1000, refillPerSecond: 1000, hotKey: {shards: 2}, quota: {limit: 8, period: Day}}"))
	var gws []*gateway.Gateway
	for _, region := range []string{"eu", "eu", "us"} {
		gws = append(gws, site.start(t, srv.Addr(), func(o *gateway.Options) { o.Region, o.Replicas = region, 3 }))
	}
	addrs := fmt.Sprintf("--gateways=%s,%s,http://%s", gws[0].AdminAddr(), gws[1].AdminAddr(), gws[2].AdminAddr())
	reset := func(tenant string, extra ...string) string {
		t.Helper()
		out, err := runCommand(t, append([]string{"reset", "--tenant", tenant, "--route", "create-order", addrs, "--token-file", site.tokens}, extra...)...)
		if err != nil {
			t.Fatalf("reset %s %v: %v\n%s", tenant, extra, err, out)
		}
		return out
	}
	for _, c := range []struct {
		tenant string
		args   []string
		all    int // admitted by the three gateways together after the reset
		eu, us int // or by region, when all is 0
	}{
		// No regions: one bucket (or its shards) for all three.
		{"plain", nil, 10, 0, 0},
		{"plain", []string{"--tokens", "4"}, 4, 0, 0},
		{"sharded", nil, 12, 0, 0},
		{"sharded", []string{"--tokens", "7"}, 7, 0, 0},
		// eu 70%, us 30%: eu's two gateways share 14 (two shards of 7), us
		// has 6; of 10 tokens eu gets 7 and us 3.
		{"geo", nil, 0, 14, 6},
		{"geo", []string{"--tokens", "10"}, 0, 7, 3},
		// A quota of 10, half each; then 4 left: 2 each.
		{"quota", []string{"--quota"}, 0, 5, 5},
		{"quota", []string{"--quota", "--tokens", "4"}, 0, 2, 2},
		// A quota of 8 over two shards (4 each): 3 left.
		{"sq", []string{"--quota", "--tokens", "3"}, 3, 0, 0},
	} {
		admittedBy(t, gws, c.tenant) // drain: every gateway has seen it empty
		out := reset(c.tenant, c.args...)
		// The first gateway set the keys (of eu, or of all); the second
		// (eu) and the third (us, or all) must admit what it set although
		// they had cached the bucket as empty.
		got := admittedBy(t, gws[1:], c.tenant)
		if rest := admittedBy(t, gws, c.tenant); sum(rest) != 0 {
			t.Errorf("%s %v: %v more admitted once the others refused", c.tenant, c.args, rest)
		}
		if c.all > 0 && sum(got) != c.all {
			t.Errorf("%s %v: admitted %v (%d), want %d in all\n%s", c.tenant, c.args, got, sum(got), c.all, out)
		}
		if c.all == 0 && (got[0] != c.eu || got[1] != c.us) {
			t.Errorf("%s %v: eu admitted %d, us %d; want %d and %d\n%s", c.tenant, c.args, got[0], got[1], c.eu, c.us, out)
		}
	}

	out := reset("geo", "--tokens", "10")
	for _, want := range []string{"tenant geo on route create-order, bucket of region eu (70%) (rule shop/geo), by cli:",
		"rl:geo:create-order@eu:0  0 -> 4 tokens (full: 7)", "total  0 -> 7 (full: 14)", "region us (30%)", "dropped what it held for the bucket (2 keys)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	out, err := runCommand(t, "reset", "--tenant", "plain", "--route", "create-order", addrs, "--token-file", site.tokens, "-o", "json")
	var run resetRun
	if err != nil || json.Unmarshal([]byte(out), &run) != nil || len(run.Reset) != 1 || len(run.Forgot) != 2 || run.Reset[0].After != 10 {
		t.Errorf("-o json: %v\n%s", err, out)
	}

	bad := site.dir + "/wrong"
	if err := os.WriteFile(bad, []byte("another-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant", "plain", "--route", "create-order", addrs}, "--token-file: required"},
		{[]string{"--tenant", "plain", "--route", "create-order", addrs, "--token-file", bad}, "401 Unauthorized: the bearer token is not one of --admin-token-file's"},
		{[]string{"--tenant", "plain", "--route", "create-order", addrs, "--token-file", site.tokens, "--tokens", "11"}, "tokens: 11 is more than the capacity 10"},
		{[]string{"--tenant", "plain", "--route", "create-order", addrs, "--token-file", site.tokens, "--tokens", "-1"}, "--tokens: want 0 to"},
		{[]string{"--tenant", "pl{ain", "--route", "create-order", addrs, "--token-file", site.tokens}, "--tenant:"},
		{[]string{"--tenant", "plain", "--route", "create-order", addrs, "--token-file", site.tokens, "--quota"}, "part: the rule in force (shop/plain) has no spec.quota"},
		{[]string{"--tenant", "plain", "--route", "create-order", "--gateways", "ftp://x", "--token-file", site.tokens}, `--gateways: "ftp://x" is not host:port`},
	} {
		if out, err := runCommand(t, append([]string{"reset"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("reset %v: %v, want %q\n%s", c.args, err, c.want, out)
		}
	}
}

// TestTopCommand: `tollgate top` merges the reports of three gateways:
// every refusal counted once, the rule in force named, the distinct
// tenants estimated; a gateway that does not answer is named, not counted.
func TestTopCommand(t *testing.T) {
	srv := redistest.Start(t)
	site := newTestSite(t, `apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: tiny, namespace: shop}
spec: {tenant: "*", route: create-order, capacity: 1, refill: {tokens: 1, period: 168h}}
`)
	var gws []*gateway.Gateway
	for range 3 {
		gws = append(gws, site.start(t, srv.Addr(), nil))
	}
	// tenant-i sends 3*i+2 requests spread over the gateways: one admitted
	// in all, the others refused.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 3*i + 2 {
				req, _ := http.NewRequest("POST", "http://"+gws[j%3].Addr()+"/orders", nil)
				req.Header.Set("X-Api-Key", fmt.Sprintf("tenant-%d", i))
				if res, err := http.DefaultClient.Do(req); err == nil {
					res.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	addrs := "--gateways=" + gws[0].AdminAddr() + "," + gws[1].AdminAddr() + "," + gws[2].AdminAddr()
	out, err := runCommand(t, "top", addrs, "-o", "json", "--limit", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var r top.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Rejections != 3*28+8 || r.Admissions != 8 || len(r.Entries) != 3 || r.Entries[0].Tenant != "tenant-7" || r.Entries[0].Rejections != 22 ||
		r.Entries[0].Error != 0 || r.Entries[2].Tenant != "tenant-5" || r.Floor != 13 {
		t.Errorf("merged: %+v", r)
	}
	if rule := r.Entries[0].Rule; rule == nil || rule.Source != "shop/tiny" || rule.Rate != "1/168h" {
		t.Errorf("the rule in force: %+v", rule)
	}
	if n := int(r.RefusedTenants + 0.5); n != 8 {
		t.Errorf("distinct tenants refused: %v, want 8", r.RefusedTenants)
	}

	out, err = runCommand(t, "top", addrs+",127.0.0.1:1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"on 3 gateways", "92 refused, 8 admitted; 8 distinct tenants refused", "warning: not counted: asking the gateway at 127.0.0.1:1",
		"TENANT    ROUTE         REFUSED  ADMITTED (AT LEAST)  RULE IN FORCE", "tenant-7  create-order  22", "shop/tiny (*, create-order): capacity 1, 1/168h",
		"pairs not listed were refused at most 0 times"} {
		if !strings.Contains(out, want) {
			t.Errorf("the text lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gateways", "127.0.0.1:1"}, "no gateway answered"},
		{[]string{addrs, "-o", "yaml"}, "--output"},
		{[]string{addrs, "--limit", "0"}, "--limit"},
	} {
		if _, err := runCommand(t, append([]string{"top"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("top %v: %v, want %q", c.args, err, c.want)
		}
	}
}
