package jwtauth

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"
)

// TestCacheBounds: the cache holds at most its size, serves an entry until
// the token's exp and only with the keys and secret it was verified with.
func TestCacheBounds(t *testing.T) {
	c := newCache(100)
	now := time.Unix(1_800_000_000, 0)
	keys, secret := &Keys{}, &Secret{}
	for i := range 1000 {
		c.put(sha256.Sum256(fmt.Appendf(nil, "token-%d", i)), &Identity{Tenant: "t", Expires: now.Add(time.Hour)}, keys, secret)
		if n := c.len(); n > 100 {
			t.Fatalf("%d entries after %d puts, bound 100", n, i+1)
		}
	}
	last := sha256.Sum256([]byte("token-999"))
	if c.get(last, now, keys, secret) == nil {
		t.Fatal("the latest entry is gone")
	}
	if c.get(sha256.Sum256([]byte("token-0")), now, keys, secret) != nil {
		t.Error("the oldest entry is still served")
	}
	if c.get(last, now.Add(time.Hour), keys, secret) != nil {
		t.Error("served at exp")
	}
	if c.get(last, now.Add(time.Hour-time.Nanosecond), keys, secret) == nil {
		t.Error("not served just before exp")
	}
	if c.get(last, now, &Keys{}, secret) != nil || c.get(last, now, keys, &Secret{}) != nil {
		t.Error("served with other keys or another secret")
	}
	var nilCache *cache
	nilCache.put(last, &Identity{}, keys, secret)
	if nilCache.get(last, now, keys, secret) != nil || nilCache.len() != 0 {
		t.Error("a nil cache caches")
	}
}
