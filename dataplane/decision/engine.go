// Package decision turns (tenant, route, cost) into a rate limit decision:
// it finds the rule, derives the bucket this gateway uses (the region's share,
// the shards, the prefetch batch) and asks the limiter. The HTTP proxy and the
// Envoy rate limit service both decide through it.
package decision

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Rules looks up the rule of a tenant on a route; rules.Store implements it.
type Rules interface {
	// Lookup never returns nil: without a matching rule it returns the
	// built-in default.
	Lookup(tenant, route string) *snapshot.Rule
	// LookupClaims is Lookup for a request whose identity carries claims
	// (nil: none), which rules with spec.match.claims match on.
	LookupClaims(tenant, route string, claims snapshot.Claims) *snapshot.Rule
	// Extra appends to dst the rules in force of every kind other than
	// the default (spec.by, spec.shared) for tenant ("": no identity) on
	// route, which stack on Lookup's: nothing, without allocating, when
	// the snapshot has only the default kind.
	Extra(tenant, route string, claims snapshot.Claims, dst []*snapshot.Rule) []*snapshot.Rule
}

// Limiter is what the engine decides with, for one bucket or the shards of
// one: *limiter.Chain (the gateway's, with Redis or local-only) and
// *limiter.Local implement it.
type Limiter interface {
	// Allow takes cost tokens from b when it holds that many. It is called
	// once per request (per shard tried), from many goroutines at once.
	// An error means no decision could be made (Chain and Local never
	// return one).
	Allow(ctx context.Context, b limiter.Bucket, cost int64) (limiter.Outcome, error)
	// AllowSpread takes cost tokens from the shards of one bucket
	// together, for a cost larger than one shard can hold.
	AllowSpread(ctx context.Context, shards []limiter.Bucket, cost int64) (limiter.Outcome, error)
	// Charge takes cost tokens from b after its request was admitted,
	// into debt down to b.MaxDebt; it never fails (the rule's failure
	// mode decides when Redis cannot).
	Charge(ctx context.Context, b limiter.Bucket, cost int64) limiter.Charged
	// Refund gives back what o, an Outcome Allow or AllowSpread returned
	// for b, took. An error says the tokens stay spent.
	Refund(ctx context.Context, b limiter.Bucket, o limiter.Outcome) error
	// AllowAll decides the buckets of a request's stacked limits
	// together, all or nothing, in one Redis call where it can (refused:
	// the first enforcing one that refused, -1 none); ok false says it
	// could not and took nothing: decide them one by one then.
	AllowAll(ctx context.Context, ws []limiter.Want) (outs []limiter.Outcome, refused int, ok bool)
}

// The gateway's limiters.
var (
	_ Limiter = (*limiter.Chain)(nil)
	_ Limiter = (*limiter.Local)(nil)
)

// Options configure an Engine.
type Options struct {
	// Rules is the live rule snapshot.
	Rules Rules
	// Limiter decides for one bucket.
	Limiter Limiter
	// Region is this gateway's region (--region); "" for none.
	Region string
	// Replicas returns the number of live gateway replicas, used to size
	// automatic prefetch batches.
	Replicas func() int
	// Pick returns the shard a request tries first, in [0, n). Default:
	// uniformly at random. Tests make it deterministic.
	Pick func(n int) int
	// Clock is the calendar of quota periods (the script then picks the
	// period by Redis's time). Default time.Now.
	Clock func() time.Time
	// QuotaShift moves the script's calendar (Redis's time) by the same
	// amount a test moves Clock. Tests only: production leaves it 0.
	QuotaShift time.Duration
	// Demand, with WindowMs > 0, makes the gateway record in its region's
	// Redis what it admitted and refused for each rule whose region
	// shares follow the traffic (snapshot.Rule.FollowsTraffic), in the
	// call that decides: the region rebalancer reads it.
	Demand DemandOptions
	// Observe, if set, hears every decision: allowed is false for a
	// request refused (a Shadow rule's would-be refusal passes, so it
	// counts as allowed). The gateway's top-K of refused tenants
	// (dataplane/top) listens here, for both front doors. Called on the
	// request's goroutine: it must be cheap and safe for concurrent use.
	Observe func(tenant, route string, allowed bool)
	// Stacked, if set, hears how each request with stacked limits was
	// decided: in one call (oneCall) or in order. On the request's
	// goroutine: cheap and safe for concurrent use.
	Stacked func(oneCall bool)
}

