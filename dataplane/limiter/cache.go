package limiter

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// Cache sits between the chain's outer layer and the Redis side and saves
// Redis calls in two exact-or-bounded ways:
//
//   - Refusals (the empty-bucket cache): once Redis has refused a request,
//     the Cache answers the next requests of the bucket that the script
//     would refuse, without a call, each with the script's own answer for
//     its cost at its time: the wait until that many tokens exist (none
//     for a cost above the capacity: it can never pass), the tokens left,
//     the reset, the quota's part. Every reply carries the bucket's state
//     as stored (the tokens left at the last write) and Redis's time; the
//     Cache refills the newest state as the script does, to Redis's time
//     estimated from the reply's plus the local clock since (never ahead
//     of Redis's clock: a wait errs long by a round trip, if anything). A
//     request the script would grant goes to Redis. Tokens only arrive at
//     the refill rate and other gateways' calls only take them (a spread
//     request's give-back aside), so what the script would refuse by this
//     state Redis refuses too, for at least as long. A flood against an
//     empty bucket costs Redis nothing.
//   - Prefetch: for buckets with Prefetch > 1, one call takes up to Prefetch
//     tokens and the next requests spend them locally. Concurrent requests
//     wait for the one call in flight instead of sending their own. Tokens
//     not spent within TTL are dropped.
//   - Late grants: tokens Redis granted to a call whose request had already
//     been answered otherwise (Redis stalled, then ran the call) are kept
//     for the next requests of the bucket, like prefetched tokens: they
//     were taken in Redis, so spending them here keeps the cluster exact,
//     and dropping them would reject requests the limit allows. The
//     Cache's calls keep late replies (Bucket.keepsLate); the Batcher
//     hands them to KeepLate, its Late handler.
//
// Answers given from what the Cache knows are marked Cached: they say
// nothing about Redis's health. Safe for concurrent use.
type Cache struct {
	next   Taker
	opts   CacheOptions
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

// CacheOptions configure Cache.
type CacheOptions struct {
	// TTL is how long prefetched tokens and late grants stay usable.
	// Default 250ms.
	TTL time.Duration
	// MaxWait bounds a request's wait for Redis (the chain's MaxWait); 0:
	// the caller's context alone.
	MaxWait time.Duration
	// NextBoundsWait says the next Taker bounds its calls by MaxWait itself
	// (a Batcher with MaxWait set): a request that sends a call of its own
	// gets no timer here, only one waiting for another's fetch does.
	NextBoundsWait bool
	// NoEmptyCache disables the empty-bucket cache (the classic design:
	// every request asks Redis; prefetched tokens are still spent).
	NoEmptyCache bool
	// Clock is the local clock (only durations are taken from it). Default
	// time.Now.
	Clock func() time.Time
	// MaxEntries bounds the buckets tracked. Default 100,000.
	MaxEntries int
}

const cacheShards = 64

type cacheShard struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry
}

// cacheEntry is what this instance knows of one bucket.
type cacheEntry struct {
	// params identify the bucket's limits; a rule change voids the entry.
	capacity     float64
	refillTokens int64
	refillMs     int64
	quotaKey     string
	quotaLimit   int64

	// quota is what Redis last said of the bucket's quota, at quotaAt.
	quota   QuotaResult
	quotaAt time.Time

	// Refusals: view is the bucket as the newest reply (by Redis's time)
	// said it, with that reply's quota, handled at viewAt on the local
	// clock. A refusal from Redis makes the Cache answer refusals itself
	// until refuseUntil: the bucket is full again by then and a refusing
	// quota's period over.
	view        bucketState
	viewQuota   QuotaResult
	viewAt      time.Time
	refuseUntil time.Time

	// Prefetched tokens.
	tokens    int64
	expires   time.Time
	remaining int64         // Redis's remaining after the last fetch
	fetching  chan struct{} // closed when the fetch in flight ends

	// refused is the tokens of the refusals the Cache answered since its
	// last call of a bucket that records region demand (Bucket.Demand).
	refused int64
}

