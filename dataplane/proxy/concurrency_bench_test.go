package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/routes"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// BenchmarkForwardRedis forwards requests to a loopback upstream through the
// whole handler with a real Redis: a plain token bucket rule, the same
// rule with a concurrency limit (a slot acquired before and released after
// each request), and with a response cost read from the JSON body (the
// body scanned, then a charge after the response), and with a monthly
// calendar quota (counted in the same script call). It reports Redis script calls per request, each one round
// trip here (from Redis's INFO commandstats; lease renewals, one call per
// key every lease/3 for all of a gateway's requests on it, are not running
// here).
//
//	go test -run '^$' -bench ForwardRedis -benchmem ./dataplane/proxy/
func BenchmarkForwardRedis(b *testing.B) {
	responseCost := &snapshot.Cost{Fixed: 1, Response: &snapshot.ResponseCost{JSONField: "usage.total_tokens", MaxDebt: 1 << 30}}
	for _, c := range []struct {
		name        string
		maxInFlight int32
		cost        *snapshot.Cost
		quota       bool
	}{{"bucket", 0, nil, false}, {"bucket+concurrency", 1000, nil, false}, {"bucket+response-cost", 0, responseCost, false}, {"bucket+quota", 0, nil, true}} {
		b.Run(c.name, func(b *testing.B) {
			srv := redistest.Start(b)
			client := srv.Client(b)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"x","usage":{"total_tokens":1}}`)
			}))
			defer up.Close()
			h := redisHandler(b, client, up.URL, c.maxInFlight, c.cost, c.quota)
			before := redistest.ScriptCalls(b, client)
			forwardLoop(b, h, "shop")
			b.ReportMetric(float64(redistest.ScriptCalls(b, client)-before)/float64(b.N), "redis-calls/req")
		})
	}
}

func redisHandler(b *testing.B, client *redis.Client, upstream string, maxInFlight int32, cost *snapshot.Cost, quota bool) *proxy.Handler {
	table, err := routes.Parse([]byte("routes:\n  - id: create-order\n    methods: [POST]\n    path: /orders\n    upstream: " + upstream + "\n"))
	if err != nil {
		b.Fatal(err)
	}
	rule := snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000, MaxInFlight: maxInFlight, Cost: cost}
	if quota {
		rule.QuotaLimit, rule.QuotaPeriod, rule.QuotaZone = snapshot.MaxQuota, snapshot.QuotaMonth, "Europe/Paris"
	}
	store := rules.NewStore(rule)
	chain := limiter.NewChain(limiter.ChainOptions{Client: client, Timeout: time.Second, MaxWait: time.Second})
	b.Cleanup(func() { _ = chain.Close() })
	h := proxy.New(proxy.Options{
		Router:   func() routing.Router { return table },
		Decider:  decision.New(decision.Options{Rules: store, Limiter: chain}),
		Identity: identity.Direct{},
		Metrics:  metrics.NewGateway(prometheus.NewRegistry()),
		Logger:   logr.Discard(),
		Slots:    concurrency.New(concurrency.Options{Client: client, GatewayID: "bench", Timeout: time.Second}),
	})
	b.Cleanup(h.Close)
	return h
}
