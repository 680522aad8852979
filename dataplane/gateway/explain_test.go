package gateway_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/explain"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// getExplain asks the gateway's /debug/explain.
func getExplain(t *testing.T, gw *running, query string) (int, string) {
	t.Helper()
	res, err := client.Get("http://" + gw.AdminAddr() + "/debug/explain?" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func explainOf(t *testing.T, gw *running, tenant, route string) explain.Report {
	t.Helper()
	status, body := getExplain(t, gw, url.Values{"tenant": {tenant}, "route": {route}}.Encode())
	if status != http.StatusOK {
		t.Fatalf("explain %s %s: %d %s", tenant, route, status, body)
	}
	var r explain.Report
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("explain %s %s: %v\n%s", tenant, route, err, body)
	}
	return r
}

// TestExplain: /debug/explain names the rule in force and the precedence
// step that chose it, reads the bucket's live state in Redis without taking
// a token or touching its expiry, and shows the local fallback's mirror of
// it; it never shows the API key (mapped mode), and bad queries get 400
// naming the field.
func TestExplain(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("acme-orders", "acme", "list-orders", 5, slow)+
		rule("acme-any", "acme", "*", 50, slow)+
		rule("any-orders", "*", "list-orders", 7, slow))
	keys := e.dir + "/keys.yaml"
	writeAtomic(t, keys, "keys:\n  - tenant: acme\n    key: sk-acme-0123456789abcdef\n")
	o := e.defaultIdentity(srv.Addr())
	o.APIKeysFile = keys
	gw := start(t, o, testLogger(t))

	for range 2 {
		if res, body := send(t, "GET", gw.url+"/orders", "sk-acme-0123456789abcdef"); res.StatusCode != 200 {
			t.Fatalf("GET /orders: %d %s", res.StatusCode, body)
		}
	}
	rdb := srv.Client(t)
	const key, hash = "rl:{acme}:list-orders", "rl:{acme}"
	before, err := limiter.Peek(t.Context(), rdb, key)
	if err != nil || !before.Found {
		t.Fatalf("Peek: %+v %v", before, err)
	}
	ttlBefore := rdb.PTTL(t.Context(), hash).Val()

	status, body := getExplain(t, gw, "tenant=acme&route=list-orders")
	if status != 200 {
		t.Fatalf("explain: %d %s", status, body)
	}
	if strings.Contains(body, "sk-acme") {
		t.Fatalf("the explanation shows the API key:\n%s", body)
	}
	r := explainOf(t, gw, "acme", "list-orders")
	if r.Rule.Precedence != 1 || !strings.Contains(r.Rule.Source, "acme-orders") || r.Rule.Capacity != 5 || r.Rule.FailureMode != "LocalFallback" {
		t.Errorf("rule %+v, want acme-orders at precedence 1", r.Rule)
	}
	if !r.RouteKnown || r.Limiter != "redis" || r.Breaker != "closed" || r.Replicas != 1 || !r.ReplicasCounted || r.SnapshotVersion == 0 {
		t.Errorf("report %+v", r)
	}
	if len(r.Buckets) != 1 {
		t.Fatalf("buckets %+v, want 1", r.Buckets)
	}
	b := r.Buckets[0]
	if b.Key != key || b.Capacity != 5 || b.PrefetchBatch != 0 || b.Redis == nil || b.Breaker != "closed" {
		t.Fatalf("bucket %+v", b)
	}
	if st := b.Redis; !st.Exists || math.Abs(st.Tokens-3) > 0.01 || st.TTLMs <= 0 || st.Error != "" || st.Hash != hash || st.Field != "list-orders" {
		t.Errorf("Redis state %+v, want 3 tokens with a TTL", st)
	}
	if lf := r.LocalFallback; lf.Key != key || !lf.Exists || math.Abs(lf.Tokens-3) > 0.01 || lf.Capacity != 5 {
		t.Errorf("local fallback %+v, want the mirror of Redis's 3 tokens", lf)
	}
	if after, err := limiter.Peek(t.Context(), rdb, key); err != nil || after != before {
		t.Errorf("explaining changed the bucket: %+v then %+v (%v)", before, after, err)
	}
	if ttl := rdb.PTTL(t.Context(), hash).Val(); ttl > ttlBefore {
		t.Errorf("explaining extended the TTL: %v then %v", ttlBefore, ttl)
	}
	// The three tokens are still there for requests.
	for i, want := range []int{200, 200, 200, 429} {
		if res, _ := send(t, "GET", gw.url+"/orders", "sk-acme-0123456789abcdef"); res.StatusCode != want {
			t.Fatalf("request %d after explaining: %d, want %d", i+1, res.StatusCode, want)
		}
	}

	for _, c := range []struct {
		tenant, route string
		precedence    int
		source        string
		capacity      int64
	}{
		{"acme", "create-order", 2, "acme-any", 50},
		{"globex", "list-orders", 3, "any-orders", 7},
		{"globex", "create-order", 5, "", 20},
	} {
		r := explainOf(t, gw, c.tenant, c.route)
		if r.Rule.Precedence != c.precedence || !strings.Contains(r.Rule.Source, c.source) || r.Rule.Capacity != c.capacity {
			t.Errorf("%s on %s: rule %+v, want %q at precedence %d", c.tenant, c.route, r.Rule, c.source, c.precedence)
		}
		if st := r.Buckets[0].Redis; st == nil || st.Exists || st.Tokens != float64(c.capacity) || (c.tenant == "globex") != (st.TTLMs == -2) {
			t.Errorf("%s on %s: an unused bucket reads %+v, want full (and no hash for globex)", c.tenant, c.route, st)
		}
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 1 {
		t.Errorf("Redis holds %d keys after explaining unused buckets, want 1", n)
	}
	if r := explainOf(t, gw, "acme", "no-such-route"); r.RouteKnown {
		t.Error("an unknown route reads as known")
	}

	for _, c := range []struct{ query, want string }{
		{"route=list-orders", "tenant: required"},
		{"tenant=acme", "route: required"},
		{"tenant=ac%20me&route=list-orders", "tenant:"},
		{"tenant=acme&route=a/b", "route:"},
		{"tenant=acme&route=list-orders&key=sk-acme-0123456789abcdef", "key: unknown parameter"},
	} {
		status, body := getExplain(t, gw, c.query)
		if status != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.query, status, body, c.want)
		}
		if strings.Contains(body, "sk-acme") {
			t.Errorf("%s: the error echoes the key: %s", c.query, body)
		}
	}
	res, err := client.Post("http://"+gw.AdminAddr()+"/debug/explain?tenant=acme&route=list-orders", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", res.StatusCode)
	}
}