// NewCache wraps next.
func NewCache(next Taker, opts CacheOptions) *Cache {
	if opts.TTL <= 0 {
		opts.TTL = 250 * time.Millisecond
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 100_000
	}
	c := &Cache{next: next, opts: opts, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].entries = map[string]*cacheEntry{}
	}
	return c
}

// Take implements Taker. It takes cost tokens (want is set by the bucket's
// Prefetch). Only a request that waits for Redis is bounded by MaxWait (a
// timer; none for a call of its own when NextBoundsWait); one the Cache
// answers costs none.
func (c *Cache) Take(ctx context.Context, b Bucket, cost, _ int64) (TakeResult, error) {
	sh := c.shard(b.Key)
	var cancel context.CancelFunc
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	bound := func(fetch bool) {
		if cancel != nil || c.opts.MaxWait <= 0 || (fetch && c.opts.NextBoundsWait) {
			return
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) <= c.opts.MaxWait {
			// The caller's own deadline (an Envoy's rate limit timeout,
			// say) comes first: no timer of our own.
			return
		}
		ctx, cancel = context.WithTimeout(ctx, c.opts.MaxWait)
	}
	for attempt := 0; ; attempt++ {
		now := c.opts.Clock()
		sh.mu.Lock()
		e := sh.entry(b, now, c.opts.MaxEntries)
		if r, ok := e.answer(&b, cost, now); ok {
			if b.Demand.Key != "" && r.Granted == 0 {
				e.refused += cost // told to Redis with the next call
			}
			sh.mu.Unlock()
			return r, nil
		}
		if b.Prefetch > 1 && e.fetching != nil && attempt < 2 {
			// Another request is fetching for this bucket: wait for it and
			// look again, rather than sending a call of our own.
			ch := e.fetching
			sh.mu.Unlock()
			bound(false)
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return TakeResult{}, ctx.Err()
			}
		}
		if b.Demand.Key != "" {
			// The refusals answered here since the last call ride on this
			// one into the region's demand (lost if it fails).
			b.Demand.Refused, e.refused = e.refused, 0
		}
		want := cost
		var done chan struct{}
		if b.Prefetch > 1 {
			want = max(cost, b.Prefetch)
			done = make(chan struct{})
			e.fetching = done
		}
		sh.mu.Unlock()
		bound(true)
		return c.fetch(ctx, sh, b, cost, want, done)
	}
}

// answer is the Cache's own answer for a Take of cost, if it has one:
// prefetched tokens (first: they are taken in Redis already, and a Cache
// without refusals spends them too), or the script's refusal. The caller
// holds the shard's lock.
func (e *cacheEntry) answer(b *Bucket, cost int64, now time.Time) (TakeResult, bool) {
	if e.tokens >= cost && now.Before(e.expires) {
		e.tokens -= cost
		r := TakeResult{Granted: cost, Remaining: e.remaining + e.tokens, Quota: e.quotaNow(now, e.tokens), Cached: true}
		r.ResetMs = ceilMs(resetAfter(*b, float64(r.Remaining)))
		return r, true
	}
	if now.Before(e.refuseUntil) {
		return e.refusal(b, cost, now)
	}
	return TakeResult{}, false
}

