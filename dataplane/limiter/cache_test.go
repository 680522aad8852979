package limiter

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// scriptedTaker answers Takes with the replies it is given, in order, and
// records whether the last call keeps late replies. It stands in for the
// Redis side where a test needs replies in an order a real Redis gives only
// by chance (two calls of one bucket whose replies are handled out of
// order).
type scriptedTaker struct {
	replies   []TakeResult
	keepsLate bool
}

func (s *scriptedTaker) Take(_ context.Context, b Bucket, _, _ int64) (TakeResult, error) {
	s.keepsLate = b.keepsLate
	r := s.replies[0]
	s.replies = s.replies[1:]
	return r, nil
}

// late hands r to c as the Batcher below would: a reply to the last call
// that came after it returned.
func (s *scriptedTaker) late(t *testing.T, c *Cache, b *Bucket, r TakeResult) {
	t.Helper()
	if !s.keepsLate {
		t.Fatal("the Cache's call does not keep a late reply")
	}
	c.KeepLate(b, r)
}

// TestCachedQuotaRefusalSaysQuota: once the quota has refused a request,
// the Cache answers the next ones itself until the period ends; those
// answers say the quota refused them (what the headers and the rate limit
// service report), even when a grant Redis made before the quota ran out
// (in the same millisecond of Redis's clock) is handled after the refusal
// (a late reply, or a concurrent call's).
func TestCachedQuotaRefusalSaysQuota(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	const monthEndMs = 9 * 86_400_000
	const redisMs = 1_800_000_000_000
	refused := TakeResult{WaitMs: monthEndMs, ResetMs: 9800, Remaining: 40,
		Quota: QuotaResult{Set: true, Remaining: 0, ResetMs: monthEndMs, Short: true},
		state: bucketState{stored: 40.2, storedMs: redisMs, nowMs: redisMs}}
	grantedBefore := TakeResult{Granted: 1, Remaining: 41, ResetMs: 8800,
		Quota: QuotaResult{Set: true, Remaining: 0, ResetMs: monthEndMs},
		state: bucketState{stored: 41.2, storedMs: redisMs, nowMs: redisMs}}
	next := &scriptedTaker{replies: []TakeResult{refused}}
	c := NewCache(next, CacheOptions{Clock: clock})
	b := Bucket{Key: "rl:{t}:r", Capacity: 50, RefillTokens: 1, RefillPeriodMs: 1000,
		Quota: Quota{Key: "q", Limit: 37, Whole: 37}}
	ctx := context.Background()

	r, err := c.Take(ctx, b, 1, 1)
	if err != nil || r.Granted != 0 || !r.outcome(1).Quota.Refused {
		t.Fatalf("the quota's refusal from Redis: %+v %v", r, err)
	}
	next.late(t, c, &b, grantedBefore)
	now = now.Add(time.Second)
	r, err = c.Take(ctx, b, 1, 1)
	if err != nil || !r.Cached || r.Granted != 0 {
		t.Fatalf("the next request: %+v %v, want refused by the Cache", r, err)
	}
	if r.Remaining != 41 {
		t.Fatalf("cached refusal: %d tokens in the bucket, want 41: the refusal's 40.2, refilled for a second", r.Remaining)
	}
	o := r.outcome(1)
	if !o.Quota.Refused || o.Quota.Remaining != 0 || o.RetryAfter != o.Quota.ResetAfter || o.Quota.ResetAfter != monthEndMs*time.Millisecond-time.Second {
		t.Fatalf("cached refusal %+v, want refused by the quota until the month ends", o)
	}
}

// redisSide is the Redis side under a Cache in these tests: one script
// call per Take, keeping Redis's time of the last reply. With offline set
// it sends nothing and fails with errAsked: the test sees that the Cache
// would have asked Redis.
type redisSide struct {
	rc      *redis.Client
	offline bool
	nowMs   int64
}

