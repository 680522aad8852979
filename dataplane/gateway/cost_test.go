package gateway_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// The tests in this file cover spec.cost: request costs (fixed and from a
// header) and response costs (from a header, a JSON body, the last event
// of a text/event-stream body), charged into debt, across three gateways
// on one real Redis.

// costCluster is three gateways (--replicas 3) on srv in front of upstream.
func costCluster(t *testing.T, srv *redistest.Server, upstream, rules string) []*running {
	t.Helper()
	e := newEnv(t, upstream, rules)
	var gws []*running
	for range 3 {
		o := e.options(srv.Addr())
		o.Replicas = 3
		gws = append(gws, start(t, o, testLogger(t)))
	}
	return gws
}

// tokens reads the tokens Redis holds for tenant on route: what every
// charge and take left, plus a refill of well under 0.01 during a test
// for rules of the slow refill.
func tokens(t *testing.T, srv *redistest.Server, tenant, route string) float64 {
	t.Helper()
	st, err := limiter.Peek(context.Background(), srv.Client(t), limiter.Key(tenant, route))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Found {
		t.Fatalf("no bucket for %s on %s in Redis", tenant, route)
	}
	return st.Tokens
}

// wantTokens fails the test unless the bucket holds want tokens (plus what
// the slow refill adds during a test).
func wantTokens(t *testing.T, srv *redistest.Server, tenant, route string, want float64) {
	t.Helper()
	if got := tokens(t, srv, tenant, route); got < want || got > want+0.01 {
		t.Fatalf("%s on %s holds %v tokens in Redis, want %v", tenant, route, got, want)
	}
}

// sendCost sends a POST /orders for tenant with header X-Cost set to cost
// ("" for none) and returns the response with its body.
func sendCost(t *testing.T, gw *running, tenant string, cost ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", gw.url+"/orders", nil)
	req.Header.Set("X-Api-Key", tenant)
	for _, c := range cost {
		req.Header.Add("X-Cost", c)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(res))
	return res, b.String()
}

func readAll(res *http.Response) string {
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// TestRequestCostDrainsExactly: a fixed cost of 3 on a bucket of 60 admits
// exactly 20 of 100 concurrent requests over three gateways; costs read
// from a header (1 to 7) drain a bucket of 100 exactly: the tokens left are
// the capacity minus the costs admitted, and a request for exactly what is
// left passes while one more token does not.
func TestRequestCostDrainsExactly(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	rules := rule("fixed", "fixed", "create-order", 60, slow, "cost: {request: {fixed: 3}}") +
		rule("header", "header", "create-order", 100, slow, "cost: {request: {header: X-Cost, max: 50}}")
	gws := costCluster(t, srv, up.URL, rules)
	if n := burst(t, gws, "fixed", 100); n != 20 {
		t.Errorf("fixed cost 3, capacity 60: admitted %d of 100, want exactly 20", n)
	}
	wantTokens(t, srv, "fixed", "create-order", 0)

	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cost := 1 + i%7
			res, _ := sendCost(t, gws[i%3], "header", fmt.Sprint(cost))
			switch res.StatusCode {
			case 200:
				admitted.Add(int64(cost))
			case 429:
			default:
				t.Errorf("cost %d: status %d", cost, res.StatusCode)
			}
		}()
	}
	wg.Wait()
	left := 100 - admitted.Load()
	wantTokens(t, srv, "header", "create-order", float64(left))
	if left > 0 {
		if res, body := sendCost(t, gws[0], "header", fmt.Sprint(left)); res.StatusCode != 200 {
			t.Fatalf("a cost of exactly the %d tokens left: %d %s", left, res.StatusCode, body)
		}
	}
	if res, _ := sendCost(t, gws[1], "header", "1"); res.StatusCode != 429 {
		t.Fatalf("a cost of 1 on an empty bucket: %d, want 429", res.StatusCode)
	}
	wantTokens(t, srv, "header", "create-order", 0)
}

