package explain

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
)

// inspect reads a bucket of lua/token_bucket.lua (a hash {tokens, ts}, ts
// in Redis milliseconds) with its TTL and Redis's clock. It runs with
// EVAL_RO: Redis refuses any write from it, so explaining never changes a
// bucket. The clock is read in the script so that it is the key's node's.
var inspect = redis.NewScript(`
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local t = redis.call('TIME')
return {s[1], s[2], redis.call('PTTL', KEYS[1]), t[1], t[2]}
`)

// ReadBucket returns b's state in Redis refilled to Redis's clock now,
// without modifying it. Errors are reported in the state; they never quote
// the key.
func ReadBucket(ctx context.Context, c redis.Scripter, b limiter.Bucket) RedisState {
	vals, err := inspect.RunRO(ctx, c, []string{b.Key}).Slice()
	if err != nil {
		return RedisState{Error: err.Error()}
	}
	if len(vals) != 5 {
		return RedisState{Error: "unexpected reply"}
	}
	num := func(v any) (float64, bool) {
		switch x := v.(type) {
		case string:
			f, err := strconv.ParseFloat(x, 64)
			return f, err == nil
		case int64:
			return float64(x), true
		}
		return 0, false
	}
	ttl, _ := num(vals[2])
	sec, _ := num(vals[3])
	usec, _ := num(vals[4])
	nowMs := sec*1000 + float64(int64(usec)/1000)
	st := RedisState{TTLMs: int64(ttl), Tokens: b.Capacity}
	tokens, ok1 := num(vals[0])
	ts, ok2 := num(vals[1])
	if !ok1 || !ok2 {
		return st // no state: a full bucket
	}
	perMs := float64(b.RefillTokens) / float64(b.RefillPeriodMs)
	elapsed := max(0, nowMs-ts)
	st.Exists = true
	st.StoredTokens, st.StoredAgoMs = tokens, int64(elapsed)
	st.Tokens = min(b.Capacity, tokens+elapsed*perMs)
	return st
}
