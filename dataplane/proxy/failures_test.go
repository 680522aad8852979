package proxy_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// TestFailuresFloodFromOneIPv6Prefix: the handler with the gateway's
// default throttle (burst 20, 65,536 addresses) after the 65,536 /64s of
// one IPv6 /48 each sent a wrong key (they fill the table), one of them
// 21, and 30 other IPv4 clients one each. A valid key from a fresh IPv4
// address, from a fresh IPv6 address of another /48 and from the clients
// that failed once is forwarded (200); from the address that spent its
// failures it gets 429. The clock stands still; the peer address is set on
// the request as net/http sets it (this host cannot open connections from
// thousands of IPv6 addresses without changing its network configuration).
func TestFailuresFloodFromOneIPv6Prefix(t *testing.T) {
	const good = "sk-shop-a-0123456789"
	now := time.Unix(1000, 0)
	h := failuresHandler(t, good, identity.NewFailureLimiter(identity.FailureOptions{
		Burst: 20, PerSecond: 1, MaxAddresses: 65536, Clock: func() time.Time { return now },
	}))
	send := func(from, key string) int {
		req := httptest.NewRequest("POST", "/orders", nil)
		req.RemoteAddr = from
		req.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	flood := func(i int) string { return fmt.Sprintf("[2001:db8:aaaa:%x::1]:443", i) }
	other := func(i int) string { return fmt.Sprintf("198.51.100.%d:5000", i) }
	var failures []string
	for i := range 65536 {
		failures = append(failures, flood(i))
	}
	for range 21 {
		failures = append(failures, flood(4242))
	}
	for i := range 30 {
		failures = append(failures, other(i))
	}
	for _, from := range failures {
		if code := send(from, "wrong-guess"); code != 401 && code != 429 {
			t.Fatalf("a wrong key from %s: %d, want 401 or 429", from, code)
		}
	}
	for _, c := range []struct {
		from string
		want int
	}{
		{"192.0.2.10:5000", 200},
		{"[2001:db8:bbbb::1]:5000", 200},
		{other(0), 200},
		{other(29), 200},
		{flood(4242), 429},
	} {
		if code := send(c.from, good); code != c.want {
			t.Errorf("a valid key from %s: %d, want %d", c.from, code, c.want)
		}
	}
}

// failuresHandler is a handler with one route to a loopback upstream, the
// key good for tenant shop-a, a rule that admits everything, and failures.
func failuresHandler(t *testing.T, good string, failures *identity.FailureLimiter) *proxy.Handler {
	t.Helper()
	keys, err := identity.ParseMapped([]byte("keys:\n  - tenant: shop-a\n    key: " + good + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	up := okUpstream(t)
	table, err := routes.Parse([]byte("routes:\n  - id: create-order\n    methods: [POST]\n    path: /orders\n    upstream: " + up.URL + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := rules.NewStore(snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000})
	h := proxy.New(proxy.Options{
		Router:   func() routing.Router { return table },
		Decider:  decision.New(decision.Options{Rules: store, Limiter: limiter.NewLocal(limiter.LocalOptions{})}),
		Identity: keys,
		Metrics:  metrics.NewGateway(prometheus.NewRegistry()),
		Logger:   logr.Discard(),
		Failures: failures,
	})
	t.Cleanup(h.Close)
	return h
}
