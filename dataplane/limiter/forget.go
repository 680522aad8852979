package limiter

// Forget drops what this gateway's cache holds for bucket b: prefetched
// tokens and late grants, the empty-bucket verdict and the quota it last
// heard of, so that the next request of the bucket asks Redis. The admin
// listener's reset calls it on every gateway once the bucket was set in
// Redis: a gateway that still believed the bucket empty would otherwise
// refuse its requests until the bucket could have refilled, and tokens
// prefetched before the reset would be spent on top of the new count. A
// call in flight when Forget runs is answered as Redis answers it. The
// local fallback's bucket is left as it is: it follows Redis's next
// answer. Safe for concurrent use; a no-op without Redis.
func (c *Chain) Forget(b Bucket) {
	if c.cache != nil {
		c.cache.forget(b)
	}
}

// forget drops b's entry, keeping only a fetch in flight for its waiters.
func (c *Cache) forget(b Bucket) {
	sh := c.shard(b.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entries[b.Key]
	if e == nil {
		return
	}
	if e.fetching == nil {
		delete(sh.entries, b.Key)
		return
	}
	sh.entries[b.Key] = &cacheEntry{capacity: e.capacity, refillTokens: e.refillTokens, refillMs: e.refillMs,
		quotaKey: e.quotaKey, quotaLimit: e.quotaLimit, fetching: e.fetching}
}
