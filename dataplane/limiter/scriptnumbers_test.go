package limiter

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// scriptMaxTTL is MAX_TTL_MS of lua/token_bucket.lua (200 years): no key's
// expiry is set longer.
const scriptMaxTTL = 6_307_200_000_000 * time.Millisecond

// redisMs is Redis's clock in milliseconds, the one the script uses.
func redisMs(t *testing.T, c redis.Cmdable) int64 {
	t.Helper()
	return redisTime(t, c).UnixMilli()
}

// TestHugeSlowBucketAnswers: a bucket of 10⁹ tokens that refills one token
// a day (issue 27). A full refill takes 8.64e16 ms; the key's expiry, twice
// that, is a number Lua hands Redis as "1.728e+17", which PEXPIRE refused:
// the script failed on every call of the bucket. It must answer, exactly,
// and its key must expire.
func TestHugeSlowBucketAnswers(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	r := NewRedis(c)
	const day = 24 * 3600 * 1000
	b := Bucket{Key: Key("t", "huge"), Capacity: 1e9, RefillTokens: 1, RefillPeriodMs: day}

	res, err := r.Take(ctx, b, 1, 1)
	if err != nil || res.Granted != 1 || res.Remaining != 999_999_999 || res.WaitMs != 0 {
		t.Fatalf("first take: %+v %v, want 1 granted, 999999999 left, no wait", res, err)
	}
	// The rest in one batch: the bucket is empty, its next token a day away.
	before := redisMs(t, c)
	res, err = r.Take(ctx, b, 1, 999_999_999)
	if err != nil || res.Granted != 999_999_999 || res.Remaining != 0 {
		t.Fatalf("draining take: %+v %v, want 999999999 granted, none left", res, err)
	}
	if res.WaitMs > day || res.WaitMs < day-1 {
		t.Fatalf("wait after draining: %d ms, want a day (%d ms)", res.WaitMs, day)
	}
	if full := 1e9 * float64(day); math.Abs(float64(res.ResetMs)-full) > full*1e-9 {
		t.Fatalf("reset after draining: %d ms, want a full refill, %.0f ms", res.ResetMs, full)
	}

	// Rejected, with the exact wait: a day less what refilled since.
	d, err := allow(r).Allow(ctx, b, 1)
	after := redisMs(t, c)
	if err != nil || d.Allowed || d.Source != SourceRedis || d.Remaining != 0 {
		t.Fatalf("empty bucket: %+v %v, want a Redis rejection", d, err)
	}
	if max, min := time.Duration(day)*time.Millisecond, time.Duration(day-(after-before)-1)*time.Millisecond; d.RetryAfter > max || d.RetryAfter < min {
		t.Fatalf("RetryAfter %v, want between %v and %v", d.RetryAfter, min, max)
	}
	// A full refill takes 10⁹ days, longer than a Duration holds: the
	// longest Duration, never a wrapped-around one.
	if d.ResetAfter != time.Duration(math.MaxInt64) {
		t.Fatalf("ResetAfter %v, want the longest Duration", d.ResetAfter)
	}

	hash, _ := Storage(b.Key)
	ttl, err := c.PTTL(ctx, hash).Result()
	if err != nil || ttl <= 0 {
		t.Fatalf("PTTL of the bucket's key: %v %v, want an expiry", ttl, err)
	}
	if ttl > scriptMaxTTL || ttl < scriptMaxTTL-time.Minute {
		t.Fatalf("PTTL %v, want the script's longest expiry, %v", ttl, scriptMaxTTL)
	}
}

// TestKeyTTLAtTheRefillBound: the slowest refill a valid rule may have
// (v1alpha1.MaxRefillSeconds from empty to full) keeps its key's whole
// expiry, twice the refill: the script's longest expiry is not shorter.
func TestKeyTTLAtTheRefillBound(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	// 10⁹ tokens, 10,000 every 31,536 s: 100 years from empty to full.
	b := Bucket{Key: Key("t", "bound"), Capacity: 1e9, RefillTokens: 10000, RefillPeriodMs: 31_536_000}
	if res, err := NewRedis(c).Take(ctx, b, 1, 1); err != nil || res.Granted != 1 {
		t.Fatalf("take: %+v %v", res, err)
	}
	hash, _ := Storage(b.Key)
	ttl, err := c.PTTL(ctx, hash).Result()
	want := 2 * v1alpha1.MaxRefillSeconds * time.Second
	if err != nil || ttl > want || ttl < want-time.Minute {
		t.Fatalf("PTTL %v %v, want twice the refill, %v", ttl, err, want)
	}
	if want != scriptMaxTTL {
		t.Errorf("the script's longest expiry %v is not twice the longest refill of a valid rule, %v", scriptMaxTTL, want)
	}
}
