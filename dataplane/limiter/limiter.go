// Package limiter makes rate limit decisions for one bucket: the Redis token
// bucket shared by every gateway replica and the local buckets used when
// Redis cannot answer. NewChain (chain.go) assembles its layers; read it
// first.
package limiter

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/regionshares"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Bucket names one token bucket and its limits.
type Bucket struct {
	// Key names the bucket (Key, RegionKey or ShardKey); Storage says where
	// in Redis it lives.
	Key string
	// Capacity is the bucket size. It can be fractional: a region's share or
	// a shard of a rule.
	Capacity float64
	// RefillTokens tokens are added every RefillPeriodMs milliseconds.
	RefillTokens   int64
	RefillPeriodMs int64
	// FailureMode is what Failover does when Redis cannot decide.
	FailureMode snapshot.FailureMode
	// Prefetch is the number of tokens Cache takes from Redis per call for
	// this bucket; 0 or 1 means one decision per request.
	Prefetch int64
	// Shards is the number of shards the rule's bucket is split into (0 or
	// 1: not sharded). The local fallback decides for the whole bucket, not
	// per shard, so that its floor of one token does not multiply.
	Shards int
	// WholeKey is the key of the unsharded bucket when Shards > 1; the
	// local fallback uses it.
	WholeKey string
	// Unit makes a Take's cost, want and granted count 1/Unit tokens (0 or
	// 1: whole tokens). A request spread over shards takes fractions.
	Unit int64
	// Charge makes a Take a charge (Chain.Charge): cost tokens are taken
	// unconditionally, down to -MaxDebt tokens at most (a debt); want is
	// ignored. Charges never share a script call.
	Charge bool
	// keepsLate: a reply that arrives after the Take returned is kept (the
	// Batcher hands it to its Late handler). The Cache sets it on its
	// calls, whose granted tokens it can hold; a charge's, a spread
	// request's or a give-back's late reply is dropped. (Here, beside
	// Charge, it takes no room of its own.)
	keepsLate bool
	// MaxDebt is, for a Charge, how far below zero the bucket may go, in
	// tokens (>= 0).
	MaxDebt float64

	// Quota is the calendar quota that must admit the request too (Key
	// "": none).
	Quota Quota

	// Demand, with Key set, makes the script record what the call admitted
	// and refused in the region's demand ring (rules whose region shares
	// follow the traffic; docs/regions.md).
	Demand Demand

	// node is the Redis node that holds Key (its address in a Cluster, ""
	// otherwise), set by the per-node breakers for the Batcher.
	node string
}

// localView is the bucket the local fallback keeps for b: the whole rule
// when b is one shard of it, b itself otherwise.
func (b *Bucket) localView() (key string, capacity, perMs float64) {
	perMs = float64(b.RefillTokens) / float64(b.RefillPeriodMs)
	if b.Shards > 1 {
		s := float64(b.Shards)
		return b.WholeKey, b.Capacity * s, perMs * s
	}
	return b.Key, b.Capacity, perMs
}

// Key names the bucket of tenant on route: rl:{tenant}:route, stored as the
// field route of the Redis hash rl:{tenant} (see Storage). The braces are a
// Redis Cluster hash tag, so all buckets of one tenant share a slot. tenant
// and route must be valid ids (v1alpha1.ValidIdentifier): they contain no
// '{', '}' or ':', which makes the name unambiguous.
func Key(tenant, route string) string {
	return "rl:{" + tenant + "}:" + route
}

// RegionKey is the key of a region's share of the bucket of tenant on
// route: rl:{tenant}:route@region. Region names contain no '@' or ':'.
func RegionKey(tenant, route, region string) string {
	return RegionOf(Key(tenant, route), region)
}

// RegionOf is the key of a region's share of the bucket named base (Key,
// or a key of another kind: rl:{<first part>}:|<kind>|...): base@region,
// in the same hash as base.
func RegionOf(base, region string) string {
	return base + "@" + region
}

// ShardKey is the key of shard i of a sharded bucket:
// rl:tenant:route[@region]:i. It has no hash tag, so Redis Cluster spreads
// the shards of one bucket over its nodes; without braces it can never equal
// an unsharded key.
func ShardKey(tenant, route, region string, i int) string {
	return ShardKeyOf(Key(tenant, route), region, i)
}

// ShardKeyOf is the key of shard i of the bucket named base (see
// ShardKey): base without its hash tag's braces, @region, :i.
func ShardKeyOf(base, region string, i int) string {
	k := base
	if open := strings.IndexByte(k, '{'); open >= 0 {
		if end := strings.IndexByte(k, '}'); end > open {
			k = k[:open] + k[open+1:end] + k[end+1:]
		}
	}
	if region != "" {
		k += "@" + region
	}
	return k + ":" + strconv.Itoa(i)
}

// BucketFor is the whole, unsplit bucket of tenant on route under rule.
func BucketFor(tenant, route string, rule *snapshot.Rule) Bucket {
	return Bucket{
		Key:            Key(tenant, route),
		Capacity:       float64(rule.Capacity),
		RefillTokens:   rule.RefillTokens,
		RefillPeriodMs: rule.RefillPeriodMs,
		FailureMode:    rule.FailureMode,
	}
}

// Source says who made a decision.
type Source uint8

const (
	// SourceRedis: the shared bucket in Redis.
	SourceRedis Source = iota
	// SourceLocal: this instance's local bucket, while Redis cannot answer.
	SourceLocal
	// SourceFailOpen: Redis could not answer and the rule fails open.
	SourceFailOpen
	// SourceFailClosed: Redis could not answer and the rule fails closed.
	SourceFailClosed
)

