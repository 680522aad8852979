package explain

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
)

// clock reads the TTL of the hash that holds a bucket and Redis's clock, on
// the node that holds it (the key routes the call). It runs with EVAL_RO:
// Redis refuses any write from it.
var clock = redis.NewScript(`return {redis.call('PTTL', KEYS[1]), redis.call('TIME')}`)

// ReadBucket returns b's state in Redis refilled to Redis's clock now,
// without modifying it: limiter.Peek reads the stored state (either
// layout), then one read-only script the hash's TTL and the node's clock.
// Errors are reported in the state; they never quote the key.
func ReadBucket(ctx context.Context, c redis.UniversalClient, b limiter.Bucket) RedisState {
	hash, field := limiter.Storage(b.Key)
	st := RedisState{Hash: hash, Field: field, Tokens: b.Capacity}
	stored, err := limiter.Peek(ctx, c, b.Key)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	vals, err := clock.RunRO(ctx, c, []string{hash}).Slice()
	if err != nil {
		st.Error = "reading the clock: " + err.Error()
		return st
	}
	ttl, _ := vals[0].(int64)
	st.TTLMs = ttl
	if !stored.Found {
		return st // nothing stored: a full bucket
	}
	t, _ := vals[1].([]any)
	if len(t) != 2 {
		st.Error = "reading the clock: unexpected reply"
		return st
	}
	sec, usec := toInt(t[0]), toInt(t[1])
	nowMs := sec*1000 + usec/1000
	perMs := float64(b.RefillTokens) / float64(b.RefillPeriodMs)
	elapsed := max(0, nowMs-stored.UpdatedMs)
	st.Exists = true
	st.StoredTokens, st.StoredAgoMs = stored.Tokens, elapsed
	st.Tokens = min(b.Capacity, stored.Tokens+float64(elapsed)*perMs)
	return st
}

// toInt reads an integer of a script reply (TIME's fields are strings).
func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		var n int64
		for _, c := range x {
			if c < '0' || c > '9' {
				return 0
			}
			n = n*10 + int64(c-'0')
		}
		return n
	}
	return 0
}
