// Package explain answers "why was this tenant limited?" for one gateway:
// the rule in force and the precedence step that chose it, the bucket keys
// (region share, shards), each bucket's live state in Redis read with
// read-only commands only, what this gateway holds (prefetched tokens, the
// empty-bucket cache, the breaker of the key's node) and the local
// fallback's bucket. The gateway serves it as JSON at /debug/explain on its
// admin listener; `tollgate explain` prints it. It takes a tenant id, never
// an API key, and its answer holds none.
package explain

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Report is the answer of /debug/explain.
type Report struct {
	Tenant string `json:"tenant"`
	Route  string `json:"route"`
	// RouteKnown is false when this gateway proxies HTTP and the route is
	// not in its route table (the Envoy rate limit service may still use
	// it); always true for a rate limit service without routes.
	RouteKnown bool `json:"routeKnown"`
	// SnapshotVersion is the rule snapshot in force (0: none loaded, the
	// built-in default decides everything).
	SnapshotVersion int64 `json:"snapshotVersion"`
	Rule            Rule  `json:"rule"`
	// Region is this gateway's region when the rule gives it a share.
	Region        string `json:"region,omitempty"`
	RegionPercent int32  `json:"regionPercent,omitempty"`
	// RegionSplit says where RegionPercent comes from: "follows traffic"
	// (the share in force the region rebalancer published, or spec's
	// until it has) or "fixed" (spec.regionSplit Fixed); DemandKey is the
	// ring where this gateway records the region's demand.
	RegionSplit string `json:"regionSplit,omitempty"`
	DemandKey   string `json:"demandKey,omitempty"`
	// Limiter is "redis" or "local" (--limiter=local: no Redis, every
	// replica enforces 1/N on its own).
	Limiter string `json:"limiter"`
	// Capacity and RefillPerSecond of the bucket this gateway enforces (the
	// region's share of the rule, or the whole rule).
	Capacity        float64 `json:"capacity"`
	RefillPerSecond float64 `json:"refillPerSecond"`
	// Buckets are the Redis buckets a request takes from: one, or one per
	// shard.
	Buckets []Bucket `json:"buckets"`
	// Breaker is the worst breaker state of the Redis nodes; Nodes each
	// node's ("" is the single server).
	Breaker string            `json:"breaker,omitempty"`
	Nodes   map[string]string `json:"nodes,omitempty"`
	// Replicas is N, the live replica count; ReplicasCounted is false while
	// the gateway assumes --replicas-until-counted.
	Replicas        int  `json:"replicas"`
	ReplicasCounted bool `json:"replicasCounted"`
	// LocalFallback is the local bucket used while Redis cannot decide (for
	// LocalFallback rules).
	LocalFallback LocalFallback `json:"localFallback"`
	// Concurrency is the rule's concurrency limit; nil when it has none.
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	// Quota is the rule's calendar quota; nil without one.
	Quota *Quota `json:"quota,omitempty"`
	// Address is the client address asked about ("": none given).
	Address string `json:"address,omitempty"`
	// Limits lists every limit that applies when rules of other kinds
	// (spec.by, spec.shared) stack on the rule in force, the rule in force
	// first, and which binds; empty when the rule in force alone decides.
	Limits []Limit `json:"limits,omitempty"`
}

// Rule is the rule in force.
type Rule struct {
	// Source is the RateLimitRule (namespace/name); empty for the built-in
	// default.
	Source string `json:"source,omitempty"`
	// Tenant and Route are the rule's selectors ("*" for any).
	Tenant string `json:"tenant"`
	Route  string `json:"route"`
	// Precedence is the step that chose it: 1 tenant and route, 2 tenant and
	// any route, 3 any tenant and route, 4 any tenant and any route, 5 the
	// built-in default (no rule matches); PrecedenceText says so in words.
	Precedence     int    `json:"precedence"`
	PrecedenceText string `json:"precedenceText"`
	Capacity       int64  `json:"capacity"`
	RefillTokens   int64  `json:"refillTokens"`
	RefillPeriod   string `json:"refillPeriod"`
	Mode           string `json:"mode"`
	FailureMode    string `json:"failureMode"`
	Shards         int    `json:"shards,omitempty"`
	// Cost describes spec.cost in words; empty when every request costs
	// one token.
	Cost string `json:"cost,omitempty"`
}