func (s Source) String() string {
	switch s {
	case SourceRedis:
		return "redis"
	case SourceLocal:
		return "local"
	case SourceFailOpen:
		return "fail-open"
	case SourceFailClosed:
		return "fail-closed"
	}
	return "unknown"
}

// Outcome is the limiter's answer for one request on one bucket. The
// decision engine adds the rule's limit to it (decision.Decision).
type Outcome struct {
	// Allowed is true when the request may pass.
	Allowed bool
	// Remaining is the number of whole tokens left after this request.
	Remaining int64
	// RetryAfter is, for a rejected request, the time until the bucket holds
	// enough tokens for it; 0 when allowed. Negative when it never will (the
	// cost exceeds the capacity).
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again.
	ResetAfter time.Duration
	// Source says who decided.
	Source Source
	// Quota is the calendar quota's state after the request (Set only for
	// a rule with a quota; not set when the failure mode decided).
	Quota QuotaOutcome

	// taken is what an admitted request took, for Refund.
	taken taken
}

// Limiter decides whether requests may pass, one bucket at a time: Chain
// and Local implement it, and tests and tools compare them (and a Taker
// made one) through it. The decision engine's decision.Limiter has the
// rest of what Chain and Local do (AllowSpread, Charge, Refund).
type Limiter interface {
	// Allow takes cost tokens from bucket b when it holds at least that many.
	// The gateway calls it once per request, from many goroutines at once.
	// An error means no decision could be made; Chain never returns one (it
	// applies the rule's failure mode instead).
	Allow(ctx context.Context, b Bucket, cost int64) (Outcome, error)
}

// Charged is the answer to a Charge: a cost that is known only after a
// request was admitted (the cost a response reports), taken from the
// bucket whatever it holds, into debt down to -b.MaxDebt tokens, so that
// the next requests wait until it refills.
type Charged struct {
	// Tokens were charged: cost, or less when the debt floor cut it.
	Tokens int64
	// Remaining whole tokens are left; negative for a bucket in debt.
	Remaining int64
	// Source says which bucket was charged: SourceRedis, SourceLocal, or
	// SourceFailOpen / SourceFailClosed when nothing was.
	Source Source
}

// Taker takes tokens from the shared buckets. Every layer below the chain's
// outer one implements it, with this one method: Redis and Batcher (the
// script), Mirror (the local buckets kept in step with them), Breaker and
// Breakers (circuit breakers around those) and Cache (empty buckets and
// prefetch).
type Taker interface {
	// Take takes between cost and want tokens from b, or none when fewer
	// than cost are there. Safe for concurrent use.
	Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error)
}

// TakeResult is the answer to one Take.
type TakeResult struct {
	// Granted tokens were taken: 0, or between cost and want.
	Granted int64
	// Remaining whole tokens are left.
	Remaining int64
	// WaitMs is the time until cost tokens exist after the call (the wait
	// before retrying a rejected call); -1 when cost exceeds capacity.
	WaitMs int64
	// ResetMs is the time until the bucket is full.
	ResetMs int64
	// Quota is what the quota said (Set only for a bucket with a quota).
	Quota QuotaResult
	// Cached is true when the Cache answered from what it already knew,
	// without asking Redis: such answers say nothing about Redis's health.
	Cached bool

	// state is the bucket as the script left it (zero when the answer is
	// not the script's).
	state bucketState
}

// outcome turns the answer to a Take of cost into an Outcome decided by
// Redis.
func (r TakeResult) outcome(cost int64) Outcome {
	d := Outcome{
		Allowed:    r.Granted >= cost,
		Remaining:  r.Remaining,
		ResetAfter: msDuration(float64(r.ResetMs)),
		Source:     SourceRedis,
	}
	if !d.Allowed {
		d.RetryAfter = msDuration(float64(r.WaitMs))
	}
	if q := r.Quota; q.Set {
		d.Quota = QuotaOutcome{Set: true, Remaining: q.Remaining, ResetAfter: msDuration(float64(q.ResetMs)), Refused: !d.Allowed && q.Short}
	}
	return d
}

// Demand says where a call records its region's demand: the script's
// ARGV[19..23] (lua/token_bucket.lua).
type Demand struct {
	// Key is the ring (DemandKey); "": the call records nothing.
	Key string
	// WindowMs is the length of one window of the ring, Slots the windows
	// it holds.
	WindowMs, Slots int64
	// Percent is the region's share in force in this gateway.
	Percent int64
	// Refused is the tokens the gateway refused on its own (the Cache's
	// empty-bucket answers) since its last call of the bucket; the Cache
	// sets it.
	Refused int64
	// PerRule: Key is the rule's one ring in the region (not a Redis
	// Cluster: no slot to share with the bucket), the same for its shards.
	PerRule bool
}

// DemandKey is the demand ring of rule (its source, "namespace/name") in
// region for the bucket named key: rd:{<tag>}:<rule>@<region>, <tag>
// being the hash tag of the hash that holds key (the tenant, for
// rl:{tenant}:route), or, for a bucket without one (a shard), the whole
// key, so that the ring is in the bucket's Redis Cluster slot and one
// script call can touch both.
func DemandKey(key, rule, region string) string {
	return Demand{Key: regionshares.DemandKey("", rule, region)}.ForKey(key)
}

// ForKey is d's ring for the bucket named key instead (a shard of the
// bucket d was made for): the same rule and region, key's tag.
func (d Demand) ForKey(key string) string {
	hash, _ := Storage(key)
	tag := hash
	if open := strings.IndexByte(hash, '{'); open >= 0 {
		if end := strings.IndexByte(hash[open:], '}'); end > 1 {
			tag = hash[open+1 : open+end]
		}
	}
	rest := d.Key
	if i := strings.Index(rest, "}:"); i >= 0 {
		rest = rest[i+2:]
	}
	return regionshares.KeyPrefix + tag + "}:" + rest
}
