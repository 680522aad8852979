package concurrency

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// call runs one op of concurrency.lua and returns its reply.
func call(t *testing.T, c redis.Scripter, key string, args ...any) []int64 {
	t.Helper()
	vals, err := script.Run(context.Background(), c, []string{key}, args...).Int64Slice()
	if err != nil {
		t.Fatalf("concurrency.lua %v: %v", args, err)
	}
	return vals
}

func score(t *testing.T, c *redis.Client, key, member string) (float64, bool) {
	t.Helper()
	s, err := c.ZScore(context.Background(), key, member).Result()
	if err == redis.Nil {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, true
}

func TestScriptAcquireAndRelease(t *testing.T) {
	c := redistest.Start(t).Client(t)
	const key = "mi:{shop}:orders"
	for _, m := range []string{"gw1:a", "gw1:b", "gw2:c"} {
		if got := call(t, c, key, "acquire", m, 3, 10_000); got[0] != 1 {
			t.Fatalf("acquire %s: %v, want granted", m, got)
		}
	}
	if got := call(t, c, key, "acquire", "gw2:d", 3, 10_000); got[0] != 0 || got[1] != 3 {
		t.Fatalf("fourth acquire: %v, want refused with 3 held", got)
	}
	// A retried call of a member that holds a slot keeps it.
	if got := call(t, c, key, "acquire", "gw1:a", 3, 10_000); got[0] != 1 || got[1] != 3 {
		t.Fatalf("retried acquire: %v, want granted with 3 held", got)
	}
	if got := call(t, c, key, "release", "gw1:b"); got[0] != 1 {
		t.Fatalf("release: %v, want 1 released", got)
	}
	if got := call(t, c, key, "release", "gw1:b"); got[0] != 0 {
		t.Fatalf("second release: %v, want 0 released", got)
	}
	if got := call(t, c, key, "acquire", "gw2:d", 3, 10_000); got[0] != 1 || got[1] != 3 {
		t.Fatalf("acquire after release: %v, want granted with 3 held", got)
	}
	if n := c.ZCard(context.Background(), key).Val(); n != 3 {
		t.Fatalf("%d slots in Redis, want 3", n)
	}
}

// TestScriptLeaseInRedisTime: a slot's score is its expiry, Redis's now plus
// the lease; the key expires with the last lease; an expired slot is
// removed by the next acquire and frees its place.
func TestScriptLeaseInRedisTime(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	const key = "mi:{shop}:orders"
	got := call(t, c, key, "acquire", "gw1:a", 1, 5_000)
	now := got[2]
	if s, _ := score(t, c, key, "gw1:a"); int64(s) != now+5_000 {
		t.Fatalf("score %v, want Redis now %d + 5000", s, now)
	}
	if ttl := c.PTTL(ctx, key).Val().Milliseconds(); ttl <= 0 || ttl > 5_000 {
		t.Fatalf("key TTL %dms, want (0, 5000]", ttl)
	}
	// A lease that ran out: its expiry is in the past in Redis time.
	if err := c.ZAdd(ctx, key, redis.Z{Score: float64(now - 1), Member: "gw1:a"}).Err(); err != nil {
		t.Fatal(err)
	}
	if got := call(t, c, key, "acquire", "gw2:b", 1, 5_000); got[0] != 1 || got[1] != 1 {
		t.Fatalf("acquire over an expired slot: %v, want granted with 1 held", got)
	}
	if _, ok := score(t, c, key, "gw1:a"); ok {
		t.Fatal("the expired slot is still in the set")
	}
}

// TestScriptRenew: renew moves the expiry of held slots only; a slot that
// expired is not brought back (that could exceed the limit).
func TestScriptRenew(t *testing.T) {
	c := redistest.Start(t).Client(t)
	const key = "mi:{shop}:orders"
	call(t, c, key, "acquire", "gw1:a", 5, 1_000)
	call(t, c, key, "acquire", "gw1:b", 5, 1_000)
	got := call(t, c, key, "renew", 60_000, "gw1:a", "gw1:b", "gw1:gone")
	if got[0] != 2 {
		t.Fatalf("renew: %v, want 2 renewed", got)
	}
	for _, m := range []string{"gw1:a", "gw1:b"} {
		if s, _ := score(t, c, key, m); int64(s) != got[1]+60_000 {
			t.Fatalf("%s: score %v, want Redis now %d + 60000", m, s, got[1])
		}
	}
	if _, ok := score(t, c, key, "gw1:gone"); ok {
		t.Fatal("renew added a slot that was not held")
	}
	if ttl := c.PTTL(context.Background(), key).Val().Milliseconds(); ttl <= 1_000 {
		t.Fatalf("key TTL %dms after renewing to 60s, want more than 1000", ttl)
	}
}

func TestScriptUnknownOp(t *testing.T) {
	c := redistest.Start(t).Client(t)
	err := script.Run(context.Background(), c, []string{"mi:{x}:y"}, "steal").Err()
	if err == nil {
		t.Fatal("an unknown op succeeded")
	}
}

// TestScriptDeadline: an acquire that runs after its caller's deadline
// (Redis time) takes nothing.
func TestScriptDeadline(t *testing.T) {
	c := redistest.Start(t).Client(t)
	const key = "mi:{shop}:orders"
	now := call(t, c, key, "acquire", "gw1:a", 5, 10_000, 0)[2]
	if got := call(t, c, key, "acquire", "gw1:late", 5, 10_000, now-1); got[0] != -1 {
		t.Fatalf("acquire past its deadline: %v, want -1", got)
	}
	if _, ok := score(t, c, key, "gw1:late"); ok {
		t.Fatal("a late acquire took a slot")
	}
	if got := call(t, c, key, "acquire", "gw1:b", 5, 10_000, now+60_000); got[0] != 1 || got[1] != 2 {
		t.Fatalf("acquire within its deadline: %v, want granted with 2 held", got)
	}
}