// Bucket is one Redis bucket.
type Bucket struct {
	Key             string  `json:"key"`
	Shard           *int    `json:"shard,omitempty"`
	Capacity        float64 `json:"capacity"`
	RefillPerSecond float64 `json:"refillPerSecond"`
	// PrefetchBatch is the tokens one Redis call takes for this gateway (0:
	// one call per request).
	PrefetchBatch int64 `json:"prefetchBatch"`
	// Redis is the bucket's state in Redis, refilled to Redis's clock now;
	// nil with --limiter=local.
	Redis *RedisState `json:"redis,omitempty"`
	// Node is the Redis node of the key (cluster mode) and Breaker its
	// breaker's state.
	Node    string `json:"node,omitempty"`
	Breaker string `json:"breaker,omitempty"`
	// Prefetched tokens this gateway holds for the bucket and for how long
	// more.
	Prefetched          int64 `json:"prefetched"`
	PrefetchExpiresInMs int64 `json:"prefetchExpiresInMs,omitempty"`
	// EmptyCost is the smallest cost this gateway rejects without asking
	// Redis (after Redis refused a request of the bucket), for EmptyForMs
	// more; larger costs for longer, as the script would.
	EmptyForMs int64 `json:"emptyForMs,omitempty"`
	EmptyCost  int64 `json:"emptyCost,omitempty"`
}

// RedisState is a bucket as stored in Redis.
type RedisState struct {
	// Hash and Field are where the bucket lives: a field of a hash (all
	// of a tenant's unsharded buckets share the hash rl:{tenant}).
	Hash  string `json:"hash"`
	Field string `json:"field"`
	// Exists is false when Redis holds no state: the bucket is full (an
	// idle bucket expires and comes back full).
	Exists bool `json:"exists"`
	// Tokens now: the stored tokens refilled from the stored time to
	// Redis's clock, capped at the capacity.
	Tokens float64 `json:"tokens"`
	// StoredTokens and StoredAgoMs are the stored state and its age.
	StoredTokens float64 `json:"storedTokens,omitempty"`
	StoredAgoMs  int64   `json:"storedAgoMs,omitempty"`
	// TTLMs is the hash's remaining time to live (-1: none, -2: no hash);
	// a bucket idle for longer than its full refill reads as full anyway.
	TTLMs int64 `json:"ttlMs"`
	// Error is set when Redis could not be read; the state is then
	// unknown.
	Error string `json:"error,omitempty"`
}

// LocalFallback is the local fallback's bucket.
type LocalFallback struct {
	Key string `json:"key"`
	// Exists is false when this gateway keeps none yet: it would start full.
	Exists          bool    `json:"exists"`
	Tokens          float64 `json:"tokens"`
	Capacity        float64 `json:"capacity"`
	RefillPerSecond float64 `json:"refillPerSecond"`
}

// Source is what a gateway gives Build.
type Source struct {
	Engine *decision.Engine
	Chain  *limiter.Chain
	// Redis is nil with --limiter=local.
	Redis redis.UniversalClient
	// Snapshot is the rule snapshot in force; nil before the first.
	Snapshot        *snapshot.Set
	Replicas        int
	ReplicasCounted bool
	// RouteKnown tells a route of the HTTP route table; nil without one.
	RouteKnown func(route string) bool
	// Clock is the gateway's calendar for quota periods; nil: time.Now.
	Clock func() time.Time
}

// Now is src's clock now.
func (src Source) Now() time.Time {
	if src.Clock == nil {
		return time.Now()
	}
	return src.Clock()
}

// ValidateQuery checks a tenant and a route id; the error names the field.
func ValidateQuery(tenant, route string) error {
	switch {
	case tenant == "":
		return fmt.Errorf("tenant: required (a tenant id; explain never takes an API key)")
	case !v1alpha1.ValidIdentifier(tenant):
		return fmt.Errorf("tenant: %q is not a valid tenant id", tenant)
	case route == "":
		return fmt.Errorf("route: required (a route id)")
	case !v1alpha1.ValidIdentifier(route):
		return fmt.Errorf("route: %q is not a valid route id", route)
	}
	return nil
}

// Build explains tenant on route (both valid ids) without taking a token.
func Build(ctx context.Context, src Source, tenant, route string) Report {
	return BuildFrom(ctx, src, tenant, route, netip.Addr{})
}

// BuildFrom is Build for a request from client address addr (the zero
// Addr: unknown), which keys the rules by clientAddress.
func BuildFrom(ctx context.Context, src Source, tenant, route string, addr netip.Addr) Report {
	r := build(ctx, src, tenant, route)
	if addr.IsValid() {
		r.Address = addr.String()
	}
	r.Limits = stackedLimits(ctx, src, src.Engine.Rule(tenant, route), tenant, route, addr)
	return r
}