// DemandOptions shape the demand ring of a rule in a region (see
// lua/token_bucket.lua): Slots windows of WindowMs each.
type DemandOptions struct {
	WindowMs, Slots int64
	// PerRule keeps one ring per rule and region (standalone Redis and
	// Sentinel: one server holds every key); false, one per bucket's
	// Redis Cluster slot (the tenant's), which a script call must share
	// with its bucket.
	PerRule bool
}

// DefaultDemandSlots is the ring's windows when DemandOptions.Slots is 0.
const DefaultDemandSlots = 12

func (d DemandOptions) slots() int64 {
	if d.Slots == 0 {
		return DefaultDemandSlots
	}
	return max(2, d.Slots)
}

// Decision is the answer for one request: the limiter's outcome and the
// capacity this gateway enforces for the rule (its region's share), the
// figure the limit headers carry.
type Decision struct {
	limiter.Outcome
	// Limit is the capacity this gateway enforces for the rule, at least 1.
	Limit int64
	// QuotaLimit is the calendar quota this gateway enforces for the rule
	// (its region's share); 0 without a quota.
	QuotaLimit int64

	// shard is 1 + the shard that decided, for Refund; 0 when the rule is
	// not sharded.
	shard int
}

// Engine decides. Safe for concurrent use.
type Engine struct {
	opts Options
}