// refusal is the script's answer to a Take of cost now, computed from the
// bucket's state in the newest reply as lua/token_bucket.lua computes it,
// when the script would refuse it: the bucket holds fewer than cost
// tokens, or its quota does. ok is false when the script would grant it,
// and when the state cannot say: the quota's period has ended since (the
// new period's count is Redis's), the local fallback owes the quota
// tokens (Redis adds them first), the Take counts fractions (a spread).
func (e *cacheEntry) refusal(b *Bucket, cost int64, now time.Time) (TakeResult, bool) {
	if e.view.nowMs == 0 || b.Unit > 1 || b.Quota.Owed > 0 {
		return TakeResult{}, false
	}
	// Whole milliseconds, as Redis's clock in the script.
	since := max(0, now.Sub(e.viewAt).Milliseconds())
	tokens := e.view.tokensAt(b, e.view.nowMs+since)
	perMs := float64(b.RefillTokens) / float64(b.RefillPeriodMs)
	c := float64(cost)
	r := TakeResult{Remaining: int64(math.Floor(tokens)), ResetMs: int64(math.Ceil((b.Capacity - tokens) / perMs)), Cached: true}
	short := tokens < c
	switch {
	case c > b.Capacity:
		r.WaitMs = -1 // never
	case short:
		r.WaitMs = int64(math.Ceil((c - tokens) / perMs))
	}
	if b.Quota.Key != "" {
		q := e.viewQuota
		q.ResetMs -= since
		if !q.Set || q.ResetMs <= 0 {
			return TakeResult{}, false
		}
		// The script's count is floored in the reply; a period's count of
		// whole requests is whole.
		q.Short = q.Remaining < cost
		if q.Short {
			short = true
			if cost > b.Quota.Limit {
				r.WaitMs = -1
			} else if r.WaitMs >= 0 {
				r.WaitMs = max(r.WaitMs, q.ResetMs)
			}
		}
		r.Quota = q
	}
	if !short {
		return TakeResult{}, false
	}
	return r, true
}

// fetch asks the Taker and records what it learnt.
func (c *Cache) fetch(ctx context.Context, sh *cacheShard, b Bucket, cost, want int64, done chan struct{}) (TakeResult, error) {
	call := b
	call.keepsLate = true
	r, err := c.next.Take(ctx, call, cost, want)
	now := c.opts.Clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(b, now, c.opts.MaxEntries)
	if done != nil && e.fetching == done {
		e.fetching = nil
	}
	if done != nil {
		close(done)
	}
	if err != nil {
		return TakeResult{}, err
	}
	if r.Quota.Set {
		e.quota, e.quotaAt = r.Quota, now
	}
	e.observe(&b, &r, now)
	if r.Granted < cost {
		if !c.opts.NoEmptyCache && r.state.nowMs > 0 {
			e.refuse(&r, now)
		}
		return r, nil
	}
	e.keep(r.Granted-cost, now, c.opts.TTL)
	e.remaining = r.Remaining
	r.Remaining += e.tokens
	return r, nil
}

// KeepLate keeps the tokens of a call whose request was answered before
// Redis replied: the Late handler of the Batcher below (a LateFunc).
func (c *Cache) KeepLate(b *Bucket, r TakeResult) {
	sh := c.shard(b.Key)
	now := c.opts.Clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(*b, now, c.opts.MaxEntries)
	e.keep(r.Granted, now, c.opts.TTL)
	e.remaining = r.Remaining
	if r.Quota.Set {
		e.quota, e.quotaAt = r.Quota, now
	}
	e.observe(b, &r, now)
}

// learn records what a call that went past the Cache (a charge, a spread
// request's take or give-back) said of bucket b, so that the Cache's
// refusals count it: a charge into debt makes them wait for the debt too.
// A bucket the Cache holds nothing of is left alone.
func (c *Cache) learn(b Bucket, r TakeResult) {
	sh := c.shard(b.Key)
	now := c.opts.Clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.entries[b.Key]; e != nil && e.matches(&b) {
		e.observe(&b, &r, now)
	}
}

// observe keeps what reply r said of the bucket, handled at now, unless
// the entry knows a newer state: replies are handled out of order at times
// (a late grant, a concurrent call's), and Redis's time orders them. Of
// two replies in one millisecond, the one that left fewer tokens (or, that
// failing, fewer in the quota) came later: a take lowers them, a refusal
// writes nothing.
func (e *cacheEntry) observe(b *Bucket, r *TakeResult, now time.Time) {
	s := r.state
	if s.nowMs == 0 || s.nowMs < e.view.nowMs {
		return
	}
	if s.nowMs == e.view.nowMs {
		mine, known := s.tokensAt(b, s.nowMs), e.view.tokensAt(b, s.nowMs)
		if mine > known || (mine == known && r.Quota.Remaining >= e.viewQuota.Remaining) {
			return
		}
	}
	e.view, e.viewQuota, e.viewAt = s, r.Quota, now
}