// TestExplainShardsPrefetchOutage: a sharded rule shows one key per shard
// with its share; a prefetching rule shows the tokens this gateway holds;
// with Redis killed, the breaker is open, Redis unreadable (said so, without
// hanging) and the local fallback's bucket is what decides.
func TestExplainShardsPrefetchOutage(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("sharded", "acme", "list-orders", 400, "refillPerSecond: 40", "hotKey: {shards: 4}")+
		rule("prefetched", "acme", "create-order", 1000, slow, "hotKey: {prefetch: Fixed, batch: 10}"))
	o := e.options(srv.Addr())
	o.PrefetchTTL = time.Minute // the held tokens must outlive a slow machine
	o.RedisTimeout = 2 * time.Second
	gw := start(t, o, testLogger(t))

	r := explainOf(t, gw, "acme", "list-orders")
	if r.Rule.Shards != 4 || len(r.Buckets) != 4 || r.Capacity != 400 {
		t.Fatalf("sharded rule: %+v", r)
	}
	for i, b := range r.Buckets {
		if b.Shard == nil || *b.Shard != i || b.Key != "rl:acme:list-orders:"+string(rune('0'+i)) || b.Capacity != 100 || b.RefillPerSecond != 10 {
			t.Errorf("shard %d: %+v", i, b)
		}
	}
	if lf := r.LocalFallback; lf.Key != "rl:{acme}:list-orders" || lf.Capacity != 400 {
		t.Errorf("the local fallback of a sharded rule: %+v, want the whole rule's bucket", lf)
	}

	if res, body := send(t, "POST", gw.url+"/orders", "acme"); res.StatusCode != 200 {
		t.Fatalf("POST /orders: %d %s", res.StatusCode, body)
	}
	r = explainOf(t, gw, "acme", "create-order")
	if b := r.Buckets[0]; b.PrefetchBatch != 10 || b.Prefetched != 9 || b.PrefetchExpiresInMs <= 0 || b.Redis == nil || math.Abs(b.Redis.Tokens-990) > 0.01 {
		t.Errorf("prefetching rule: %+v (Redis %+v), want 9 of a batch of 10 held and 990 in Redis", b, b.Redis)
	}

	srv.Kill()
	waitFor(t, 20*time.Second, "the breaker to open", func() bool {
		send(t, "POST", gw.url+"/orders", "acme")
		return gw.BreakerState() == "open"
	})
	for range 3 {
		if res, body := send(t, "POST", gw.url+"/orders", "acme"); res.StatusCode != 200 {
			t.Fatalf("POST /orders during the outage: %d %s", res.StatusCode, body)
		}
	}
	start := time.Now()
	r = explainOf(t, gw, "acme", "create-order")
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("explaining with Redis down took %v", elapsed)
	}
	if r.Breaker != "open" || r.Nodes[""] != "open" {
		t.Errorf("breaker %q, nodes %v, want open", r.Breaker, r.Nodes)
	}
	for _, b := range r.Buckets {
		if b.Redis == nil || b.Redis.Error == "" || b.Breaker != "open" {
			t.Errorf("bucket %s with Redis down: %+v (Redis %+v)", b.Key, b, b.Redis)
		}
	}
	// The local bucket is what decides now: explaining takes nothing from
	// it, a request takes one token.
	lf := r.LocalFallback
	if !lf.Exists || lf.Capacity != 1000 || lf.Tokens > 999 {
		t.Fatalf("local fallback %+v: want the bucket that decided during the outage", lf)
	}
	if again := explainOf(t, gw, "acme", "create-order").LocalFallback; math.Abs(again.Tokens-lf.Tokens) > 0.01 {
		t.Errorf("explaining twice: %v then %v local tokens", lf.Tokens, again.Tokens)
	}
	if res, body := send(t, "POST", gw.url+"/orders", "acme"); res.StatusCode != 200 {
		t.Fatalf("POST /orders during the outage: %d %s", res.StatusCode, body)
	}
	if after := explainOf(t, gw, "acme", "create-order").LocalFallback; math.Abs(after.Tokens-(lf.Tokens-1)) > 0.01 {
		t.Errorf("a request during the outage: %v then %v local tokens, want one less", lf.Tokens, after.Tokens)
	}
}

