package limiter

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// Local is a set of in-process token buckets for when Redis cannot decide.
// Each bucket holds the rule divided by the number of live gateway replicas
// (capacity/N, at least one token, and rate/N), so that N instances together
// admit roughly the cluster-wide limit. When N changes, buckets are resized
// on their next use, keeping the fraction of tokens they held.
//
// The buckets mirror Redis (the chain's Mirror tells them what its calls
// did): every answer Redis gives for a bucket (Observe) sets the local
// bucket to the Redis bucket's remaining tokens divided by N, as of that
// answer, so a fallback continues from what the cluster has already spent
// instead of adding a fresh allowance on top of it. A bucket whose call
// went unanswered (Unsure) starts empty; only a bucket never sent to Redis
// starts full (capacity/N). A sharded rule has one local bucket for the
// whole rule (its floor of one token does not multiply by the shards).
//
// Memory is bounded: at most MaxBuckets buckets are kept. A bucket that has
// been idle long enough to refill completely is the same as a missing one, so
// those go first; when none has, the least recently used of a small sample
// goes. Safe for concurrent use.
type Local struct {
	opts   LocalOptions
	seed   maphash.Seed
	shards [localShards]localShard
}

// LocalOptions configure Local.
type LocalOptions struct {
	// Replicas returns the number of live gateway replicas (N). Called on
	// every decision, so it must be cheap. Values below 1 count as 1.
	Replicas func() int
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
	// MaxBuckets bounds the number of buckets kept. Default 100,000.
	MaxBuckets int
}

const localShards = 64

type localShard struct {
	mu      sync.Mutex
	buckets map[string]*localBucket
	// quotas are the calendar quotas of the buckets, by the same key.
	quotas map[string]*localQuota
}

type localBucket struct {
	tokens float64
	// capacity and perMs are the bucket's current size and refill, already
	// divided by replicas.
	capacity float64
	perMs    float64
	last     time.Time // last refill
	// sending: made by Sending, and Redis has not answered since.
	sending bool
	// gen counts Redis's answers mirrored into the bucket (Observe): a
	// refund gives back only to the bucket its take was made from.
	gen uint32
}

// NewLocal returns an empty set of local buckets.
func NewLocal(opts LocalOptions) *Local {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Replicas == nil {
		opts.Replicas = func() int { return 1 }
	}
	if opts.MaxBuckets <= 0 {
		opts.MaxBuckets = 100_000
	}
	l := &Local{opts: opts, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].buckets = map[string]*localBucket{}
		l.shards[i].quotas = map[string]*localQuota{}
	}
	return l
}

// Allow implements Limiter; it never fails.
func (l *Local) Allow(_ context.Context, b Bucket, cost int64) (Outcome, error) {
	return l.Decide(b, cost), nil
}

// share is this replica's share of b's local bucket: its key, capacity/N
// (at least one token) and rate/N per millisecond, and N.
func (l *Local) share(b *Bucket) (key string, capacity, perMs, n float64) {
	n = float64(max(1, l.opts.Replicas()))
	key, whole, wholePerMs := b.localView()
	return key, max(1, whole/n), wholePerMs / n, n
}

// bucket returns the local bucket of key sized capacity and perMs, created
// full when missing, refilled to now. The caller holds sh.mu.
func (l *Local) bucket(sh *localShard, key string, capacity, perMs float64, now time.Time) *localBucket {
	bk := sh.buckets[key]
	if bk == nil {
		l.makeRoom(sh, now)
		bk = &localBucket{tokens: capacity, capacity: capacity, perMs: perMs, last: now}
		sh.buckets[key] = bk
	}
	bk.refill(now)
	if bk.capacity != capacity || bk.perMs != perMs {
		// The rule or the replica count changed: keep the fraction held.
		bk.tokens = bk.tokens / bk.capacity * capacity
		bk.capacity, bk.perMs = capacity, perMs
	}
	return bk
}

// Observe mirrors an answer of Redis for b: remaining tokens were left in
// Redis's bucket just now. For one shard of a sharded rule, the whole is
// estimated as remaining times the shards.
func (l *Local) Observe(b Bucket, remaining int64) {
	key, capacity, perMs, n := l.share(&b)
	// Negative: the bucket is in debt (a charge), which the local bucket
	// owes too.
	whole := float64(remaining)
	if b.Shards > 1 {
		whole *= float64(b.Shards)
	}
	now := l.opts.Clock()
	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	bk := l.bucket(sh, key, capacity, perMs, now)
	bk.tokens = min(capacity, whole/n)
	bk.sending = false
	bk.gen++
	sh.mu.Unlock()
}

