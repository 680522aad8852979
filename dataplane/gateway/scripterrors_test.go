package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestScriptErrorsDoNotOpenTheBreaker (issue 27): the token bucket script
// fails on every call of some tenants' buckets (a string where the bucket's
// 0.1 form would be: WRONGTYPE), while Redis is healthy. However many of
// those requests come, the node's breaker stays closed and another tenant
// keeps exact Redis answers; each broken request follows its rule's
// failure mode, and every script error is counted in
// tollgate_gateway_redis_script_errors_total, none as a Redis error. The
// same holds for the concurrency slots' script.
func TestScriptErrorsDoNotOpenTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	rules := rule("broken", "broken", "create-order", 10, slow) +
		rule("broken-open", "broken-open", "create-order", 10, slow, "failureMode: FailOpen") +
		rule("broken-closed", "broken-closed", "create-order", 10, slow, "failureMode: FailClosed") +
		rule("steady", "steady", "create-order", 1000, slow) +
		rule("broken-slots", "broken-slots", "create-order", 1000, slow, "concurrency: {maxInFlight: 2}")
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rules)
	o := e.options(srv.Addr())
	// A breaker that opens after 5 failures spanning 25ms.
	o.RedisTimeout = 25 * time.Millisecond
	gw := start(t, o, testLogger(t))
	ctx := context.Background()
	for _, key := range []string{limiter.Key("broken", "create-order"), limiter.Key("broken-open", "create-order"),
		limiter.Key("broken-closed", "create-order"), concurrency.Key("broken-slots", "create-order")} {
		if err := srv.Client(t).Set(ctx, key, "a string", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// A run of broken requests only, well past the span that would open
	// the breaker were they Redis failures.
	began := time.Now()
	sent, admitted := 0, 0
	for ; sent < 40 || time.Since(began) < 200*time.Millisecond; sent++ {
		res, _ := send(t, "POST", gw.url+"/orders", "broken")
		switch {
		case res.StatusCode == 200:
			admitted++
		case res.StatusCode != 429 || res.Header.Get("Retry-After") == "1":
			// The local bucket's wait (a week for a token), not a second.
			t.Fatalf("LocalFallback request %d: %d Retry-After %q, want 200 or 429 from the local bucket", sent+1, res.StatusCode, res.Header.Get("Retry-After"))
		}
		if res, _ := send(t, "POST", gw.url+"/orders", "broken-open"); res.StatusCode != 200 {
			t.Fatalf("FailOpen request %d: %d, want 200", sent+1, res.StatusCode)
		}
		if res, _ := send(t, "POST", gw.url+"/orders", "broken-closed"); res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("FailClosed request %d: %d Retry-After %q, want 503 and 1", sent+1, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	if admitted != 10 {
		t.Errorf("the LocalFallback rule admitted %d, want its local bucket's 10 (one replica)", admitted)
	}
	if s := gw.BreakerState(); s != "closed" {
		t.Fatalf("breaker %s after %d script errors per rule, want closed", s, sent)
	}
	// Slots of a concurrency limit whose set is broken: the local share
	// (2 in flight on this one gateway) decides; requests one at a time
	// always find a slot.
	for i := range 5 {
		if res, _ := send(t, "POST", gw.url+"/orders", "broken-slots"); res.StatusCode != 200 {
			t.Fatalf("request %d of a rule with broken slots: %d, want 200", i+1, res.StatusCode)
		}
	}
	for i := range 20 {
		res, _ := send(t, "POST", gw.url+"/orders", "steady")
		if res.StatusCode != 200 || res.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(999-i) {
			t.Fatalf("another tenant's request %d: %d Remaining %q, want 200 with %d left", i+1, res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), 999-i)
		}
	}
	metrics := scrape(t, gw)
	for series, want := range map[string]float64{
		`tollgate_gateway_decisions_total{result="allowed",route="create-order",source="redis"}`: 25,
		`tollgate_gateway_redis_script_errors_total{script="concurrency"}`:                       5,
		`tollgate_gateway_redis_script_errors_total{script="token_bucket"}`:                      float64(3 * sent),
		`tollgate_gateway_redis_errors_total`:                                                    0,
		`tollgate_gateway_breaker_state{state="closed"}`:                                         1,
	} {
		if got, _ := findMetric(metrics, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