// TestExplainRegion: a gateway of a region the rule gives a share shows the
// region, its percentage and the region's own bucket key with the share's
// capacity and rate, in Redis and in the local fallback.
func TestExplainRegion(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("split", "acme", "list-orders", 100, "refillPerSecond: 10",
		"regions: [{name: eu, percent: 60}, {name: us, percent: 40}]"))
	o := e.options(srv.Addr())
	o.Region = "eu"
	gw := start(t, o, testLogger(t))
	if res, body := send(t, "GET", gw.url+"/orders", "acme"); res.StatusCode != 200 {
		t.Fatalf("GET /orders: %d %s", res.StatusCode, body)
	}
	r := explainOf(t, gw, "acme", "list-orders")
	if r.Region != "eu" || r.RegionPercent != 60 || r.Capacity != 60 || r.RefillPerSecond != 6 {
		t.Fatalf("region: %+v", r)
	}
	b := r.Buckets[0]
	if b.Key != "rl:{acme}:list-orders@eu" || b.Capacity != 60 || b.Redis == nil || !b.Redis.Exists || b.Redis.Tokens < 59 || b.Redis.Tokens > 60 {
		t.Errorf("bucket %+v (Redis %+v), want the eu share with 59 to 60 tokens", b, b.Redis)
	}
	if lf := r.LocalFallback; lf.Key != b.Key || lf.Capacity != 60 {
		t.Errorf("local fallback %+v, want the eu share's bucket", lf)
	}
	if r := explainOf(t, gw, "globex", "list-orders"); r.Region != "" || r.Buckets[0].Key != "rl:{globex}:list-orders" {
		t.Errorf("a rule without regions: %+v", r)
	}
}

// TestExplainCluster: in a Redis Cluster each bucket names the master that
// holds it and that node's breaker, and its state is read from that node.
func TestExplainCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("sharded", "acme", "list-orders", 80, slow, "hotKey: {shards: 8}"))
	o := e.options(cluster.Addrs()[0])
	o.Redis.Mode, o.Redis.Addrs = "cluster", cluster.Addrs()
	gw := start(t, o, testLogger(t))
	for range 8 {
		if res, body := send(t, "GET", gw.url+"/orders", "acme"); res.StatusCode != 200 {
			t.Fatalf("GET /orders: %d %s", res.StatusCode, body)
		}
	}
	cc := cluster.Client(t)
	r := explainOf(t, gw, "acme", "list-orders")
	nodes := map[string]bool{}
	var total float64
	for _, b := range r.Buckets {
		master, err := cc.MasterForKey(t.Context(), b.Key)
		if err != nil {
			t.Fatal(err)
		}
		if b.Node != master.Options().Addr || b.Breaker != "closed" || b.Redis == nil || b.Redis.Error != "" {
			t.Errorf("shard %s: node %q breaker %q Redis %+v, want master %s", b.Key, b.Node, b.Breaker, b.Redis, master.Options().Addr)
			continue
		}
		nodes[b.Node] = true
		total += b.Redis.Tokens
	}
	if len(nodes) < 2 {
		t.Errorf("8 shards on %d node(s), want them spread", len(nodes))
	}
	if math.Abs(total-72) > 0.01 {
		t.Errorf("the shards hold %v tokens in Redis, want 80 - 8 = 72", total)
	}
}