// Unsure records that a call for b may have taken tokens in Redis without
// an answer (it was written, then Redis fell silent): the local bucket
// starts empty, refilling at rate/N, whatever Redis said before. Redis may
// be answering the other replicas, which keep taking from the bucket; a
// replica whose breaker opens while they do must not spend a share of what
// Redis last told it on top of them.
func (l *Local) Unsure(b Bucket) {
	key, capacity, perMs, _ := l.share(&b)
	now := l.opts.Clock()
	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.buckets[key] == nil {
		l.makeRoom(sh, now)
	}
	sh.buckets[key] = &localBucket{capacity: capacity, perMs: perMs, last: now}
}

// Sending records that a call for b is going to Redis. A bucket this
// gateway holds nothing for starts empty from now on (refilling at
// rate/N), as after an unanswered call: should the breaker open while the
// call is out (other buckets' calls failing), the call may be taking
// tokens in Redis, and the other replicas keep draining the bucket there.
// A bucket with a local state keeps it; Redis's answer (Observe) replaces
// it.
func (l *Local) Sending(b Bucket) {
	key, capacity, perMs, _ := l.share(&b)
	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.buckets[key] != nil {
		return
	}
	now := l.opts.Clock()
	l.makeRoom(sh, now)
	sh.buckets[key] = &localBucket{capacity: capacity, perMs: perMs, last: now, sending: true}
}

// NotSent undoes Sending for a call that took nothing in Redis (the
// connection was refused or closed): a bucket still as Sending left it
// is forgotten, so it starts at capacity/N like one never sent.
func (l *Local) NotSent(b Bucket) {
	key, _, _, _ := l.share(&b)
	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if bk := sh.buckets[key]; bk != nil && bk.sending {
		delete(sh.buckets, key)
	}
}

// Decide takes cost tokens from the local bucket of b.
func (l *Local) Decide(b Bucket, cost int64) Outcome {
	key, capacity, perMs, _ := l.share(&b)
	now := l.opts.Clock()

	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	bk := l.bucket(sh, key, capacity, perMs, now)

	d := Outcome{Source: SourceLocal}
	q := l.quota(sh, key, &b, now)
	if q != nil && !q.admits(cost) {
		d.RetryAfter = q.retryAfter(&b, cost, now)
	} else if bk.tokens >= float64(cost) {
		bk.tokens -= float64(cost)
		d.Allowed = true
		q.spend(cost)
		d.taken = taken{from: takenLocal, cost: cost, local: bk, localGen: bk.gen, localQuota: q}
	} else if float64(cost) > capacity {
		d.RetryAfter = -1
	} else {
		d.RetryAfter = msDuration((float64(cost) - bk.tokens) / perMs)
	}
	d.Remaining = int64(math.Floor(bk.tokens))
	d.ResetAfter = msDuration((capacity - bk.tokens) / perMs)
	if q != nil {
		d.Quota = q.outcome(now, !d.Allowed && !q.admits(cost))
	}
	return d
}

// msDuration rounds a number of milliseconds up to a Duration: the longest
// Duration (292 years) when it holds no more. Valid rules refill within 100
// years, but a bucket a tool builds is not checked, and a wait must not
// wrap around to a negative or short one.
func msDuration(ms float64) time.Duration {
	if ms = math.Ceil(ms); ms >= maxDurationMs {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// maxDurationMs is the first number of milliseconds a Duration cannot hold.
const maxDurationMs = float64(math.MaxInt64/int64(time.Millisecond) + 1)

func (bk *localBucket) refill(now time.Time) {
	if elapsed := now.Sub(bk.last); elapsed > 0 {
		bk.tokens = min(bk.capacity, bk.tokens+float64(elapsed)/float64(time.Millisecond)*bk.perMs)
		bk.last = now
	}
}

// full reports whether the bucket would be full at now, which makes it
// indistinguishable from a missing one.
func (bk *localBucket) full(now time.Time) bool {
	return bk.tokens+float64(now.Sub(bk.last))/float64(time.Millisecond)*bk.perMs >= bk.capacity
}

// makeRoom evicts buckets from a full shard before an insert.
func (l *Local) makeRoom(sh *localShard, now time.Time) {
	limit := max(1, l.opts.MaxBuckets/localShards)
	if len(sh.buckets) < limit {
		return
	}
	for k, bk := range sh.buckets {
		if bk.full(now) {
			delete(sh.buckets, k)
		}
	}
	// Still full: evict the least recently refilled of a sample (map order
	// is random enough).
	for len(sh.buckets) >= limit {
		var victim string
		var oldest time.Time
		seen := 0
		for k, bk := range sh.buckets {
			if seen == 0 || bk.last.Before(oldest) {
				victim, oldest = k, bk.last
			}
			if seen++; seen == 8 {
				break
			}
		}
		delete(sh.buckets, victim)
	}
}

// shardOf is the shard that holds the local bucket named key.
func (l *Local) shardOf(key string) *localShard {
	return &l.shards[maphash.String(l.seed, key)%localShards]
}

// Len is the number of buckets held.
func (l *Local) Len() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].buckets)
		l.shards[i].mu.Unlock()
	}
	return n
}
