package cmd

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/explain"
	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// runExplain runs `tollgate explain args...` and returns its output.
func runExplain(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCommand(t, append([]string{"explain"}, args...)...)
}

// TestExplainCommand: `tollgate explain` asks a real gateway (real
// redis-server) and prints the rule, its precedence step, the bucket's
// state in Redis, the breaker, N and the local fallback; -o json prints the
// gateway's report; bad flags and a wrong address give errors naming them.
func TestExplainCommand(t *testing.T) {
	srv := redistest.Start(t)
	gw := newTestSite(t, `apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: acme-orders, namespace: shop}
spec: {tenant: acme, route: list-orders, capacity: 5, refill: {tokens: 1, period: 168h}}
`).start(t, srv.Addr(), nil)
	req, _ := http.NewRequest("GET", "http://"+gw.Addr()+"/orders", nil)
	req.Header.Set("X-Api-Key", "acme")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /orders: %v %v", res, err)
	}
	res.Body.Close()

	out, err := runExplain(t, "--tenant", "acme", "--route", "list-orders", "--admin", gw.AdminAddr())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"rule in force:  shop/acme-orders (tenant acme, route list-orders)",
		"chosen by:    1 of 4: the rule for this tenant on this route",
		"rl:{acme}:list-orders  capacity 5",
		"Redis: 4 tokens now",
		"breaker:        closed",
		"replicas (N):   1, counted",
		"local fallback: rl:{acme}:list-orders: 4 tokens now; capacity 5 (1/N)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	t.Log(out)
	out, err = runExplain(t, "--tenant", "globex", "--route", "list-orders", "--admin", "http://"+gw.AdminAddr(), "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var r explain.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if r.Rule.Precedence != 5 || r.Buckets[0].Redis == nil || r.Buckets[0].Redis.Exists {
		t.Errorf("-o json: %+v", r)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--route", "list-orders", "--admin", gw.AdminAddr()}, "--tenant: required"},
		{[]string{"--tenant", "acme", "--admin", gw.AdminAddr()}, "--route: required"},
		{[]string{"--tenant", "a{b}", "--route", "list-orders", "--admin", gw.AdminAddr()}, "--tenant:"},
		{[]string{"--tenant", "acme", "--route", "list-orders", "-o", "yaml"}, "--output"},
		{[]string{"--tenant", "acme", "--route", "list-orders", "--admin", "127.0.0.1:1"}, "asking the gateway at 127.0.0.1:1"},
		{[]string{"--tenant", "acme", "--route", "list-orders", "--admin", gw.Addr()}, "answered 404"},
	} {
		if _, err := runExplain(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("explain %v: error %v, want %q", c.args, err, c.want)
		}
	}
}

// TestExplainShowsShareInForce: for a rule whose region shares follow the
// traffic, explain shows the share in force (the rebalancer's, in status),
// not spec's starting split, and the ring the gateway records demand in.
func TestExplainShowsShareInForce(t *testing.T) {
	srv := redistest.Start(t)
	gw := newTestSite(t, `apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata: {name: acme-orders, namespace: shop}
spec:
  tenant: acme
  route: list-orders
  capacity: 100
  refillPerSecond: 10
  regions: [{name: eu, percent: 50}, {name: us, percent: 50}]
status:
  regions: [{name: eu, percent: 80}, {name: us, percent: 20}]
`).start(t, srv.Addr(), func(o *gateway.Options) { o.Region = "eu" })
	out, err := runExplain(t, "--tenant", "acme", "--route", "list-orders", "--admin", gw.AdminAddr())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"region:       eu holds 80% of the rule (in force; the split follows traffic)",
		"demand:       recorded in rd:{shop/acme-orders}:shop/acme-orders@eu", // one ring per rule outside a Cluster
		"rl:{acme}:list-orders@eu  capacity 80",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