// build is Build of the rule in force alone.
func build(ctx context.Context, src Source, tenant, route string) Report {
	plan := src.Engine.Plan(tenant, route)
	r := Report{
		Tenant: tenant, Route: route,
		Rule:   ruleOf(plan.Rule, tenant, route, src.Snapshot == nil || src.Snapshot.Lookup(tenant, route) == nil),
		Region: plan.Region, RegionPercent: plan.Percent,
		Limiter: "local", Replicas: src.Replicas, ReplicasCounted: src.ReplicasCounted,
		Capacity: plan.Bucket.Capacity, RefillPerSecond: perSecond(plan.Bucket),
	}
	if src.Snapshot != nil {
		r.SnapshotVersion = src.Snapshot.Version()
	}
	if plan.Region != "" {
		r.RegionSplit, r.DemandKey = "fixed", plan.Bucket.Demand.Key
		if plan.Rule.FollowsTraffic() {
			r.RegionSplit = "follows traffic"
		}
	}
	r.RouteKnown = src.RouteKnown == nil || src.RouteKnown(route)
	buckets := plan.Shards
	if len(buckets) == 0 {
		buckets = []limiter.Bucket{plan.Bucket}
	}
	if src.Redis != nil {
		r.Limiter = "redis"
		r.Breaker = src.Chain.State()
		r.Nodes = src.Chain.NodeStates()
	}
	for i, b := range buckets {
		out := Bucket{Key: b.Key, Capacity: b.Capacity, RefillPerSecond: perSecond(b), PrefetchBatch: b.Prefetch}
		if len(plan.Shards) > 0 {
			out.Shard = &i
		}
		if src.Redis != nil {
			st := ReadBucket(ctx, src.Redis, b)
			out.Redis = &st
			h := src.Chain.Held(ctx, b)
			out.Node, out.Breaker = h.Node, h.Breaker
			out.Prefetched, out.PrefetchExpiresInMs = h.Prefetched, ceilMs(h.PrefetchExpiresIn)
			out.EmptyForMs, out.EmptyCost = ceilMs(h.EmptyFor), h.EmptyCost
		}
		r.Buckets = append(r.Buckets, out)
	}
	r.Concurrency = concurrencyOf(ctx, src, plan, tenant, route)
	l := src.Chain.LocalHeld(buckets[0])
	r.LocalFallback = LocalFallback{Key: l.Key, Exists: l.Exists, Tokens: l.Tokens, Capacity: l.Capacity, RefillPerSecond: l.RefillPerSecond}
	r.Quota = quotaOf(ctx, src.Redis, plan.Rule, buckets, src.Now())
	return r
}

func ceilMs(d time.Duration) int64 {
	return int64(math.Ceil(float64(d) / float64(time.Millisecond)))
}

func perSecond(b limiter.Bucket) float64 {
	return float64(b.RefillTokens) * 1000 / float64(b.RefillPeriodMs)
}

// ruleOf describes rule as the rule in force for tenant on route; builtIn
// says no rule of the snapshot matches.
func ruleOf(rule *snapshot.Rule, tenant, route string, builtIn bool) Rule {
	r := Rule{
		Source: rule.Source, Tenant: rule.Tenant, Route: rule.Route,
		Capacity: rule.Capacity, RefillTokens: rule.RefillTokens, RefillPeriod: rule.Period().String(),
		Mode: "Enforce", FailureMode: rule.FailureMode.String(),
	}
	if rule.Shadow {
		r.Mode = "Shadow"
	}
	if rule.Shards > 1 {
		r.Shards = int(rule.Shards)
	}
	r.Cost = costText(rule.Cost)
	switch {
	case builtIn:
		r.Source, r.Tenant, r.Route = "", v1alpha1.Wildcard, v1alpha1.Wildcard
		r.Precedence, r.PrecedenceText = 5, "built-in default: no RateLimitRule matches (gateway --default-capacity and --default-refill-per-second)"
	case rule.Tenant == tenant && rule.Route == route:
		r.Precedence, r.PrecedenceText = 1, "1 of 4: the rule for this tenant on this route"
	case rule.Tenant == tenant:
		r.Precedence, r.PrecedenceText = 2, "2 of 4: the rule for this tenant on any route (no rule for this tenant on this route)"
	case rule.Route == route:
		r.Precedence, r.PrecedenceText = 3, "3 of 4: the rule for any tenant on this route (no rule for this tenant)"
	default:
		r.Precedence, r.PrecedenceText = 4, "4 of 4: the rule for any tenant on any route (no more specific rule)"
	}
	return r
}

// costText describes a rule's cost: what a request takes up front and
// what its response is charged.
func costText(c *snapshot.Cost) string {
	if c == nil {
		return ""
	}
	var s string
	switch {
	case c.Header != "":
		s = fmt.Sprintf("request: header %s (without it %d, at most %d)", c.Header, c.RequestDefault(), c.RequestMax())
	default:
		s = fmt.Sprintf("request: %d", c.RequestDefault())
	}
	if rc := c.Response; rc != nil {
		from := "header " + rc.Header
		if rc.JSONField != "" {
			from = "JSON field " + rc.JSONField
		}
		s += fmt.Sprintf("; then the response's %s (at most %d; none usable: %d; upstream failed: %d; client gone: %d), into debt down to -%d tokens",
			from, rc.Bound(), rc.Default, rc.OnError, rc.ClientGone(), rc.MaxDebt)
	}
	return s
}