// refuse makes the Cache answer refusals after Redis's refusal r, handled
// at now: until the bucket is full again, or the period of the quota that
// refused has ended.
func (e *cacheEntry) refuse(r *TakeResult, now time.Time) {
	horizon := r.ResetMs
	if r.Quota.Short {
		horizon = max(horizon, r.Quota.ResetMs)
	}
	if until := now.Add(msDuration(float64(horizon))); until.After(e.refuseUntil) {
		e.refuseUntil = until
	}
}

// quotaNow is the quota as Redis last said it, aged to now, with held
// tokens this gateway took from it but has not spent yet.
func (e *cacheEntry) quotaNow(now time.Time, held int64) QuotaResult {
	q := e.quota
	if !q.Set {
		return q
	}
	q.Remaining += held
	q.ResetMs = max(0, q.ResetMs-now.Sub(e.quotaAt).Milliseconds())
	return q
}

// keep adds prefetched tokens, usable for ttl.
func (e *cacheEntry) keep(extra int64, now time.Time, ttl time.Duration) {
	if extra <= 0 {
		return
	}
	if now.After(e.expires) {
		e.tokens = 0
	}
	e.tokens += extra
	e.expires = now.Add(ttl)
}

// shard is the shard that holds key's entry.
func (c *Cache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%cacheShards]
}

// ceilMs is d in whole milliseconds, rounded up.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// entry returns the entry of b, created or reset when b's limits changed.
// The caller holds sh.mu.
func (sh *cacheShard) entry(b Bucket, now time.Time, maxEntries int) *cacheEntry {
	e := sh.entries[b.Key]
	if e != nil && e.matches(&b) {
		return e
	}
	if limit := max(1, maxEntries/cacheShards); e == nil && len(sh.entries) >= limit {
		sh.evict(now, limit)
	}
	fresh := &cacheEntry{capacity: b.Capacity, refillTokens: b.RefillTokens, refillMs: b.RefillPeriodMs, quotaKey: b.Quota.Key, quotaLimit: b.Quota.Limit}
	if e != nil {
		fresh.fetching = e.fetching // keep waiters of a fetch in flight
	}
	sh.entries[b.Key] = fresh
	return fresh
}

// matches reports whether e is of b's limits.
func (e *cacheEntry) matches(b *Bucket) bool {
	return e.capacity == b.Capacity && e.refillTokens == b.RefillTokens && e.refillMs == b.RefillPeriodMs &&
		e.quotaKey == b.Quota.Key && e.quotaLimit == b.Quota.Limit
}

// evict drops entries that hold nothing useful any more and, if the shard is
// still full, a few arbitrary ones (losing a cache entry only costs a Redis
// call). The caller holds sh.mu.
func (sh *cacheShard) evict(now time.Time, limit int) {
	for k, e := range sh.entries {
		if e.fetching == nil && !now.Before(e.refuseUntil) && (e.tokens == 0 || !now.Before(e.expires)) {
			delete(sh.entries, k)
		}
	}
	for k, e := range sh.entries {
		if len(sh.entries) < limit {
			break
		}
		if e.fetching == nil {
			delete(sh.entries, k)
		}
	}
}

// resetAfter estimates the time until b is full when it holds tokens.
func resetAfter(b Bucket, tokens float64) time.Duration {
	perMs := float64(b.RefillTokens) / float64(b.RefillPeriodMs)
	return msDuration(max(0, b.Capacity-tokens) / perMs)
}

// Refilled forgets what the Cache knows of b's state: tokens are being
// given back to it. Its refusals wait for Redis's next refusal.
func (c *Cache) Refilled(b Bucket) {
	sh := c.shard(b.Key)
	sh.mu.Lock()
	if e := sh.entries[b.Key]; e != nil {
		e.refuseUntil, e.view, e.viewQuota = time.Time{}, bucketState{}, QuotaResult{}
	}
	sh.mu.Unlock()
}
