package limiter

import (
	"strconv"
	"strings"
	"time"
)

// Quota is a calendar quota checked in the same script call as a bucket:
// both must admit a request, atomically. The decision engine fills it from
// the rule (decision.Engine); the chain adds what its local fallback owes.
//
// The periods are computed by the gateway in the rule's time zone; the
// script counts in the one of the two that holds Redis's time (see
// lua/token_bucket.lua).
type Quota struct {
	// Key is the counter's base key (QuotaKey, ShardQuotaKey); "" means no
	// quota. A period's counter is Key:<start ms>.
	Key string
	// Limit is this bucket's quota per period: the rule's (its region's
	// share), or a shard's part of it. May be 0 for a shard.
	Limit int64
	// Whole is the quota of the whole bucket, which the local fallback
	// enforces (1/N of it): Limit unless the bucket is a shard.
	Whole int64
	// Start, Switch and End bound two consecutive periods in ms since the
	// epoch: [Start, Switch) held the gateway's time a minute ago, and
	// [Switch, End) follows it.
	Start, Switch, End int64
	// Owed tokens were admitted by the local fallback in the period that
	// starts at OwedStart; the script adds them to that period's count.
	Owed, OwedStart int64
	// ShiftMs moves the script's calendar (Redis's time plus ShiftMs).
	// Tests only; 0 in production.
	ShiftMs int64
}

// QuotaSkew is how far the gateways' clocks may be from Redis's for the
// script to pick periods by Redis's time alone: the engine passes the
// period that held now-QuotaSkew and the next one.
const QuotaSkew = time.Minute

// counter is the key of the period starting at startMs.
func (q *Quota) counter(startMs int64) string {
	return q.Key + ":" + strconv.FormatInt(startMs, 10)
}

// Counter is the key that counts the period holding nowMs (ms, the
// gateway's calendar), and that period's bounds.
func (q *Quota) Counter(nowMs int64) (key string, start, end int64) {
	start, end = q.periodAt(nowMs)
	return q.counter(start), start, end
}

// periodAt is the period of the two that holds nowMs (in the gateway's
// calendar): its start and end.
func (q *Quota) periodAt(nowMs int64) (start, end int64) {
	if nowMs >= q.Switch {
		return q.Switch, q.End
	}
	return q.Start, q.Switch
}

// QuotaKey is the base key of the quota of tenant on route (and region):
// rq:{tenant}:route[@region]. Its hash tag puts it in the slot of the
// tenant's buckets (Key), so one script call reaches both in Redis Cluster.
func QuotaKey(tenant, route, region string) string {
	return QuotaKeyOf(Key(tenant, route), region)
}

// QuotaKeyOf is the base key of the quota of the bucket named base (Key,
// or a key of another kind): rq: in place of rl:, @region, in the slot of
// base by the same hash tag.
func QuotaKeyOf(base, region string) string {
	k := "rq" + strings.TrimPrefix(base, "rl")
	if region != "" {
		k += "@" + region
	}
	return k
}

// ShardQuotaKey is the base key of a shard's part of a quota:
// rq:{<shard key>}, in the slot of the shard's own key (a key without braces
// hashes whole).
func ShardQuotaKey(shardKey string) string {
	return "rq:{" + shardKey + "}"
}

// ShardQuota is shard i's part of a quota of limit split over n shards:
// the parts differ by at most one and add up to limit.
func ShardQuota(limit int64, i, n int) int64 {
	part := limit / int64(n)
	if int64(i) < limit%int64(n) {
		part++
	}
	return part
}

// QuotaResult is the quota's part of a script reply.
type QuotaResult struct {
	// Set is true when the call carried a quota.
	Set bool
	// Remaining tokens are left in the period after the call.
	Remaining int64
	// ResetMs is the time until the period ends.
	ResetMs int64
	// Short: the quota holds fewer tokens than the call's cost now (for a
	// rejected call: the quota refused it).
	Short bool
	// Start is the start of the period the call counted in (of the
	// bucket's two: Quota.Start or Quota.Switch), by Redis's time.
	Start int64
}

// QuotaOutcome is the quota's state after a decision.
type QuotaOutcome struct {
	// Set is true for a rule with a quota, decided by Redis or the local
	// fallback.
	Set bool
	// Remaining tokens are left in the period (the local share during a
	// Redis outage).
	Remaining int64
	// ResetAfter is the time until the period ends.
	ResetAfter time.Duration
	// Refused: the quota (not the bucket) rejected the request; RetryAfter
	// is then the time to the next period.
	Refused bool
}
