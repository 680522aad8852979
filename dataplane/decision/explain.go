package decision

import (
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Plan is how the engine decides for a tenant on a route, worked out
// without deciding (`tollgate explain`).
type Plan struct {
	// Rule is the rule in force.
	Rule *snapshot.Rule
	// Region is this gateway's region when the rule gives it a share ("":
	// the whole rule); Percent is the share.
	Region  string
	Percent int32
	// Bucket is the bucket the rule limits: the whole rule or the region's
	// share, with the prefetch batch of an unsharded bucket.
	Bucket limiter.Bucket
	// Shards are the buckets a request tries when the rule is sharded
	// (capacity and rate divided among them), with their prefetch batch;
	// empty when it is not.
	Shards []limiter.Bucket
}

// Plan returns the rule and buckets Decide would use for tenant on route.
func (e *Engine) Plan(tenant, route string) Plan {
	rule := e.opts.Rules.Lookup(tenant, route)
	b, region := e.bucket(tenant, route, rule)
	p := Plan{Rule: rule, Region: region}
	if region != "" {
		p.Percent, _ = rule.Share(region)
	}
	shards := max(1, int(rule.Shards))
	if shards == 1 {
		b.Prefetch = e.batch(rule, b)
		p.Bucket = b
		return p
	}
	p.Bucket = b
	sb := b
	sb.Capacity = b.Capacity / float64(shards)
	sb.RefillPeriodMs = b.RefillPeriodMs * int64(shards)
	sb.Prefetch = e.batch(rule, sb)
	sb.Shards, sb.WholeKey = shards, b.Key
	for k := range shards {
		s := sb
		s.Key = limiter.ShardKeyOf(limiter.Key(tenant, route), region, k)
		s.Quota = shardQuota(b.Quota, s.Key, k, shards)
		p.Shards = append(p.Shards, s)
	}
	return p
}

// LimitBucket is the bucket this gateway uses for limit l (its region's
// share, before shards), for explain.
func (e *Engine) LimitBucket(l Limit) limiter.Bucket {
	b, _ := e.bucketAt(l.Key, l.Rule)
	b.Prefetch = e.batch(l.Rule, b)
	return b
}
