package gateway_test

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// bucketTokens is the whole tokens Redis holds for tenant shop's bucket on
// create-order (slow: a test refills a tiny fraction of one).
func bucketTokens(t *testing.T, c redis.Cmdable) int64 {
	t.Helper()
	st, err := limiter.Peek(context.Background(), c, limiter.Key("shop", "create-order"))
	if err != nil || !st.Found {
		t.Fatalf("bucket state %+v, %v", st, err)
	}
	return int64(math.Floor(st.Tokens))
}

// quotaCount is the count of tenant shop's daily quota on create-order
// today (UTC).
func quotaCount(t *testing.T, c redis.Cmdable) int64 {
	t.Helper()
	day := time.Now().UTC().Truncate(24 * time.Hour)
	key := limiter.QuotaKey("shop", "create-order", "") + ":" + strconv.FormatInt(day.UnixMilli(), 10)
	n, err := c.Get(context.Background(), key).Int64()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return n
}

// TestConcurrencyRefusalCostsNothing: a request refused a concurrency slot
// gives back the token and the quota its decision took (its limit headers
// say what is left after the refund). maxInFlight 1, a
// daily quota of 6, a bucket of 10: one request holds the slot, five more
// are refused for concurrency; the bucket and the quota in Redis are as if
// they were never sent, and once the slot is free five requests pass (the
// quota's 6), the bucket left at 10-6. The next one is refused by the quota
// in the same script call as the bucket (no token taken) and takes no
// slot: one script call in Redis, no acquire; so does a request the bucket
// refuses.
func TestConcurrencyRefusalCostsNothing(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeldUpstream(t)
	e := newEnv(t, up.URL, rule("conc", "shop", "create-order", 10, slow,
		"quota: {limit: 6, period: Day}", "concurrency: {maxInFlight: 1, leaseSeconds: 60}")+
		rule("lean", "lean", "create-order", 1, slow, "concurrency: {maxInFlight: 1, leaseSeconds: 60}"))
	o := e.options(srv.Addr())
	o.IETFHeaders = true
	gw := start(t, o, testLogger(t))
	c := srv.Client(t)

	holdOne(t, gw, up)
	for i := range 5 {
		res, body := send(t, "POST", gw.url+"/orders", "shop")
		if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "concurrency limit exceeded") {
			t.Fatalf("request %d while the slot is held: %d %s, want 429 for concurrency", i, res.StatusCode, body)
		}
		if state := res.Header.Get("RateLimit"); !strings.HasPrefix(state, `"create-order";r=9;`) || !strings.Contains(state, `"create-order-daily";r=5;`) {
			t.Fatalf("request %d refused a slot: RateLimit %q, want the bucket's 9 and the quota's 5 left, as if it were never sent", i, state)
		}
	}
	if tokens, used := bucketTokens(t, c), quotaCount(t, c); tokens != 9 || used != 1 {
		t.Fatalf("after 5 requests refused a slot: %d tokens in the bucket and %d counted in the quota, want 9 and 1 (the held request's)", tokens, used)
	}

	up.open()
	waitFor(t, 30*time.Second, "slot released", func() bool { return slotCount(t, c, concurrency.Key("shop", "create-order")) == 0 })
	for i := range 5 {
		res, body := send(t, "POST", gw.url+"/orders", "shop")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("request %d after the slot came back: %d %s (Retry-After %s), want 200: the refused requests spent nothing",
				i, res.StatusCode, body, res.Header.Get("Retry-After"))
		}
		if state, want := res.Header.Get("RateLimit"), `"create-order";r=`+strconv.Itoa(8-i)+";"; !strings.HasPrefix(state, want) {
			t.Fatalf("request %d: RateLimit %q, want the bucket's %s", i, state, want)
		}
	}
	if tokens, used := bucketTokens(t, c), quotaCount(t, c); tokens != 4 || used != 6 {
		t.Fatalf("after 6 served requests: %d tokens and %d counted, want 4 and 6", tokens, used)
	}

	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	res, body := send(t, "POST", gw.url+"/orders", "shop")
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "rate limit exceeded") {
		t.Fatalf("the 7th served request: %d %s, want 429 from the quota", res.StatusCode, body)
	}
	if tokens, used := bucketTokens(t, c), quotaCount(t, c); tokens != 4 || used != 6 {
		t.Fatalf("after a quota refusal: %d tokens and %d counted, want 4 and 6 (nothing taken)", tokens, used)
	}
	if n := redistest.ScriptCalls(t, c); n != 1 {
		t.Fatalf("a request the quota refused made %d script calls, want 1 (the decision; no slot acquire)", n)
	}

	// The token bucket refusing: a bucket of 1, its token spent.
	if res, _ := send(t, "POST", gw.url+"/orders", "lean"); res.StatusCode != http.StatusOK {
		t.Fatalf("tenant lean's first request: %d", res.StatusCode)
	}
	waitFor(t, 30*time.Second, "slot released", func() bool { return slotCount(t, c, concurrency.Key("lean", "create-order")) == 0 })
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if res, body := send(t, "POST", gw.url+"/orders", "lean"); res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "rate limit exceeded") {
		t.Fatalf("tenant lean's second request: %d %s, want 429 from the bucket", res.StatusCode, body)
	}
	if n := redistest.ScriptCalls(t, c); n != 1 {
		t.Fatalf("a request the bucket refused made %d script calls, want 1 (the decision; no slot acquire)", n)
	}
}
