package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// quotaRule is a rule whose bucket never binds (1000, refilling 1000/s)
// with a calendar quota.
func quotaRule(name, tenant string, limit int64, period, zone string) string {
	return rule(name, tenant, "create-order", 1000, "refillPerSecond: 1000",
		"quota: {limit: "+strconv.FormatInt(limit, 10)+", period: "+period+", timeZone: "+zone+"}")
}

// TestQuotaMonthBoundaryAcrossGateways: three gateways whose calendar (and
// Redis's, for the quota script) is moved to five seconds before a local
// month boundary, in two zones whose month had a daylight saving change. A
// quota of 50: bursts of 300 before and after the boundary admit 100 in all,
// exactly 50 counted in each month in Redis, the new month's count starting
// at the boundary.
func TestQuotaMonthBoundaryAcrossGateways(t *testing.T) {
	cases := []struct{ zone, month, next string }{
		{"Europe/Paris", "2027-03-01T00:00:00+01:00", "2027-04-01T00:00:00+02:00"},
		{"America/New_York", "2026-11-01T00:00:00-04:00", "2026-12-01T00:00:00-05:00"},
	}
	for _, tc := range cases {
		t.Run(tc.zone, func(t *testing.T) {
			month, boundary := parseTime(t, tc.month), parseTime(t, tc.next)
			srv := redistest.Start(t)
			shift := time.Until(boundary.Add(-5 * time.Second))
			gws := exactCluster(t, srv, quotaRule("q", "monthly", 50, "Month", tc.zone), func(o *gateway.Options) {
				gateway.ShiftCalendar(o, shift)
			})
			first := burst(t, gws, "monthly", 300)
			time.Sleep(time.Until(boundary.Add(-shift + 300*time.Millisecond)))
			second := burst(t, gws, "monthly", 300)
			if first < 50 || first+second != 100 {
				t.Errorf("admitted %d before the boundary and %d after, want 50 and 50 (100 in all: a burst on a slow machine may cross the boundary)", first, second)
			}
			rc := srv.Client(t)
			for _, start := range []time.Time{month, boundary} {
				key := limiter.QuotaKey("monthly", "create-order", "") + ":" + strconv.FormatInt(start.UnixMilli(), 10)
				if n, err := rc.Get(context.Background(), key).Int64(); err != nil || n != 50 {
					t.Errorf("count of the month starting %v: %d (%v), want 50", start, n, err)
				}
			}
		})
	}
}

