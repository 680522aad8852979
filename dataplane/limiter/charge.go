package limiter

import (
	"context"
	"math"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Charge takes cost tokens from b whatever it holds, cut at the debt floor
// (-b.MaxDebt). It never fails: one script call in debt mode (ARGV[10]),
// bounded by MaxWait on a context of its own (the request's may be over:
// its client went away), past the Cache (a charge is not a decision) and
// never coalesced (the Mirror below mirrors Redis's answer into the local
// bucket). When the call fails, the rule's failure mode decides:
// LocalFallback charges the local bucket, which then owes its share of the
// debt as Redis's answers mirror it; FailOpen and FailClosed charge
// nothing. A call that failed while the breaker was closed may still have
// run in Redis: the local bucket is charged too (fewer admissions during a
// later outage, never more).
func (c *Chain) Charge(ctx context.Context, b Bucket, cost int64) Charged {
	if c.cache == nil {
		return c.local.Charge(ctx, b, cost)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.MaxWait)
	defer cancel()
	b.Charge = true
	r, err := c.breaker.Take(ctx, b, cost, cost)
	if err != nil {
		switch b.FailureMode {
		case snapshot.FailOpen:
			return Charged{Source: SourceFailOpen}
		case snapshot.FailClosed:
			return Charged{Source: SourceFailClosed}
		}
		return c.local.Charge(ctx, b, cost)
	}
	c.cache.learn(b, r) // its refusals wait for the debt too
	return Charged{Tokens: r.Granted, Remaining: r.Remaining, Source: SourceRedis}
}

// Charge is Chain.Charge for the local buckets: cost tokens are taken
// from this replica's share of b whatever it holds, down to -MaxDebt/N (N
// replicas share the debt as they share the capacity).
func (l *Local) Charge(_ context.Context, b Bucket, cost int64) Charged {
	key, capacity, perMs, n := l.share(&b)
	floor := -max(0, b.MaxDebt) / n
	now := l.opts.Clock()
	sh := l.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	bk := l.bucket(sh, key, capacity, perMs, now)
	charge := math.Floor(max(0, min(float64(max(0, cost)), bk.tokens-floor)))
	bk.tokens -= charge
	return Charged{Tokens: int64(charge), Remaining: int64(math.Floor(bk.tokens)), Source: SourceLocal}
}