var errAsked = errors.New("the Cache asked Redis")

func (s *redisSide) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	if s.offline {
		return TakeResult{}, errAsked
	}
	keys, args := ScriptCall(&b, cost, want, 0, LayoutPacked)
	r, now, err := parseReply(tokenBucket.Run(ctx, s.rc, keys, args...))
	s.nowMs = now
	return r, err
}

// seedBucket writes the state of the bucket named key as the script
// stores it: tokens left at atMs (Redis time).
func seedBucket(t *testing.T, rc *redis.Client, key string, tokens float64, atMs int64) {
	t.Helper()
	var v [14]byte
	binary.LittleEndian.PutUint64(v[:8], math.Float64bits(tokens))
	for i := 8; i < 14; i++ {
		v[i] = byte(atMs >> (8 * (i - 8)))
	}
	hash, field := Storage(key)
	if err := rc.HSet(context.Background(), hash, field, string(v[:])).Err(); err != nil {
		t.Fatal(err)
	}
}

// answer is what a Take answer says to a client: what the headers and the
// status are made of.
type answer struct {
	Granted, Remaining, WaitMs, ResetMs int64
	Quota                               QuotaResult
}

func answerOf(r TakeResult) answer {
	return answer{r.Granted, r.Remaining, r.WaitMs, r.ResetMs, r.Quota}
}

