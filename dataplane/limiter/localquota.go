package limiter

import (
	"hash/maphash"
	"math"
	"time"
)

// The local fallback's calendar quotas. While Redis cannot decide, a
// gateway admits at most 1/N of the quota that Redis last reported left in
// the period (1/N of the whole quota for a quota it never heard of, or
// after the period changed), and remembers what it admitted on its own
// (owed). The next call it sends to Redis for the bucket carries the owed
// tokens, and the script adds them to the period's count before deciding:
// once Redis is back, the count holds every admission of the period. Owed
// tokens of a period that ended are dropped (that period is over). A call
// that carried owed tokens and failed after it ran in Redis (a time-out)
// hands them back, so they are counted twice: fewer admissions, never more.
//
// Over-admission during an outage is bounded by what Redis reported left:
// the N gateways together spend at most their shares of it.

// localQuota is one bucket's quota in the local fallback.
type localQuota struct {
	// whole and start/end (ms in the gateway's calendar) identify the
	// quota and period; a change starts the entry over.
	whole      int64
	start, end int64
	// left is what this gateway may still admit on its own in the period,
	// as a share of n replicas.
	left float64
	n    float64
	// owed tokens were admitted here and are not counted in Redis yet.
	owed int64
}

// quota returns b's local quota for the period holding now, or nil when b
// has none. The caller holds sh.mu.
func (l *Local) quota(sh *localShard, key string, b *Bucket, now time.Time) *localQuota {
	if b.Quota.Key == "" {
		return nil
	}
	start, end := b.Quota.periodAt(now.UnixMilli())
	n := float64(max(1, l.opts.Replicas()))
	q := sh.quotas[key]
	if q == nil || q.start != start || q.whole != b.Quota.Whole {
		if q == nil {
			l.makeQuotaRoom(sh)
		}
		q = &localQuota{whole: b.Quota.Whole, start: start, end: end, left: float64(b.Quota.Whole) / n, n: n}
		sh.quotas[key] = q
	}
	if q.n != n {
		// The replica count changed: the same part of the whole.
		q.left, q.n = q.left*q.n/n, n
	}
	return q
}

// makeQuotaRoom drops quotas that owe nothing from a full shard (they come
// back at 1/N of the whole quota) before an insert.
func (l *Local) makeQuotaRoom(sh *localShard) {
	limit := max(1, l.opts.MaxBuckets/localShards)
	for k, q := range sh.quotas {
		if len(sh.quotas) < limit {
			return
		}
		if q.owed == 0 {
			delete(sh.quotas, k)
		}
	}
}

func (q *localQuota) admits(cost int64) bool { return q.left+1e-9 >= float64(cost) }

// spend records cost tokens admitted locally; nil-safe.
func (q *localQuota) spend(cost int64) {
	if q != nil {
		q.left -= float64(cost)
		q.owed += cost
	}
}

// retryAfter is the wait of a request the quota refused: until the period
// ends, or -1 when cost exceeds the whole quota.
func (q *localQuota) retryAfter(b *Bucket, cost int64, now time.Time) time.Duration {
	if cost > b.Quota.Whole {
		return -1
	}
	return time.Duration(max(0, q.end-now.UnixMilli())) * time.Millisecond
}

func (q *localQuota) outcome(now time.Time, refused bool) QuotaOutcome {
	return QuotaOutcome{
		Set: true, Remaining: int64(math.Floor(max(0, q.left) + 1e-9)),
		ResetAfter: time.Duration(max(0, q.end-now.UnixMilli())) * time.Millisecond, Refused: refused,
	}
}

// ObserveQuota mirrors Redis's answer on b's quota: r.Remaining tokens
// were left in the period (for one shard: times the shards, an estimate).
func (l *Local) ObserveQuota(b Bucket, r QuotaResult) {
	if b.Quota.Key == "" || !r.Set {
		return
	}
	key, _, _, n := l.share(&b)
	whole := float64(max(0, r.Remaining))
	if b.Shards > 1 {
		whole *= float64(b.Shards)
	}
	now := l.opts.Clock()
	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q := l.quota(sh, key, &b, now); q != nil {
		q.left, q.n = min(float64(b.Quota.Whole), whole)/n, n
	}
}

// owing is the number of tokens b's quota owes Redis, left owed.
func (l *Local) owing(b *Bucket) int64 {
	if b.Quota.Key == "" {
		return 0
	}
	key, _, _, _ := l.share(b)
	sh := l.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q := sh.quotas[key]; q != nil {
		return q.owed
	}
	return 0
}

// TakeOwed returns the tokens b's quota owes Redis and the start of their
// period, and forgets them: the caller sends them (b.Quota.Owed) and hands
// them back with ReturnOwed if the call fails.
func (l *Local) TakeOwed(b Bucket) (owed, start int64) {
	if b.Quota.Key == "" {
		return 0, 0
	}
	key, _, _, _ := l.share(&b)
	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.quotas[key]
	if q == nil || q.owed == 0 {
		return 0, 0
	}
	owed, q.owed = q.owed, 0
	return owed, q.start
}

// ReturnOwed hands back owed tokens that did not reach Redis (if their
// period is still the entry's).
func (l *Local) ReturnOwed(b Bucket, owed, start int64) {
	if owed == 0 {
		return
	}
	key, _, _, _ := l.share(&b)
	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q := sh.quotas[key]; q != nil && q.start == start {
		q.owed += owed
	}
}
