package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestResponsesByOrigin: tollgate_gateway_responses_total tells the
// gateway's own answers (401, 404, 429) from the upstream's (200) and from
// the 502 written when the upstream is unreachable, which counts against the
// upstream; the alerts on the gateway's own 5xx and on the upstream's 5xx
// ratio read this label. The Redis deadline is exported next to the Redis
// latency it bounds.
func TestResponsesByOrigin(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("one", "acme", "list-orders", 1, slow))
	gw := start(t, e.options(srv.Addr()), testLogger(t))

	for _, c := range []struct {
		method, path, key string
		want              int
	}{
		{"GET", "/orders", "acme", http.StatusOK},
		{"GET", "/orders", "acme", http.StatusTooManyRequests},
		{"GET", "/orders", "", http.StatusUnauthorized},
		{"GET", "/nowhere", "acme", http.StatusNotFound},
		{"GET", "/broken", "acme", http.StatusBadGateway},
	} {
		if res, body := send(t, c.method, gw.url+c.path, c.key); res.StatusCode != c.want {
			t.Fatalf("%s %s: status %d, want %d (%s)", c.method, c.path, res.StatusCode, c.want, body)
		}
	}
	for series, want := range map[string]float64{
		`tollgate_gateway_responses_total{code="2xx",origin="upstream",route="list-orders"}`: 1,
		`tollgate_gateway_responses_total{code="4xx",origin="gateway",route="list-orders"}`:  2,
		`tollgate_gateway_responses_total{code="4xx",origin="upstream",route="list-orders"}`: 0,
		`tollgate_gateway_responses_total{code="4xx",origin="gateway",route="none"}`:         1,
		`tollgate_gateway_responses_total{code="5xx",origin="upstream",route="broken"}`:      1,
		`tollgate_gateway_responses_total{code="5xx",origin="gateway",route="broken"}`:       0,
		`tollgate_gateway_redis_timeout_seconds`:                                             30,
	} {
		if got := metricValue(t, gw, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// TestReloadErrorsStartAtZero: the reload error counter of every source the
// gateway watches is exported at 0 from the start. A series born at 1 has no
// increase for Prometheus, so the first rejected reload of a gateway would
// never fire TollgateReloadErrors (found by the e2e Prometheus spec).
func TestReloadErrorsStartAtZero(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("one", "acme", "list-orders", 1, slow))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	text := scrape(t, gw)
	for _, source := range []string{"routes", "rules"} {
		series := `tollgate_gateway_reload_errors_total{source="` + source + `"} 0`
		if !strings.Contains(text, series+"\n") {
			t.Errorf("/metrics lacks %s before any reload error", series)
		}
	}
	e.writeRoutes(t, "routes: [\n")
	waitFor(t, 10*time.Second, "the rejected route reload counted", func() bool {
		return metricValue(t, gw, `tollgate_gateway_reload_errors_total{source="routes"}`) == 1
	})
}