// TestCacheAnswersEachCostAsTheScript (issue 27, item 6): once Redis has
// refused a request, the Cache answers the next requests of the bucket
// that the script would refuse, each with the script's own answer for its
// cost at its time (Retry-After, remaining, reset, the quota's part): a
// cost of 10 after a cost of 3 was refused waits for 10 tokens, a cost
// above the capacity can never pass. A request the script would grant
// goes to Redis. The script's answers come from a twin of the bucket
// whose state is the bucket's as it would be d later (its last write
// moved back by d, the quota's clock moved on by d), asked while the
// Cache's clock stands at the same Redis time plus d: times under the
// test's control on both sides, to the millisecond, while Redis keeps its
// real clock.
func TestCacheAnswersEachCostAsTheScript(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	perMinute := Bucket{Capacity: 20, RefillTokens: 1, RefillPeriodMs: 60_000}
	quota := Quota{Limit: 37, Whole: 37}
	cases := []struct {
		name string
		b    Bucket
		// The bucket's state before the first call: emptied by a cost of
		// drain, or stored tokens written ageMs before.
		drain  int64
		stored float64
		ageMs  int64
		// quotaUsed is the period's count (with a quota).
		quotaUsed int64
		// arm is the cost of the first call, which Redis refuses.
		arm   int64
		costs []int64
	}{
		{name: "capacity 20, 1 per minute, emptied by a cost of 20", b: perMinute, drain: 20, arm: 3, costs: []int64{3, 10, 20, 21, 1}},
		{name: "150 s after it emptied", b: perMinute, ageMs: 150_000, arm: 3, costs: []int64{3, 10, 20, 21, 1, 2}},
		{name: "in debt, 5 tokens below zero", b: perMinute, stored: -5, arm: 3, costs: []int64{3, 10, 20, 21, 1}},
		{name: "a shard: 20/3 tokens, 1 per 3 minutes", b: Bucket{Capacity: 20.0 / 3, RefillTokens: 1, RefillPeriodMs: 180_000, Shards: 3},
			stored: 0.25, arm: 1, costs: []int64{1, 2, 6, 7, 3}},
		{name: "a region's share: 7.5 tokens, 3 per 7 s", b: Bucket{Capacity: 7.5, RefillTokens: 3, RefillPeriodMs: 7000},
			stored: 1.2, arm: 2, costs: []int64{2, 3, 7, 8, 1}},
		{name: "a quota of 37 with 7 left, a bucket of 50 with 40", b: Bucket{Capacity: 50, RefillTokens: 1, RefillPeriodMs: 1000, Quota: quota},
			stored: 40, quotaUsed: 30, arm: 8, costs: []int64{8, 3, 7, 10, 38, 45, 51}},
		{name: "a quota used up, a bucket short too", b: Bucket{Capacity: 50, RefillTokens: 1, RefillPeriodMs: 1000, Quota: quota},
			stored: 2, quotaUsed: 37, arm: 1, costs: []int64{1, 3, 10, 37, 38, 51}},
	}
	// How far the Cache's clock is past the time Redis's answers were
	// given, in ms.
	deltas := []int64{0, 1, 999, 7_001, 30_000, 59_999, 60_000, 150_000, 179_999, 600_000, 1_200_000, 1_260_001}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			b.Key = ShardKey("each-cost", "r", "", i)
			nowMs := redisTime(t, rc).UnixMilli()
			if b.Quota.Limit > 0 {
				// The period ends ten minutes from now: some deltas cross it.
				b.Quota.Key = QuotaKey("each-cost", "r", strconv.Itoa(i))
				b.Quota.Start, b.Quota.Switch, b.Quota.End = nowMs-3600_000, nowMs+600_000, nowMs+86_400_000
				if err := rc.Set(ctx, b.Quota.counter(b.Quota.Start), tc.quotaUsed, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.drain > 0 {
				run(t, rc, &b, tc.drain, tc.drain)
			} else {
				seedBucket(t, rc, b.Key, tc.stored, nowMs-tc.ageMs)
			}
			st, err := Peek(ctx, rc, b.Key)
			if err != nil || !st.Found {
				t.Fatalf("the bucket's state: %+v %v", st, err)
			}
			side := &redisSide{rc: rc}
			start := time.Unix(1_800_000_000, 0)
			clock := start
			c := NewCache(side, CacheOptions{Clock: func() time.Time { return clock }})
			if r, err := c.Take(ctx, b, tc.arm, tc.arm); err != nil || r.Granted != 0 || r.Cached {
				t.Fatalf("the first call, a cost of %d: %+v %v, want refused by Redis", tc.arm, r, err)
			}
			armedMs := side.nowMs
			side.offline = true

			twin := b
			twin.Key += "-twin"
			if twin.Quota.Key != "" {
				twin.Quota.Key += "-twin"
			}
			reset := func(d int64) {
				seedBucket(t, rc, twin.Key, st.Tokens, st.UpdatedMs-d)
				if twin.Quota.Key != "" {
					twin.Quota.ShiftMs = d
					for _, start := range []int64{twin.Quota.Start, twin.Quota.Switch} {
						rc.Del(ctx, twin.Quota.counter(start))
					}
					if err := rc.Set(ctx, twin.Quota.counter(twin.Quota.Start), tc.quotaUsed, 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			var cached, asked int
			for _, d := range deltas {
				reset(d)
				for _, cost := range tc.costs {
					want, redisMs := run(t, rc, &twin, cost, cost)
					clock = start.Add(time.Duration(redisMs+d-armedMs) * time.Millisecond)
					got, err := c.Take(ctx, b, cost, cost)
					// The Cache may ask Redis once the bucket is full (only a
					// cost above the capacity is refused then) and the
					// quota's period is over (a new count).
					periodOver := b.Quota.Key != "" && redisMs+d >= b.Quota.Switch
					mayAsk := (want.ResetMs == 0 && !want.Quota.Short) || periodOver
					switch {
					case want.Granted > 0 && errors.Is(err, errAsked):
						asked++
						reset(d) // the twin gave tokens
					case want.Granted > 0:
						t.Errorf("%d ms on, cost %d: the Cache answered %+v %v; the script grants it (%+v): the Cache must ask Redis", d, cost, got, err, want)
						reset(d)
					case mayAsk && errors.Is(err, errAsked):
						asked++
					case err != nil || !got.Cached:
						t.Errorf("%d ms on, cost %d: %+v %v, want the Cache's answer %+v", d, cost, got, err, want)
					case answerOf(got) != answerOf(want):
						t.Errorf("%d ms on, cost %d: the Cache answered\n  %+v\nthe script answers\n  %+v", d, cost, answerOf(got), answerOf(want))
					default:
						cached++
					}
				}
			}
			t.Logf("%d answers from the Cache, %d from Redis", cached, asked)
			if cached == 0 || asked == 0 {
				t.Errorf("%d answers from the Cache, %d from Redis: the case shows nothing", cached, asked)
			}
		})
	}
}

// wantNearScript fails the test unless the Cache's outcome got is Redis's
// answer want, given d after it: no shorter a wait (the Cache's estimate
// of Redis's time never runs ahead of it), at most d plus the
// script's millisecond longer, and the same tokens and status.
func wantNearScript(t *testing.T, what string, got Outcome, want TakeResult, d time.Duration) {
	t.Helper()
	w := time.Duration(want.WaitMs) * time.Millisecond
	if got.Allowed || got.Remaining != want.Remaining || got.RetryAfter < w || got.RetryAfter > w+d+time.Millisecond {
		t.Errorf("%s: the Cache answered %+v; Redis answers %+v (within %v)", what, got, want, d)
	}
}

// TestCachedRefusalFollowsACharge: a response's cost, charged after the
// Cache learnt the bucket was short (a charge goes past the Cache), moves
// the Cache's answers with it: a bucket 10 tokens in debt makes a cost of
// 3 wait for 13 tokens, as Redis says, not for 3.
func TestCachedRefusalFollowsACharge(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestChain(t, srv)
	ctx := context.Background()
	b := Bucket{Key: Key("debt", "r"), Capacity: 20, RefillTokens: 1, RefillPeriodMs: 60_000, FailureMode: snapshot.LocalFallback, MaxDebt: 20}
	if d := c.Decide(ctx, b, 20); !d.Allowed {
		t.Fatalf("a cost of 20 on a full bucket of 20: %+v", d)
	}
	if d := c.Decide(ctx, b, 3); d.Allowed || d.Source != SourceRedis {
		t.Fatalf("a cost of 3 on the empty bucket: %+v, want refused by Redis", d)
	}
	began := time.Now()
	if ch := c.Charge(ctx, b, 10); ch.Tokens != 10 || ch.Remaining != -10 {
		t.Fatalf("a charge of 10: %+v, want the bucket 10 tokens in debt", ch)
	}
	waited := c.Waited()
	got := c.Decide(ctx, b, 3)
	want, _ := run(t, srv.Client(t), &b, 3, 3)
	if c.Waited() != waited {
		t.Errorf("the refusal after the charge asked Redis: want the Cache's answer")
	}
	wantNearScript(t, "cost 3 after the charge", got, want, time.Since(began))
}

// TestCachedRefusalFollowsASpread: tokens a request spread over the shards
// took (past the Cache) count in the Cache's answers for a shard: after a
// spread took the 5 tokens of shard 0, a cost of 9 there waits for 9
// tokens, as Redis says, and a cost of 3 is refused without a call.
func TestCachedRefusalFollowsASpread(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	c := newTestChain(t, srv)
	ctx := context.Background()
	shard := func(i int) Bucket {
		return Bucket{Key: ShardKey("spread", "r", "", i), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 120_000,
			FailureMode: snapshot.LocalFallback, Shards: 2, WholeKey: Key("spread", "r")}
	}
	s0, s1 := shard(0), shard(1)
	seedBucket(t, rc, s0.Key, 5, redisTime(t, rc).UnixMilli())
	if d := c.Decide(ctx, s0, 8); d.Allowed || d.Source != SourceRedis {
		t.Fatalf("a cost of 8 on a shard of 5 tokens: %+v, want refused by Redis", d)
	}
	began := time.Now()
	if d, err := c.AllowSpread(ctx, []Bucket{s0, s1}, 12); err != nil || !d.Allowed {
		t.Fatalf("a cost of 12 over the shards of 5 and 10: %+v %v", d, err)
	}
	waited := c.Waited()
	got3 := c.Decide(ctx, s0, 3)
	got9 := c.Decide(ctx, s0, 9)
	want3, _ := run(t, rc, &s0, 3, 3)
	want9, _ := run(t, rc, &s0, 9, 9)
	if c.Waited() != waited {
		t.Errorf("%d calls to Redis for refusals the Cache knows, want none", c.Waited()-waited)
	}
	wantNearScript(t, "cost 3 after the spread", got3, want3, time.Since(began))
	wantNearScript(t, "cost 9 after the spread", got9, want9, time.Since(began))
}

// TestCacheRefusalRules: what the Cache does around its refusals, on an
// injected clock, with Redis's replies scripted (their order is the
// point): capacity 20, 1 token a minute, emptied; Redis refused a cost of
// 3 at Redis time T. The arithmetic against the real script is
// TestCacheAnswersEachCostAsTheScript's.
func TestCacheRefusalRules(t *testing.T) {
	const T = 1_800_000_000_000
	refused := TakeResult{WaitMs: 180_000, ResetMs: 1_200_000, state: bucketState{stored: 0, storedMs: T, nowMs: T}}
	granted := TakeResult{Granted: 1, Remaining: 18, ResetMs: 90_000, state: bucketState{stored: 18.5, storedMs: T + 1, nowMs: T + 1}}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// then runs after the refusal, on the Cache c, its Redis side next
		// (holding the reply granted) and the clock, and fails the test
		// if the rule does not hold.
		then func(t *testing.T, c *Cache, b Bucket, next *scriptedTaker, now *time.Time)
	}{
		{"a cost of 1 half a minute on: refused for 30 s, as explain says", func(t *testing.T, c *Cache, b Bucket, _ *scriptedTaker, now *time.Time) {
			*now = now.Add(30 * time.Second)
			if r, err := c.Take(ctx, b, 1, 1); err != nil || !r.Cached || r.WaitMs != 30_000 || r.Remaining != 0 || r.ResetMs != 1_170_000 {
				t.Fatalf("%+v %v, want refused by the Cache for 30 s", r, err)
			}
			var h Held
			c.peek(&b, &h)
			if h.EmptyCost != 1 || h.EmptyFor != 30*time.Second {
				t.Fatalf("explain: %+v, want costs of 1+ refused, 1 for 30 s more", h)
			}
		}},
		{"a minute on, a cost of 1 goes to Redis", func(t *testing.T, c *Cache, b Bucket, next *scriptedTaker, now *time.Time) {
			*now = now.Add(time.Minute)
			if r, err := c.Take(ctx, b, 1, 1); err != nil || r.Cached || r.Granted != 1 || len(next.replies) != 0 {
				t.Fatalf("%+v %v, want Redis's grant", r, err)
			}
			// The grant's state (18.5 tokens: another gateway gave some
			// back) is the newest: a cost of 19 waits for 0.5 tokens.
			if r, err := c.Take(ctx, b, 19, 19); err != nil || !r.Cached || r.WaitMs != 30_000 || r.Remaining != 18 {
				t.Fatalf("a cost of 19 after the grant: %+v %v, want refused for 30 s from the grant's state", r, err)
			}
		}},
		{"a late grant after the refusal is spent first", func(t *testing.T, c *Cache, b Bucket, next *scriptedTaker, _ *time.Time) {
			next.late(t, c, &b, TakeResult{Granted: 3, Remaining: 0, ResetMs: 1_200_000, state: bucketState{stored: 0, storedMs: T - 1, nowMs: T - 1}})
			if r, err := c.Take(ctx, b, 3, 3); err != nil || !r.Cached || r.Granted != 3 {
				t.Fatalf("%+v %v, want the 3 tokens Redis granted late", r, err)
			}
			if r, err := c.Take(ctx, b, 3, 3); err != nil || !r.Cached || r.Granted != 0 || r.WaitMs != 180_000 {
				t.Fatalf("then: %+v %v, want the refusal of Redis's newer state", r, err)
			}
		}},
		{"tokens given back: Redis decides", func(t *testing.T, c *Cache, b Bucket, next *scriptedTaker, _ *time.Time) {
			c.Refilled(b)
			if r, err := c.Take(ctx, b, 10, 10); err != nil || r.Cached || len(next.replies) != 0 {
				t.Fatalf("%+v %v, want Redis's answer", r, err)
			}
		}},
		{"tokens the local fallback owes the quota: Redis counts them first", func(t *testing.T, c *Cache, b Bucket, next *scriptedTaker, _ *time.Time) {
			b.Quota.Owed, b.Quota.OwedStart = 2, 0
			if r, err := c.Take(ctx, b, 10, 10); err != nil || r.Cached || len(next.replies) != 0 {
				t.Fatalf("%+v %v, want Redis's answer", r, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			next := &scriptedTaker{replies: []TakeResult{refused, granted}}
			c := NewCache(next, CacheOptions{Clock: func() time.Time { return now }})
			b := Bucket{Key: Key("t", "r"), Capacity: 20, RefillTokens: 1, RefillPeriodMs: 60_000}
			if r, err := c.Take(ctx, b, 3, 3); err != nil || r.Cached || r.WaitMs != 180_000 {
				t.Fatalf("the refusal from Redis: %+v %v", r, err)
			}
			tc.then(t, c, b, next, &now)
		})
	}
}

// TestCacheRefusalWithPrefetchedTokens: with a prefetch batch of 5 on a
// bucket of 10, the tokens this gateway holds are spent first, as without
// the empty-bucket cache; a cost they do not cover is refused by the Cache
// with the script's answer for Redis's bucket alone (which is what Redis
// answers: held tokens are not Redis's), and a cost Redis's bucket holds
// goes to Redis.
func TestCacheRefusalWithPrefetchedTokens(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	side := &redisSide{rc: rc}
	start := time.Unix(1_800_000_000, 0)
	clock := start
	c := NewCache(side, CacheOptions{Clock: func() time.Time { return clock }, TTL: time.Hour})
	b := Bucket{Key: Key("prefetch", "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 60_000, Prefetch: 5}
	if r, err := c.Take(ctx, b, 1, 1); err != nil || r.Granted < 1 || r.Cached {
		t.Fatalf("the first request: %+v %v, want a batch of 5 from Redis", r, err)
	}
	if r, err := c.Take(ctx, b, 8, 8); err != nil || r.Granted != 0 || r.Cached {
		t.Fatalf("a cost of 8 with 4 held and 5 in Redis: %+v %v, want refused by Redis", r, err)
	}
	armedMs := side.nowMs
	side.offline = true
	if r, err := c.Take(ctx, b, 3, 3); err != nil || r.Granted != 3 || !r.Cached {
		t.Fatalf("a cost of 3 with 4 held: %+v %v, want the held tokens", r, err)
	}
	want, redisMs := run(t, rc, &b, 6, 6)
	clock = start.Add(time.Duration(redisMs-armedMs) * time.Millisecond)
	got, err := c.Take(ctx, b, 6, 6)
	if err != nil || !got.Cached || answerOf(got) != answerOf(want) {
		t.Fatalf("a cost of 6 with 1 held and 5 in Redis: %+v %v, want the Cache's answer %+v", got, err, want)
	}
	if _, err := c.Take(ctx, b, 5, 5); !errors.Is(err, errAsked) {
		t.Fatalf("a cost of 5 with 5 in Redis: %v, want Redis asked", err)
	}
}
