package jwtauth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// cache holds verified tokens by the SHA-256 of the token (the token
// itself is not kept): at most max entries in two generations of max/2,
// the older dropped whole when the newer fills, so memory stays bounded
// without a list to maintain on every hit. An entry serves until the
// token's exp, and only while the keys (and shared secret) it was
// verified with are still the ones in force: a rotation that removes a
// key ends the cached tokens it signed. A nil *cache caches nothing.
type cache struct {
	mu       sync.RWMutex
	half     int
	cur, old map[[sha256.Size]byte]cached
}

type cached struct {
	id     *Identity
	keys   *Keys
	secret *Secret
}

func newCache(size int) *cache {
	half := max(1, size/2)
	return &cache{half: half, cur: make(map[[sha256.Size]byte]cached, half)}
}

// get returns the identity cached for sum, if it is still valid at now
// with keys and secret in force.
func (c *cache) get(sum [sha256.Size]byte, now time.Time, keys *Keys, secret *Secret) *Identity {
	if c == nil {
		return nil
	}
	c.mu.RLock()
	e, ok := c.cur[sum]
	if !ok {
		e, ok = c.old[sum]
	}
	c.mu.RUnlock()
	if !ok || e.keys != keys || e.secret != secret || !now.Before(e.id.Expires) {
		return nil
	}
	return e.id
}

// put caches id for sum.
func (c *cache) put(sum [sha256.Size]byte, id *Identity, keys *Keys, secret *Secret) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) >= c.half {
		c.old, c.cur = c.cur, make(map[[sha256.Size]byte]cached, c.half)
	}
	c.cur[sum] = cached{id: id, keys: keys, secret: secret}
}

// len is the number of entries held.
func (c *cache) len() int {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.cur) + len(c.old)
}
