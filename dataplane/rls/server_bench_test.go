package rls

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// constDecider answers every decision the same: the benchmark measures
// the service's own work (mapping, the response, its encoding), not the
// limiter's, which BenchmarkChainAllow measures on a real Redis.
type constDecider struct {
	okDecider
	d    decision.Decision
	rule *snapshot.Rule
}

func (c constDecider) Decide(context.Context, string, string, int64) (decision.Decision, *snapshot.Rule, error) {
	return c.d, c.rule, nil
}

// BenchmarkShouldRateLimit: one descriptor, admitted, the response
// encoded as gRPC sends it.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, ietf := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "ietf"}[ietf]
		b.Run(name, func(b *testing.B) {
			rule := &snapshot.Rule{Tenant: "*", Route: "*", Capacity: 100, RefillTokens: 50, RefillPeriodMs: 1000}
			s := New(Options{
				Decider: constDecider{rule: rule, d: decision.Decision{
					Outcome: limiter.Outcome{Allowed: true, Remaining: 41, ResetAfter: 1200 * time.Millisecond}, Limit: 100}},
				IETFHeaders: ietf,
				Logger:      logr.Discard(),
			})
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "shop-a"}, {Key: "route", Value: "bench"}},
			}}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				res, err := s.ShouldRateLimit(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := proto.Marshal(res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
