package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/procs/cluster"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// The tests in this file run the Redis Cluster's own operations while two
// gateways decide: a slot holding live buckets migrating to another master,
// a master added and the slots rebalanced onto it, a master failed over to
// its replica. Each tenant's bucket starts full and does not refill during
// the test; its capacity is sent while the operation runs, then a few more
// requests: every one of the first must be admitted (a token refused is a
// token lost), every one of the others refused (a token admitted twice is
// one more), nothing answered but 200 or 429, and Redis holds the buckets
// empty at the end.

const (
	opsTenants  = 12
	opsCapacity = 40
	opsAfter    = 5 // requests per tenant after the operation: all refused
)

// opsCluster starts a cluster of three masters (each with replicas) and
// two gateways on it, with a Redis deadline (--redis-timeout and
// --redis-max-wait) of timeout: long enough that a loaded machine does not
// turn a late answer into a refusal. The rules give every tenant
// ops-0..ops-11 opsCapacity tokens that do not refill.
func opsCluster(t *testing.T, replicas int, timeout time.Duration) (*redistest.Cluster, []*running, []string) {
	t.Helper()
	c := redistest.StartClusterWith(t, cluster.Options{Masters: 3, Replicas: replicas})
	var tenants []string
	var rules string
	for i := range opsTenants {
		tenant := "ops-" + strconv.Itoa(i)
		tenants = append(tenants, tenant)
		rules += rule(tenant, tenant, "create-order", opsCapacity, slow)
	}
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rules)
	var gws []*running
	for range 2 {
		o := e.options(c.Addrs()[0])
		o.Redis.Mode, o.Redis.Addrs = "cluster", c.Addrs()
		o.Replicas = 2
		o.RedisTimeout, o.RedisMaxWait, o.BreakerOpenFor = timeout, timeout, 200*time.Millisecond
		gws = append(gws, start(t, o, testLogger(t)))
	}
	return c, gws, tenants
}

// opsResult is what the load saw of one tenant.
type opsResult struct {
	admitted, refused int // while the operation ran (capacity sent)
	after             int // admitted after it
	other             []string
}