// New returns an Engine.
func New(opts Options) *Engine {
	if opts.Replicas == nil {
		opts.Replicas = func() int { return 1 }
	}
	if opts.Pick == nil {
		opts.Pick = rand.IntN
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &Engine{opts: opts}
}

// Decide takes cost tokens for tenant on route. tenant and route must be
// valid ids. It returns the decision, with Limit set to the capacity this
// gateway enforces (the region's share of the rule), and the rule. An error
// comes only from a Limiter that returns one (Chain and Local never do).
func (e *Engine) Decide(ctx context.Context, tenant, route string, cost int64) (Decision, *snapshot.Rule, error) {
	rule := e.opts.Rules.Lookup(tenant, route)
	d, err := e.DecideRule(ctx, tenant, route, rule, cost)
	return d, rule, err
}

// Rule is the rule in force for tenant on route (never nil), for a caller
// that needs it before deciding (the HTTP proxy reads a request's cost
// from it).
func (e *Engine) Rule(tenant, route string) *snapshot.Rule {
	return e.opts.Rules.Lookup(tenant, route)
}

// RuleFor is Rule for a request whose identity carries claims (a verified
// token's; nil: none): rules with spec.match.claims apply to it, after the
// tenant's own rules (see snapshot.Set.LookupClaims).
func (e *Engine) RuleFor(tenant, route string, claims snapshot.Claims) *snapshot.Rule {
	return e.opts.Rules.LookupClaims(tenant, route, claims)
}

// DecideRule is Decide under rule, which Rule returned for tenant and
// route.
func (e *Engine) DecideRule(ctx context.Context, tenant, route string, rule *snapshot.Rule, cost int64) (Decision, error) {
	d, err := e.decideAt(ctx, limiter.Key(tenant, route), rule, cost)
	if e.opts.Observe != nil {
		e.opts.Observe(tenant, route, d.Allowed || rule.Shadow)
	}
	return d, err
}

// decideAt takes cost tokens from the bucket named base under rule (the
// region's share, the shards and their batch are derived from it).
func (e *Engine) decideAt(ctx context.Context, base string, rule *snapshot.Rule, cost int64) (Decision, error) {
	b, region := e.bucketAt(base, rule)
	shards := max(1, int(rule.Shards))
	var d limiter.Outcome
	var err error
	shard := -1
	if shards == 1 {
		b.Prefetch = e.batch(rule, b)
		d, err = e.opts.Limiter.Allow(ctx, b, cost)
	} else {
		d, shard, err = e.sharded(ctx, base, region, rule, b, shards, cost)
	}
	return Decision{Outcome: d, Limit: max(1, int64(b.Capacity)), QuotaLimit: b.Quota.Whole, shard: shard + 1}, err
}

// Refund gives back what d took, when a later check refuses the request d
// admitted (the HTTP proxy's concurrency slot): the same tokens into the
// same bucket, shard or region share, quota period, prefetched tokens or
// local bucket (Limiter.Refund). rule is the rule d was decided under.
// It returns d as the refund left it, for the limit headers: what it gave
// back is remaining again. A decision that took nothing (rejected, or
// FailOpen) gives back nothing. An error says the tokens stay spent.
func (e *Engine) Refund(ctx context.Context, tenant, route string, rule *snapshot.Rule, d Decision) (Decision, error) {
	return e.refundAt(ctx, limiter.Key(tenant, route), rule, d)
}

// refundAt is Refund of the bucket named base.
func (e *Engine) refundAt(ctx context.Context, base string, rule *snapshot.Rule, d Decision) (Decision, error) {
	cost := d.Taken()
	if cost == 0 {
		return d, nil
	}
	b, region := e.bucketAt(base, rule)
	if d.shard > 0 {
		b = shardBucket(b, base, region, d.shard-1, max(1, int(rule.Shards)))
	}
	if err := e.opts.Limiter.Refund(ctx, b, d.Outcome); err != nil {
		return d, err
	}
	d.Remaining = min(d.Limit, d.Remaining+cost)
	if d.Quota.Set {
		d.Quota.Remaining = min(d.QuotaLimit, d.Quota.Remaining+cost)
	}
	return d, nil
}

// bucket is the bucket this gateway uses for tenant on route: the whole rule,
// or its region's share under a key of its own.
func (e *Engine) bucket(tenant, route string, rule *snapshot.Rule) (limiter.Bucket, string) {
	return e.bucketAt(limiter.Key(tenant, route), rule)
}

// bucketAt is the bucket this gateway uses under rule for the bucket named
// base (limiter.Key, or a key of another kind, KeyFor): the whole rule, or
// its region's share under a key of its own.
func (e *Engine) bucketAt(base string, rule *snapshot.Rule) (limiter.Bucket, string) {
	b := limiter.BucketFor("", "", rule)
	b.Key = base
	region := ""
	if pct, ok := rule.Share(e.opts.Region); ok {
		region = e.opts.Region
		b.Key = limiter.RegionOf(base, region)
		b.Capacity = rule.RegionCapacity(region)
		b.RefillTokens, b.RefillPeriodMs = rule.RegionRefill(region)
		if d := e.opts.Demand; d.WindowMs > 0 && rule.FollowsTraffic() && rule.Source != "" {
			var key string
			if d.PerRule {
				key = regionshares.DemandKey(rule.Source, rule.Source, region)
			} else {
				key = limiter.DemandKey(b.Key, rule.Source, region)
			}
			b.Demand = limiter.Demand{Key: key, WindowMs: d.WindowMs, Slots: d.slots(), Percent: int64(pct), PerRule: d.PerRule}
		}
	}
	b.Quota = e.quota(base, region, rule)
	return b, region
}

// quota is the calendar quota of tenant on route (region's share): the
// period that held the clock QuotaSkew ago and the next one, in the rule's
// time zone. Rules are validated, so the zone loads.
func (e *Engine) quota(base, region string, rule *snapshot.Rule) limiter.Quota {
	if !rule.HasQuota() {
		return limiter.Quota{}
	}
	loc, err := rule.QuotaLocation()
	if err != nil {
		loc = time.UTC
	}
	start, end := snapshot.PeriodAt(rule.QuotaPeriod, loc, e.opts.Clock().Add(-limiter.QuotaSkew))
	_, next := snapshot.PeriodAt(rule.QuotaPeriod, loc, end)
	limit := rule.RegionQuota(region)
	return limiter.Quota{
		Key: limiter.QuotaKeyOf(base, region), Limit: limit, Whole: limit,
		Start: start.UnixMilli(), Switch: end.UnixMilli(), End: next.UnixMilli(), ShiftMs: e.opts.QuotaShift.Milliseconds(),
	}
}

// shardQuota is shard i's part of b's quota, under the shard's key.
func shardQuota(q limiter.Quota, shardKey string, i, shards int) limiter.Quota {
	if q.Key != "" {
		q.Key = limiter.ShardQuotaKey(shardKey)
		q.Limit = limiter.ShardQuota(q.Whole, i, shards)
	}
	return q
}

// shardBucket is shard i of b split into n shards, with its part of the
// quota.
func shardBucket(b limiter.Bucket, base, region string, i, n int) limiter.Bucket {
	sb := b
	sb.Capacity = b.Capacity / float64(n)
	sb.RefillPeriodMs = b.RefillPeriodMs * int64(n)
	sb.Shards, sb.WholeKey = n, b.Key
	sb.Key = limiter.ShardKeyOf(base, region, i)
	if sb.Demand.Key != "" && !sb.Demand.PerRule {
		// The shard's own ring, in the shard's slot.
		sb.Demand.Key = sb.Demand.ForKey(sb.Key)
	}
	sb.Quota = shardQuota(b.Quota, sb.Key, i, n)
	return sb
}

// sharded tries the shards of b, starting at a random one, until one has
// the tokens: a sharded bucket only rejects when every shard is empty. The
// limiter's empty-bucket cache makes shards known to be empty cost no call.
// It returns the shard that decided (the first tried for a spread cost).
func (e *Engine) sharded(ctx context.Context, base, region string, rule *snapshot.Rule, b limiter.Bucket, shards int, cost int64) (limiter.Outcome, int, error) {
	start := e.opts.Pick(shards)
	prefetch := e.batch(rule, shardBucket(b, base, region, start, shards))
	if float64(cost) > math.Floor(b.Capacity/float64(shards)) {
		// No shard can ever hold cost tokens (a shard grants whole
		// tokens): take them from several.
		all := make([]limiter.Bucket, shards)
		for k := range all {
			all[k] = shardBucket(b, base, region, (start+k)%shards, shards)
			all[k].Prefetch = prefetch
		}
		d, err := e.opts.Limiter.AllowSpread(ctx, all, cost)
		return d, start, err
	}
	var last limiter.Outcome
	retry := int64(-1)
	for k := range shards {
		i := (start + k) % shards
		sb := shardBucket(b, base, region, i, shards)
		sb.Prefetch = prefetch
		d, err := e.opts.Limiter.Allow(ctx, sb, cost)
		if err != nil {
			return d, i, err
		}
		if d.Allowed || d.Source != limiter.SourceRedis {
			// Allowed, or decided without Redis: the local fallback keeps
			// one bucket for the whole rule, so other shards would only
			// ask it again.
			if d.Source == limiter.SourceRedis {
				// Remaining is an estimate: this shard's, times the shards.
				d.Remaining *= int64(shards)
				d.Quota.Remaining *= int64(shards)
			}
			return d, i, nil
		}
		if d.RetryAfter >= 0 && (retry < 0 || int64(d.RetryAfter) < retry) {
			retry = int64(d.RetryAfter)
		}
		last = d
	}
	last.RetryAfter = time.Duration(retry)
	return last, -1, nil
}

// batch is the prefetch batch for bucket b of rule: 0 (none) unless the rule
// asks for prefetch. Auto sizes it so that all replicas together hold at
// most the error budget: budget x max(capacity, one second of refill) / N.
func (e *Engine) batch(rule *snapshot.Rule, b limiter.Bucket) int64 {
	switch rule.Prefetch {
	case snapshot.PrefetchFixed:
		return int64(rule.Batch)
	case snapshot.PrefetchAuto:
		budget := float64(rule.ErrorBudgetPercent)
		if budget == 0 {
			budget = snapshot.DefaultErrorBudgetPercent
		}
		limit := int64(rule.Batch)
		if limit == 0 {
			limit = snapshot.DefaultAutoBatch
		}
		n := float64(max(1, e.opts.Replicas()))
		perSecond := float64(b.RefillTokens) * 1000 / float64(b.RefillPeriodMs)
		batch := int64(math.Floor(budget / 100 * max(b.Capacity, perSecond) / n))
		if batch < 2 {
			return 0 // small limits stay exact
		}
		return min(batch, limit)
	}
	return 0
}

// Charge charges cost tokens to the bucket of tenant on route under rule
// after its request was admitted (a response-cost rule): the same bucket
// Decide took from (the region's share), allowed into debt down to the
// rule's maxDebt (scaled to the region's share). A cost of 0 or less
// charges nothing.
func (e *Engine) Charge(ctx context.Context, tenant, route string, rule *snapshot.Rule, cost int64) limiter.Charged {
	if cost <= 0 {
		return limiter.Charged{}
	}
	b, _ := e.bucket(tenant, route, rule)
	if rule.Cost != nil && rule.Cost.Response != nil {
		b.MaxDebt = float64(rule.Cost.Response.MaxDebt) * b.Capacity / float64(rule.Capacity)
	}
	return e.opts.Limiter.Charge(ctx, b, cost)
}
