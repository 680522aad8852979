package decision_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// BenchmarkDecideStack: a tenant's route limit and its budget across
// routes (one slot) on a real redis-server, 16 goroutines deciding for
// 100 tenants, buckets that never empty: one script call per decision
// where one call decides the stack. Allocations per decision of this
// process (redis-server is another):
//
//	go test -run '^$' -bench DecideStack -benchmem ./dataplane/decision/
func BenchmarkDecideStack(b *testing.B) {
	srv := redistest.Start(b)
	big := func(by ...snapshot.KeyPart) snapshot.Rule {
		return snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1 << 30, RefillTokens: 1 << 30, RefillPeriodMs: 1000, By: by,
			Source: fmt.Sprint("bench/", len(by))}
	}
	store := rules.NewStore(big())
	store.Replace(snapshot.Build([]snapshot.Rule{big(), big(byTenant)}, 1))
	ch := limiter.NewChain(limiter.ChainOptions{Client: srv.Client(b), Coalesce: true, EmptyBucketCache: true, Timeout: time.Second, MaxWait: 2 * time.Second})
	b.Cleanup(func() { _ = ch.Close() })
	e := decision.New(decision.Options{Rules: store, Limiter: ch})
	var refused atomic.Int64
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		costs := []int64{1, 1}
		for pb.Next() {
			req := decision.Request{Tenant: fmt.Sprintf("t%03d", next.Add(1)%100), Route: "r"}
			limits, err := e.Limits(req, e.Rule(req.Tenant, req.Route))
			if err != nil || len(limits) != 2 {
				b.Fatalf("limits %v, %v", limits, err)
			}
			if st, _ := e.DecideStack(ctx, req, limits, costs); st.Refused {
				refused.Add(1) // a machine too busy
			}
		}
	})
	b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
}
