package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
)

// TestConcurrencyClusterNodeLoss: in a Redis Cluster, a dead master is the
// problem of the tenants whose slots it holds, for concurrency limits as
// for token buckets. Two gateways, three masters; the master of tenant b's
// keys is killed and both gateways' breakers for it open. Tenant a, on a
// healthy master, keeps its exact limit in Redis (maxInFlight 2: both slots
// in Redis, the third request refused by Redis); tenant b follows its
// failure mode (LocalFallback: one slot per gateway, refused locally).
func TestConcurrencyClusterNodeLoss(t *testing.T) {
	cluster, cc, master := partialCluster(t)
	keyA := func(tenant string) string { return concurrency.Key(tenant, "create-order") }
	const tenantB = "shop-b"
	keyB := concurrency.Key(tenantB, "list-orders")
	deadAddr := master(keyB)
	tenantA := ""
	for i := range 100 {
		if tenant := "shop-a" + strconv.Itoa(i); master(keyA(tenant)) != deadAddr {
			tenantA = tenant
			break
		}
	}
	up := newHeldUpstream(t)
	conc := "concurrency: {maxInFlight: 2, leaseSeconds: 60}"
	gws := clusterGateways(t, cluster, newEnv(t, up.URL, rule("a", tenantA, "create-order", 1000, slow, conc)+rule("b", tenantB, "list-orders", 1000, slow, conc)))

	for _, n := range cluster.Nodes() {
		if n.Addr() == deadAddr {
			n.Kill()
		}
	}
	// Tenant b's token bucket (any route: its keys share the dead master)
	// opens each gateway's breaker for that master; /broken answers 502
	// without holding anything at the upstream.
	for _, gw := range gws {
		waitFor(t, 20*time.Second, "the dead master's breaker open", func() bool {
			send(t, "GET", gw.url+"/broken", tenantB)
			return gw.BreakerState() == "open"
		})
	}

	hold(t, gws[0], up, "POST", tenantA)
	if n := slotCount(t, cc, keyA(tenantA)); n != 1 {
		t.Fatalf("tenant a on a healthy master, one request held: %d slots in Redis, want 1", n)
	}
	hold(t, gws[1], up, "POST", tenantA)
	if n := slotCount(t, cc, keyA(tenantA)); n != 2 {
		t.Fatalf("tenant a, two requests held: %d slots in Redis, want 2", n)
	}
	res, body := send(t, "POST", gws[0].url+"/orders", tenantA)
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "concurrency limit exceeded") {
		t.Fatalf("tenant a's third request: %d %s, want 429 for concurrency", res.StatusCode, body)
	}
	for i, gw := range gws {
		redis := metricValue(t, gw, `tollgate_gateway_concurrency_rejections_total{result="rejected",route="create-order",source="redis"}`)
		local := metricValue(t, gw, `tollgate_gateway_concurrency_rejections_total{result="rejected",route="create-order",source="local"}`)
		if want := float64(1 - i); redis != want || local != 0 {
			t.Fatalf("gateway %d: tenant a's refusals counted %v from Redis and %v locally, want %v and 0", i, redis, local, want)
		}
	}

	// Tenant b: LocalFallback, one slot per gateway (2 / 2 replicas).
	hold(t, gws[0], up, "GET", tenantB)
	res, body = send(t, "GET", gws[0].url+"/orders", tenantB)
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "concurrency limit exceeded") {
		t.Fatalf("tenant b's second request on one gateway: %d %s, want 429 from the local share", res.StatusCode, body)
	}
	if v := metricValue(t, gws[0], `tollgate_gateway_concurrency_rejections_total{result="rejected",route="list-orders",source="local"}`); v != 1 {
		t.Fatalf("tenant b's local refusals: %v, want 1", v)
	}
	up.open()
}