// TestQuotaRejectionHeaders: a daily quota (UTC) of 3 next to a bucket of
// 10: the IETF headers carry both policies, X-RateLimit-Remaining the
// smaller remaining; the 4th request gets 429 with Retry-After up to the
// next UTC midnight; the rate limit service answers the same, reporting the
// quota (per DAY) as the binding limit of the descriptor.
func TestQuotaRejectionHeaders(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("q", "daily", "create-order", 10, "refill: {tokens: 10, period: 1h}",
		"quota: {limit: 3, period: Day}"))
	o := e.options(srv.Addr())
	o.IETFHeaders, o.RLSListen = true, "127.0.0.1:0"
	gw := start(t, o, testLogger(t))
	for i := range 3 {
		res, _ := send(t, "POST", gw.url+"/orders", "daily")
		if res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
		if got, want := res.Header.Get("RateLimit-Policy"), `"create-order";q=10;w=3600, "create-order-daily";q=3;w=86400`; got != want {
			t.Fatalf("RateLimit-Policy %q, want %q", got, want)
		}
		if got, want := res.Header.Get("X-RateLimit-Remaining"), strconv.Itoa(2-i); got != want {
			t.Fatalf("X-RateLimit-Remaining %s, want %s (the quota's, smaller than the bucket's)", got, want)
		}
		if got := res.Header.Get("X-RateLimit-Limit"); got != "3" {
			t.Fatalf("X-RateLimit-Limit %s, want 3 (the binding limit: the quota)", got)
		}
	}
	before := time.Now()
	res, _ := send(t, "POST", gw.url+"/orders", "daily")
	after := time.Now()
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d, want 429", res.StatusCode)
	}
	midnight := before.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	ra, _ := strconv.ParseInt(res.Header.Get("Retry-After"), 10, 64)
	lo, hi := ceilSeconds(midnight.Sub(after)), ceilSeconds(midnight.Sub(before))+1
	if ra < lo || ra > hi {
		t.Fatalf("Retry-After %d, want the seconds to the next UTC midnight, %d to %d", ra, lo, hi)
	}
	state := res.Header.Get("RateLimit")
	if !strings.HasPrefix(state, `"create-order";r=7;`) || !strings.Contains(state, `"create-order-daily";r=0;t=`+strconv.FormatInt(ra, 10)) {
		t.Fatalf("RateLimit %q, want the bucket's 7 left and the quota spent until Retry-After", state)
	}

	// explain shows the quota, its period and its count in Redis.
	q := explainOf(t, gw, "daily", "create-order").Quota
	if q == nil || q.Limit != 3 || q.Used != 3 || q.Remaining != 0 || q.Period != "Day" || q.TimeZone != "UTC" ||
		q.End != midnight.Format(time.RFC3339) || len(q.Keys) != 1 {
		t.Fatalf("explain: quota %+v, want 3 used of 3 until %v", q, midnight)
	}

	c := rlsClient(t, gw)
	rr := call(t, c, "envoy", 0, tr("daily", "create-order"))
	st := rr.Statuses[0]
	if rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.RequestsPerUnit != 3 ||
		st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_DAY || st.LimitRemaining != 0 {
		t.Fatalf("rate limit service: %v %v, want OVER_LIMIT reporting the daily quota of 3", rr.OverallCode, st)
	}
	if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > midnight.Sub(before) {
		t.Fatalf("duration_until_reset %v, want the time to midnight", d)
	}
	h := headers(t, rr)
	if want := strconv.FormatInt(ceilSeconds(st.DurationUntilReset.AsDuration()), 10); h["Retry-After"] != want || h["X-RateLimit-Limit"] != "3" {
		t.Fatalf("rate limit service headers %v, want Retry-After %s and the quota's limit", h, want)
	}
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestQuotaOutageReconciled: three gateways, a monthly quota of 60. 30 pass
// through Redis, then one more through each gateway, so that each last heard
// 29, 28 and 27 left. Redis freezes: each gateway admits a third of what it
// last heard (9 + 9 + 9) and then refuses with Retry-After to the month's
// end. Redis resumes: each gateway's next call adds its 9 to the count, so
// that the count in Redis holds every admission, local ones included.
func TestQuotaOutageReconciled(t *testing.T) {
	srv := redistest.Start(t)
	rules := quotaRule("q", "monthly", 60, "Month", "UTC") + rule("trip", "trip", "create-order", 1000, "refillPerSecond: 1000")
	gws := exactCluster(t, srv, rules, func(o *gateway.Options) {
		o.RedisTimeout = 50 * time.Millisecond
		o.BreakerOpenFor = 200 * time.Millisecond
	})
	admitted := 0
	sendTo := func(gw *running) int {
		res, _ := send(t, "POST", gw.url+"/orders", "monthly")
		if res.StatusCode == 200 {
			admitted++
		}
		return res.StatusCode
	}
	for i := range 33 {
		if code := sendTo(gws[i%3]); code != 200 {
			t.Fatalf("request %d through Redis: %d", i, code)
		}
	}
	srv.Pause()
	for _, gw := range gws {
		waitFor(t, 20*time.Second, "breaker open", func() bool {
			send(t, "POST", gw.url+"/orders", "trip")
			return gw.BreakerState() == "open"
		})
	}
	local := burst(t, gws, "monthly", 300)
	admitted += local
	if local != 27 {
		t.Errorf("Redis frozen: admitted %d, want 27 (a third of 29, 28 and 27, floored)", local)
	}
	res, _ := send(t, "POST", gws[0].url+"/orders", "monthly")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || res.Header.Get("Retry-After") == "1" {
		t.Errorf("local share spent: %d Retry-After %q, want 429 until the month ends", res.StatusCode, res.Header.Get("Retry-After"))
	}
	time.Sleep(300 * time.Millisecond) // past the failed calls' deadlines
	srv.Resume()
	waitBreakers(t, "closed", gws...)
	for _, gw := range gws {
		sendTo(gw)
	}
	start := parseTime(t, time.Now().UTC().Format("2006-01")+"-01T00:00:00Z")
	key := limiter.QuotaKey("monthly", "create-order", "") + ":" + strconv.FormatInt(start.UnixMilli(), 10)
	n, err := srv.Client(t).Get(context.Background(), key).Int64()
	if err != nil || n != int64(admitted) {
		t.Fatalf("count in Redis %d (%v), want every admission, %d (local ones added on reconnection)", n, err, admitted)
	}
	if admitted > 62 {
		t.Errorf("admitted %d in all, want at most 62 (60, plus what the last answers overlapped: 29 seen, 27 left)", admitted)
	}
}
