package limiter

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestUpgradeKeepsBucketState: a bucket written by tollgate 0.1 (a hash
// {tokens, ts} per bucket) is read by the new script with its tokens, not
// as a full bucket, and moved to the new layout.
func TestUpgradeKeepsBucketState(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	now, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []Bucket{
		{Key: Key("t", "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000},
		{Key: RegionKey("t", "r", "eu"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000},
		{Key: ShardKey("t", "r", "", 2), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000},
	} {
		t.Run(b.Key, func(t *testing.T) {
			// The 0.1 layout: 3 of 10 tokens left.
			if err := rc.HSet(ctx, b.Key, "tokens", "3", "ts", strconv.FormatInt(now.UnixMilli(), 10)).Err(); err != nil {
				t.Fatal(err)
			}
			rc.PExpire(ctx, b.Key, 2*time.Hour)
			st, err := Peek(ctx, rc, b.Key)
			if err != nil || !st.Found || st.Tokens != 3 {
				t.Fatalf("Peek of the 0.1 layout: %+v %v", st, err)
			}
			r, err := NewRedis(rc).Take(ctx, b, 1, 1)
			if err != nil || r.Granted != 1 || r.Remaining != 2 {
				t.Fatalf("first call after the upgrade: %+v %v, want granted with 2 remaining", r, err)
			}
			hash, field := Storage(b.Key)
			if hash != b.Key {
				if n := rc.Exists(ctx, b.Key).Val(); n != 0 {
					t.Errorf("the 0.1 key %s is still there", b.Key)
				}
			} else if n := rc.HExists(ctx, hash, "tokens").Val(); n {
				t.Errorf("the 0.1 fields are still in %s", hash)
			}
			if !rc.HExists(ctx, hash, field).Val() {
				t.Errorf("no field %s in %s", field, hash)
			}
			if st, err := Peek(ctx, rc, b.Key); err != nil || !st.Found || st.Tokens < 1.99 || st.Tokens > 2.01 {
				t.Errorf("Peek after the move: %+v %v, want 2 tokens", st, err)
			}
		})
	}
}

// TestRedisMemoryPerBucket measures Redis's used_memory per bucket (key,
// hash, expiry entry and dict overhead included) over 100,000 buckets made
// by the script: 20,000 tenants with 5 routes each (the target: at most
// 100 bytes), and 100,000 tenants with one route (reported).
func TestRedisMemoryPerBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 200,000 buckets")
	}
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	for _, mix := range []struct{ tenants, routes int }{{20_000, 5}, {100_000, 1}} {
		if err := rc.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// One bucket first: the script is cached, the dicts exist.
		b := Bucket{Key: Key("warm-up", "r"), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 1000}
		if _, err := NewRedis(rc).Take(ctx, b, 1, 1); err != nil {
			t.Fatal(err)
		}
		before := usedMemory(t, rc)
		pipe := rc.Pipeline()
		for i := range mix.tenants {
			for j := range mix.routes {
				// Capacity 100 at 1 token/s: 200 s of expiry, far longer
				// than the measurement.
				b := Bucket{Key: Key(fmt.Sprintf("tenant-%06d", i), fmt.Sprintf("route-%d", j)), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 1000}
				keys, args := ScriptCall(&b, 1, 1, 0, LayoutPacked)
				tokenBucket.EvalSha(ctx, pipe, keys, args...)
			}
			if pipe.Len() >= 1000 || i == mix.tenants-1 {
				if _, err := pipe.Exec(ctx); err != nil {
					t.Fatal(err)
				}
				pipe = rc.Pipeline()
			}
		}
		per := float64(usedMemory(t, rc)-before) / float64(mix.tenants*mix.routes)
		t.Logf("%d tenants x %d routes: %.1f bytes of Redis memory per bucket", mix.tenants, mix.routes, per)
		if mix.routes == 5 && per > 100 {
			t.Errorf("%.1f bytes per bucket with 5 routes per tenant, want at most 100", per)
		}
	}
}

func usedMemory(t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

// The 0.1 script (one hash {tokens, ts} per bucket), as gateways of 0.1 run
// it during a rolling upgrade.
//
//go:embed testdata/token_bucket_0.1.lua
var script01 string

// TestCompatLayoutSharesBucketsWith01: while a rolling upgrade from 0.1 is
// under way, old and new gateways take from the same buckets with
// --redis-layout=compat-0.1: their admissions together never exceed the
// capacity. In the packed layout alone they would not (the test shows the
// 0.1 script sees a full bucket after a packed write).
func TestCompatLayoutSharesBucketsWith01(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	old := redis.NewScript(script01)
	oldTake := func(b Bucket) bool {
		v, err := old.Run(ctx, rc, []string{b.Key}, b.Capacity, b.RefillTokens, b.RefillPeriodMs, 1, 1, 0).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v[0] > 0
	}
	newer := NewRedis(rc)
	newer.Layout = LayoutCompat
	for _, b := range []Bucket{
		{Key: Key("t", "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000},
		{Key: ShardKey("t", "r", "", 1), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000},
	} {
		t.Run(b.Key, func(t *testing.T) {
			admitted := 0
			for i := range 30 {
				if i%3 == 0 {
					if oldTake(b) {
						admitted++
					}
					continue
				}
				r, err := newer.Take(ctx, b, 1, 1)
				if err != nil {
					t.Fatal(err)
				}
				admitted += int(r.Granted)
			}
			if admitted != 10 {
				t.Errorf("0.1 and compat gateways admitted %d together, want the capacity 10", admitted)
			}
		})
	}
	// Packed only: a 0.1 gateway no longer sees what a new one took.
	b := Bucket{Key: Key("u", "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
	if _, err := NewRedis(rc).Take(ctx, b, 5, 5); err != nil {
		t.Fatal(err)
	}
	v, err := old.Run(ctx, rc, []string{b.Key}, b.Capacity, b.RefillTokens, b.RefillPeriodMs, 1, 1, 0).Int64Slice()
	if err != nil || v[1] != 9 {
		t.Fatalf("0.1 script after a packed write: %v %v, want a full bucket (9 left): the reason for compat-0.1", v, err)
	}
}
