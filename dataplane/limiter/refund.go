package limiter

import (
	"context"
	"fmt"
	"math"
)

// Taken is the tokens an admitted Outcome took, which Refund gives back
// (0 when it took none: rejected, or admitted by FailOpen).
func (o Outcome) Taken() int64 {
	if o.taken.from == takenNothing {
		return 0
	}
	return o.taken.cost
}

// takenFrom says where an admitted decision's tokens came from.
type takenFrom uint8

const (
	takenNothing takenFrom = iota // rejected, or admitted by FailOpen
	takenRedis                    // the script took them
	takenCache                    // this gateway's prefetched tokens
	takenLocal                    // the local fallback's bucket
	takenSpread                   // several shards (parts)
)

// taken is what an admitted Outcome took, for Refund.
type taken struct {
	from takenFrom
	cost int64
	// quotaStart is the start of the quota period the tokens were counted
	// in (0: no quota).
	quotaStart int64
	// The local bucket and quota charged, and the bucket's generation
	// then: a bucket replaced or overwritten by Redis's answer since does
	// not hold this take any more.
	local      *localBucket
	localGen   uint32
	localQuota *localQuota
	// parts are a spread request's takes, one per shard.
	parts *[]part
}

// Refund gives back what an admitted decision took, when a later check
// refuses its request (the HTTP proxy's concurrency slot): a refused
// request costs nothing. It gives back what o, an Outcome that Allow (or
// AllowSpread) returned for b, took: the same tokens into the same bucket
// (and quota period) they came from, never above its capacity. It makes
// at most one Redis call per bucket charged, bounded by the chain's
// MaxWait on a context of its own (the request's may be over). An error
// says the tokens stay spent: fewer admissions, never more.
func (c *Chain) Refund(ctx context.Context, b Bucket, o Outcome) error {
	t := &o.taken
	switch t.from {
	case takenLocal:
		return c.local.Refund(ctx, b, o)
	case takenCache:
		c.cache.giveBack(b, t.cost)
		return nil
	case takenSpread:
		c.giveBack(*t.parts)
		return nil
	case takenRedis:
	default:
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.MaxWait)
	defer cancel()
	if err := c.giveBackCall(ctx, b, t.cost, t.quotaStart); err != nil {
		return fmt.Errorf("refund of %d tokens: %w", t.cost, err)
	}
	return nil
}

// giveBackCall gives units (of b.Unit) back to Redis's bucket b, and to the
// quota period starting at quotaStart: a negative cost, which the script
// adds back up to the capacity and takes off the period's count, never
// below zero; the Mirror below mirrors the answer into the local bucket.
// The Cache forgets b's state first, and learns the reply's only for a
// bucket without a quota: with one, the reply's quota part describes the
// pinned period, ending never, and the Cache waits for the next call
// instead.
func (c *Chain) giveBackCall(ctx context.Context, b Bucket, units, quotaStart int64) error {
	c.cache.Refilled(b)
	call := b
	call.Quota = b.Quota.pinned(quotaStart)
	call.Prefetch = 0
	r, err := c.breaker.Take(ctx, call, -units, -units)
	if err != nil {
		return err
	}
	if b.Quota.Key == "" {
		c.cache.learn(b, r)
	}
	return nil
}

// pinned is q for a call that must count in the period starting at start,
// whatever Redis's time is then (a refund of a take counted there): that
// period alone, ending never. No quota when start is 0.
func (q Quota) pinned(start int64) Quota {
	if q.Key == "" || start == 0 {
		return Quota{}
	}
	q.Start, q.Switch, q.End = start, math.MaxInt64, math.MaxInt64
	q.Owed, q.OwedStart = 0, 0
	return q
}

// countIn sets r.Quota.Start to the period the script counted a call for
// b in, by the script's own rule: the second when Redis's time (redisNow,
// shifted as the script shifts it) has reached its start.
func (r *TakeResult) countIn(b *Bucket, redisNow int64) {
	if !r.Quota.Set {
		return
	}
	if redisNow+b.Quota.ShiftMs >= b.Quota.Switch {
		r.Quota.Start = b.Quota.Switch
	} else {
		r.Quota.Start = b.Quota.Start
	}
}

// Refund is Chain.Refund for the local buckets: it gives back a take of
// theirs (see refund); an Outcome they did not decide took nothing here.
func (l *Local) Refund(_ context.Context, b Bucket, o Outcome) error {
	if o.taken.from == takenLocal {
		l.refund(b, &o.taken)
	}
	return nil
}

// refund gives back a take of the local fallback: to the bucket (up to its
// capacity) if it is still the one charged and Redis has not overwritten
// it since, and to the quota what it still owes Redis of it (tokens
// already sent to Redis stay counted there).
func (l *Local) refund(b Bucket, t *taken) {
	key, _, _, _ := l.share(&b)
	now := l.opts.Clock()
	sh := l.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if bk := sh.buckets[key]; bk != nil && bk == t.local && bk.gen == t.localGen {
		bk.refill(now)
		bk.tokens = min(bk.capacity, bk.tokens+float64(t.cost))
	}
	if q := sh.quotas[key]; q != nil && q == t.localQuota {
		give := min(q.owed, t.cost)
		q.owed -= give
		q.left = min(float64(q.whole)/q.n, q.left+float64(give))
	}
}

// giveBack returns cost prefetched tokens to b's entry while they are
// still usable there (not expired, same limits); expired ones would have
// been dropped unspent.
func (c *Cache) giveBack(b Bucket, cost int64) {
	sh := c.shard(b.Key)
	now := c.opts.Clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.entries[b.Key]; e != nil && e.matches(&b) && now.Before(e.expires) {
		e.tokens += cost
	}
}
