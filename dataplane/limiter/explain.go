package limiter

import (
	"context"
	"hash/maphash"
	"math"
	"time"
)

// Read-only views of what a Chain holds, for `tollgate explain` and the
// gateway's /debug/explain. Nothing here takes a token, creates an entry or
// changes a breaker.

// Held is what this gateway holds for one bucket besides Redis's state.
type Held struct {
	// Node is the Redis node that holds the key ("" for a single server or
	// Sentinel); Breaker is its breaker's state ("closed" when no call went
	// to it yet, "" without Redis).
	Node, Breaker string
	// Prefetched tokens (a prefetch batch, or tokens Redis granted to a call
	// after its request was answered) this gateway may spend without asking
	// Redis, for PrefetchExpiresIn more.
	Prefetched        int64
	PrefetchExpiresIn time.Duration
	// EmptyCost is the smallest cost the empty-bucket cache rejects now
	// without asking Redis (0: none), for EmptyFor more; it rejects larger
	// costs for longer, each until the bucket holds it, as the script
	// would.
	EmptyFor  time.Duration
	EmptyCost int64
}

// LocalHeld is the local fallback's bucket of a rule's bucket.
type LocalHeld struct {
	// Key is the local bucket's key: the whole rule's for a shard.
	Key string
	// Exists is false when this gateway keeps no local bucket for the key
	// yet: the fallback would start it full (Tokens = Capacity).
	Exists bool
	// Tokens now (refilled to the present), Capacity (the rule's capacity
	// divided by Replicas, at least one token) and RefillPerSecond (the
	// rule's rate divided by Replicas).
	Tokens, Capacity, RefillPerSecond float64
	// Replicas is N, the live replica count the share is divided by.
	Replicas int
}

// Held returns what the chain's cache and breakers hold for b; zero for a
// local-only chain.
func (c *Chain) Held(ctx context.Context, b Bucket) Held {
	var h Held
	if c.cache == nil {
		return h
	}
	h.Node, h.Breaker = c.breaker.peek(ctx, b.Key)
	c.cache.peek(&b, &h)
	return h
}

// LocalHeld returns the local fallback's bucket for b.
func (c *Chain) LocalHeld(b Bucket) LocalHeld {
	return c.local.peek(b)
}

// NodeStates maps every Redis node a call went to ("" for a single server)
// to its breaker's state; nil without Redis.
func (c *Chain) NodeStates() map[string]string {
	if c.breaker == nil {
		return nil
	}
	states := map[string]string{}
	c.breaker.nodes.Range(func(node, br any) bool {
		states[node.(string)] = br.(*Breaker).State()
		return true
	})
	return states
}

// peek is the node of key and its breaker's state, without creating the
// breaker.
func (bs *Breakers) peek(ctx context.Context, key string) (node, state string) {
	if bs.cluster != nil {
		c, err := bs.cluster.MasterForKey(ctx, key)
		if err != nil {
			return "", "unknown: " + err.Error()
		}
		node = c.Options().Addr
	}
	if br, ok := bs.nodes.Load(node); ok {
		return node, br.(*Breaker).State()
	}
	return node, "closed"
}

// peek fills h with the cache's entry for b, if any.
func (c *Cache) peek(b *Bucket, h *Held) {
	now := c.opts.Clock()
	sh := &c.shards[maphash.String(c.seed, b.Key)%cacheShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entries[b.Key]
	if e == nil || !e.matches(b) {
		return
	}
	if e.tokens > 0 && now.Before(e.expires) {
		h.Prefetched, h.PrefetchExpiresIn = e.tokens, e.expires.Sub(now)
	}
	if !now.Before(e.refuseUntil) {
		return
	}
	// The smallest cost refused: one more than the bucket holds, or than
	// the quota does.
	tokens := e.view.tokensAt(b, e.view.nowMs+max(0, now.Sub(e.viewAt).Milliseconds()))
	cost := max(1, int64(math.Floor(tokens))+1)
	if e.viewQuota.Set {
		cost = min(cost, e.viewQuota.Remaining+1)
	}
	if r, ok := e.refusal(b, cost, now); ok && r.WaitMs >= 0 {
		h.EmptyFor, h.EmptyCost = time.Duration(r.WaitMs)*time.Millisecond, cost
	}
}

// peek is the local bucket of b refilled to now, without storing the refill.
func (l *Local) peek(b Bucket) LocalHeld {
	key, capacity, perMs, n := l.share(&b)
	h := LocalHeld{Key: key, Tokens: capacity, Capacity: capacity, RefillPerSecond: perMs * 1000, Replicas: int(n)}
	now := l.opts.Clock()
	sh := &l.shards[maphash.String(l.seed, key)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	bk := sh.buckets[key]
	if bk == nil {
		return h
	}
	h.Exists = true
	tokens := bk.tokens
	if elapsed := now.Sub(bk.last); elapsed > 0 {
		tokens = min(bk.capacity, tokens+float64(elapsed)/float64(time.Millisecond)*bk.perMs)
	}
	if bk.capacity != capacity {
		// As the next decision would: the fraction held is kept.
		tokens = tokens / bk.capacity * capacity
	}
	h.Tokens = tokens
	return h
}