// TestRequestCostBadInput: a malformed cost header is a 400 naming the
// header, never a 5xx, and takes nothing; a cost above the capacity is a
// 429 without Retry-After that says so; no header costs the default.
func TestRequestCostBadInput(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	rules := rule("bad", "bad", "create-order", 10, slow, "cost: {request: {header: X-Cost, default: 2, max: 1000}}")
	gws := costCluster(t, srv, up.URL, rules)
	for _, v := range [][]string{{"0"}, {"-1"}, {"1.5"}, {"abc"}, {"+3"}, {"1001"}, {"99999999999999999999999"}, {""}, {"3", "3"}, {"\u0663"}} {
		res, body := sendCost(t, gws[0], "bad", v...)
		if res.StatusCode != 400 || !strings.Contains(body, "X-Cost header") {
			t.Errorf("X-Cost %q: %d %s, want 400 naming the header", v, res.StatusCode, body)
		}
	}
	if res, body := sendCost(t, gws[1], "bad"); res.StatusCode != 200 {
		t.Fatalf("no cost header: %d %s", res.StatusCode, body)
	}
	wantTokens(t, srv, "bad", "create-order", 8) // the default, 2; the 400s took nothing
	res, body := sendCost(t, gws[2], "bad", "11")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "" || !strings.Contains(body, "more than the limit's capacity of 10") {
		t.Fatalf("cost 11 on capacity 10: %d Retry-After %q %s, want 429 without Retry-After", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if res.Header.Get("X-RateLimit-Limit") != "10" || res.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("cost above capacity: limit headers %v", res.Header)
	}
	wantTokens(t, srv, "bad", "create-order", 8)
}

// freezeBucket writes the bucket of tenant on route as holding tokens,
// last written an hour from Redis's now: the script refills nothing
// before then (a clock that went backwards refills nothing), so every
// answer, Redis's or a cache's that follows the script, is the same
// whenever the test sends its requests.
func freezeBucket(t *testing.T, srv *redistest.Server, tenant, route string, tokens float64) {
	t.Helper()
	rc := srv.Client(t)
	now, err := rc.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := now.Add(time.Hour).UnixMilli()
	var v [14]byte
	binary.LittleEndian.PutUint64(v[:8], math.Float64bits(tokens))
	for i := 8; i < 14; i++ {
		v[i] = byte(at >> (8 * (i - 8)))
	}
	hash, field := limiter.Storage(limiter.Key(tenant, route))
	if err := rc.HSet(context.Background(), hash, field, string(v[:])).Err(); err != nil {
		t.Fatal(err)
	}
}

// costAnswer is what a client sees of the gateway's answer to a request.
type costAnswer struct {
	status                                       int
	retryAfter, limit, remaining, ietf, ietfPlan string
	body                                         string
}

func costAnswerOf(res *http.Response, body string) costAnswer {
	h := res.Header
	return costAnswer{res.StatusCode, h.Get("Retry-After"), h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"),
		h.Get("RateLimit"), h.Get("RateLimit-Policy"), body}
}

// TestEmptyBucketCacheAnswersEachCost (issue 27, item 6): capacity 20, 1
// token a minute, the cost in X-Cost. After a cost of 20 emptied the
// bucket and Redis refused a cost of 3 (Retry-After: 180), the gateway
// with the empty-bucket cache answers every other cost as the gateway
// without it does, which asks Redis every time: a cost of 10 waits 600 s,
// 20 waits 1200 s, 21 can never pass (429 without Retry-After, "it can
// never pass"), 1 waits 60 s; the same status, Retry-After, remaining and
// IETF headers, and no Redis call. Then on a bucket 150 s after it
// emptied (2.5 tokens): the costs it cannot serve are answered alike, and
// a cost of 1, which it can, goes to Redis and passes on both.
func TestEmptyBucketCacheAnswersEachCost(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	costs := "cost: {request: {header: X-Cost, max: 100}}"
	perMinute := "refill: {tokens: 1, period: 1m}"
	e := newEnv(t, up.URL, rule("emptied", "emptied", "create-order", 20, perMinute, costs)+
		rule("later", "later", "create-order", 20, perMinute, costs))
	o := e.options(srv.Addr())
	o.IETFHeaders = true
	cached := start(t, o, testLogger(t))
	o.EmptyBucketCache = false
	uncached := start(t, o, testLogger(t))

	// compare sends cost to both gateways, the one without the cache
	// first (a refusal changes nothing in Redis), and returns the answer.
	compare := func(tenant string, cost int, redisCalls int64) costAnswer {
		t.Helper()
		want := costAnswerOf(sendCost(t, uncached, tenant, strconv.Itoa(cost)))
		before := cached.RedisWaits()
		got := costAnswerOf(sendCost(t, cached, tenant, strconv.Itoa(cost)))
		if got != want {
			t.Errorf("%s, cost %d: with the empty-bucket cache\n  %+v\nwithout it\n  %+v", tenant, cost, got, want)
		}
		if n := cached.RedisWaits() - before; n != redisCalls {
			t.Errorf("%s, cost %d: %d Redis calls with the cache, want %d", tenant, cost, n, redisCalls)
		}
		return want
	}

	if res, body := sendCost(t, uncached, "emptied", "20"); res.StatusCode != 200 {
		t.Fatalf("a cost of 20 on a full bucket of 20: %d %s", res.StatusCode, body)
	}
	freezeBucket(t, srv, "emptied", "create-order", tokens(t, srv, "emptied", "create-order"))
	for _, step := range []struct {
		cost       int
		retryAfter string
		redisCalls int64
	}{{3, "180", 1}, {10, "600", 0}, {20, "1200", 0}, {21, "", 0}, {1, "60", 0}} {
		a := compare("emptied", step.cost, step.redisCalls)
		if a.status != 429 || a.retryAfter != step.retryAfter || a.remaining != "0" {
			t.Errorf("emptied, cost %d: %+v, want 429 with Retry-After %q and nothing remaining", step.cost, a, step.retryAfter)
		}
		if step.cost == 21 && !strings.Contains(a.body, "it can never pass") {
			t.Errorf("cost 21 on a capacity of 20: %q, want it can never pass", a.body)
		}
	}

	freezeBucket(t, srv, "later", "create-order", 2.5)
	for _, step := range []struct {
		cost       int
		retryAfter string
		redisCalls int64
	}{{3, "30", 1}, {10, "450", 0}, {20, "1050", 0}, {21, "", 0}} {
		if a := compare("later", step.cost, step.redisCalls); a.status != 429 || a.retryAfter != step.retryAfter {
			t.Errorf("later, cost %d: %+v, want 429 with Retry-After %q", step.cost, a, step.retryAfter)
		}
	}
	// A cost of 1 passes: one gateway after the other, on the same state.
	want := costAnswerOf(sendCost(t, uncached, "later", "1"))
	freezeBucket(t, srv, "later", "create-order", 2.5)
	before := cached.RedisWaits()
	got := costAnswerOf(sendCost(t, cached, "later", "1"))
	if got.status != 200 || got.remaining != "1" || cached.RedisWaits() != before+1 {
		t.Errorf("later, cost 1 with 2.5 tokens: %+v after %d Redis calls, want 200 with 1 remaining from Redis", got, cached.RedisWaits()-before)
	}
	got.body, want.body = "", "" // the echo says which request it was
	if got != want {
		t.Errorf("later, cost 1: with the cache\n  %+v\nwithout it\n  %+v", got, want)
	}
}