// underOperation takes one token of each tenant (so that every bucket is
// in Redis before the operation), sends each tenant the rest of its
// capacity over spread, alternating between the gateways, while op runs,
// then opsAfter requests each once op has returned.
func underOperation(t *testing.T, gws []*running, tenants []string, spread time.Duration, op func() error) map[string]*opsResult {
	t.Helper()
	res := map[string]*opsResult{}
	for _, tenant := range tenants {
		if s := post(gws[0], tenant); s != "200" {
			t.Fatalf("%s: first request %s", tenant, s)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ti, tenant := range tenants {
		r := &opsResult{admitted: 1}
		res[tenant] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			every := spread / opsCapacity
			for i := range opsCapacity - 1 {
				time.Sleep(every)
				status := post(gws[(i+ti)%len(gws)], tenant)
				mu.Lock()
				switch status {
				case "200":
					r.admitted++
				case "429":
					r.refused++
				default:
					r.other = append(r.other, status)
				}
				mu.Unlock()
			}
		}()
	}
	opErr := op()
	wg.Wait()
	if opErr != nil {
		t.Fatalf("the operation failed: %v", opErr)
	}
	for _, tenant := range tenants {
		for i := range opsAfter {
			if status := post(gws[i%len(gws)], tenant); status == "200" {
				res[tenant].after++
			}
		}
	}
	return res
}

// post sends one request for tenant and returns its status ("error: ..."
// for a transport error).
func post(gw *running, tenant string) string {
	req, _ := http.NewRequest("POST", gw.url+"/orders", nil)
	req.Header.Set("X-Api-Key", tenant)
	resp, err := client.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// checkExact fails the test for any token lost or doubled, any answer but
// 200 or 429, any local decision, and any bucket Redis does not hold empty.
func checkExact(t *testing.T, cc *redis.ClusterClient, gws []*running, res map[string]*opsResult) {
	t.Helper()
	ctx := context.Background()
	for tenant, r := range res {
		if r.admitted != opsCapacity || r.after != 0 || len(r.other) > 0 {
			t.Errorf("%s: admitted %d of its %d tokens during the operation (%d refused), %d of %d after it, other answers %v; want all, none, none",
				tenant, r.admitted, opsCapacity, r.refused, r.after, opsAfter, r.other)
		}
		st, err := limiter.Peek(ctx, cc, limiter.Key(tenant, "create-order"))
		if err != nil || !st.Found || st.Tokens > 0.01 {
			t.Errorf("%s: Redis holds %+v (%v), want the bucket empty", tenant, st, err)
		}
	}
	for i, gw := range gws {
		for _, result := range []string{"allowed", "rejected"} {
			series := `tollgate_gateway_decisions_total{result="` + result + `",route="create-order",source="local"}`
			if v := metricValue(t, gw, series); v != 0 {
				t.Errorf("gateway %d: %v %s decisions by the local fallback, want 0", i, v, result)
			}
		}
	}
}

// tenantsOn returns the tenants whose buckets the master at addr holds.
func tenantsOn(t *testing.T, cc *redis.ClusterClient, tenants []string, addr string) []string {
	t.Helper()
	var on []string
	for _, tenant := range tenants {
		c, err := cc.MasterForKey(context.Background(), "rl:{"+tenant+"}")
		if err != nil {
			t.Fatal(err)
		}
		if c.Options().Addr == addr {
			on = append(on, tenant)
		}
	}
	return on
}

// TestClusterSlotMigrationUnderLoad: the slot of a tenant with a live
// bucket moves to another master while both gateways decide for it (and
// for eleven other tenants): held migrating with the bucket still on the
// old master, then with it moved, then handed over. Redis answers ASK and
// TRYAGAIN meanwhile, and MOVED after; the gateways must follow them.
func TestClusterSlotMigrationUnderLoad(t *testing.T) {
	c, gws, tenants := opsCluster(t, 0, 2*time.Second)
	cc := c.Client(t)
	ctx := context.Background()
	slot, err := c.Slot("rl:{ops-0}")
	if err != nil {
		t.Fatal(err)
	}
	from, _ := c.Owner(slot)
	ms, _ := c.Masters()
	to := ms[0].Addr
	if to == from.Addr {
		to = ms[1].Addr
	}
	res := underOperation(t, gws, tenants, 2*time.Second, func() error {
		time.Sleep(200 * time.Millisecond)
		return c.MoveSlot(ctx, slot, to, cluster.MoveOptions{Hold: 600 * time.Millisecond})
	})
	if o, _ := c.Owner(slot); o.Addr != to {
		t.Fatalf("slot %d is on %s, want %s", slot, o.Addr, to)
	}
	checkExact(t, cc, gws, res)
}

// TestClusterFailoverUnderLoad: a master holding live buckets is failed
// over to its replica (CLUSTER FAILOVER on the replica: the master stops
// writes until the replica has caught up, then the roles swap) while both
// gateways decide. The old master answers MOVED, the new one NOSCRIPT
// once (scripts are not replicated): the gateways must follow both and
// lose no token; the new master runs the script's text (EVAL) at most once
// per pipeline that met the NOSCRIPT.
//
// The deadline is long (10 s): a manual failover pauses the master's writes
// until the replica has taken over, 0.5-4 s on this machine, and a call
// that outlives its deadline is refused (breaker closed) or decided
// locally (open), as for any Redis that stalls; the benchmark's scale-out
// scenario measures that with the gateway's default deadlines.
func TestClusterFailoverUnderLoad(t *testing.T) {
	c, gws, tenants := opsCluster(t, 1, 10*time.Second)
	cc := c.Client(t)
	from, err := cc.MasterForKey(context.Background(), "rl:{ops-0}")
	if err != nil {
		t.Fatal(err)
	}
	var promoted string
	res := underOperation(t, gws, tenants, 2*time.Second, func() (err error) {
		time.Sleep(500 * time.Millisecond)
		promoted, err = c.Failover(from.Options().Addr)
		return err
	})
	checkExact(t, cc, gws, res)
	n := c.Node(promoted)
	if n == nil {
		t.Fatalf("no node at %s", promoted)
	}
	rc := n.Client()
	defer rc.Close()
	evals := commandCalls(t, rc, "eval")
	// 4 pipelines per gateway (the default) may each meet the NOSCRIPT.
	if evals < 1 || evals > 8 {
		t.Errorf("the new master ran the script's text %d times, want 1 to 8 (once per pipeline that met NOSCRIPT)", evals)
	}
	t.Logf("failover %s -> %s: the new master ran EVAL %d times, EVALSHA %d times", from.Options().Addr, promoted, evals, commandCalls(t, rc, "evalsha"))
}

// commandCalls is the calls of one command on a node since it started
// (INFO commandstats).
func commandCalls(t *testing.T, rc *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// TestClusterAddMasterUnderLoad: a fourth master joins while both
// gateways decide; the slots of the live buckets are moved onto it (held
// migrating as a slow reshard is), then "redis-cli --cluster rebalance"
// spreads the rest. The gateways learn of the new node from MOVED and ASK
// replies, load the script there (NOSCRIPT, once per pipeline), and lose
// no token.
func TestClusterAddMasterUnderLoad(t *testing.T) {
	c, gws, tenants := opsCluster(t, 0, 2*time.Second)
	cc := c.Client(t)
	ctx := context.Background()
	res := underOperation(t, gws, tenants, 3*time.Second, func() error {
		n, err := c.AddMaster()
		if err != nil {
			return err
		}
		for _, tenant := range tenants[:3] {
			slot, err := c.Slot("rl:{" + tenant + "}")
			if err != nil {
				return err
			}
			if err := c.MoveSlot(ctx, slot, n.Addr(), cluster.MoveOptions{Hold: 200 * time.Millisecond}); err != nil {
				return err
			}
		}
		return c.Rebalance()
	})
	checkExact(t, cc, gws, res)
	ms, err := c.Masters()
	if err != nil || len(ms) != 4 {
		t.Fatalf("%d masters after adding one (%v)", len(ms), err)
	}
	if on := tenantsOn(t, cc, tenants, c.Nodes()[len(c.Nodes())-1].Addr()); len(on) < 3 {
		t.Errorf("the new master holds the buckets of %v, want ops-0, ops-1 and ops-2 at least", on)
	}
}
