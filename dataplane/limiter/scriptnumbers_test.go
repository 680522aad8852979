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

	first := redisMs(t, c)
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
	// A day less what refilled between the two takes (on a loaded machine
	// they can be milliseconds apart), and less the bucket's resolution:
	// tokens near 1e9 are doubles one ulp (2^-23 token, 10.3 ms of this
	// refill) apart.
	resolution := int64(math.Ceil((math.Nextafter(b.Capacity, math.Inf(1)) - b.Capacity) * day))
	if apart := redisMs(t, c) - first; res.WaitMs > day || res.WaitMs < day-apart-resolution-1 {
		t.Fatalf("wait after draining: %d ms, want a day (%d ms) less at most the %d ms between the takes and the %d ms of one ulp", res.WaitMs, day, apart, resolution)
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

// TestSlowestValidBucket: the slowest refill a valid rule may have, just
// under v1alpha1.MaxRefillSeconds (2^53 ms) from empty to full: 14,892,855
// tokens, one a week. It answers exactly: a week to the millisecond for
// the next token, the full refill within the double's step (2 ms at 2^53);
// its key expires after the script's longest expiry, 200 years.
func TestSlowestValidBucket(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	const week, capacity = 604_800_000, 14_892_855
	if full := int64(capacity) * week / 1000; full > v1alpha1.MaxRefillSeconds || full+week/1000 <= v1alpha1.MaxRefillSeconds {
		t.Fatalf("a full refill takes %d s: not the slowest under the bound, %d s", full, v1alpha1.MaxRefillSeconds)
	}
	b := Bucket{Key: Key("t", "slowest"), Capacity: capacity, RefillTokens: 1, RefillPeriodMs: week}
	res, err := NewRedis(c).Take(ctx, b, 1, capacity)
	if err != nil || res.Granted != capacity || res.Remaining != 0 || res.WaitMs != week {
		t.Fatalf("draining take: %+v %v, want %d granted, none left, a week's wait", res, err, capacity)
	}
	if full := int64(capacity) * week; res.ResetMs < full || res.ResetMs > full+2 {
		t.Fatalf("reset %d ms, want a full refill, %d ms", res.ResetMs, full)
	}
	hash, _ := Storage(b.Key)
	ttl, err := c.PTTL(ctx, hash).Result()
	if err != nil || ttl > scriptMaxTTL || ttl < scriptMaxTTL-time.Minute {
		t.Fatalf("PTTL %v %v, want the script's longest expiry, %v", ttl, err, scriptMaxTTL)
	}
}
