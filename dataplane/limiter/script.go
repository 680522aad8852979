package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/lua"
)

// tokenBucket is the embedded script (lua/token_bucket.lua). It is sent by
// SHA (EVALSHA) and, when Redis answers NOSCRIPT (after a restart, a failover
// or SCRIPT FLUSH), once more with its text (EVAL), which caches it again.
var tokenBucket = redis.NewScript(lua.TokenBucket)

// The script's arguments are built and its reply parsed here only.

// scriptArgs are the script's ARGV for a Take of b.
func scriptArgs(b *Bucket, cost, want, deadlineMs int64) []any {
	return []any{b.Capacity, b.RefillTokens, b.RefillPeriodMs, cost, want, deadlineMs, max(1, b.Unit)}
}

// errExpired is the reply of a call that reached Redis after its deadline:
// it took nothing, and its caller has given up already.
var errExpired = errors.New("reached Redis after its deadline")

// parseReply reads the script's reply {granted, remaining, wait, reset, now}.
// Errors never quote the key: it holds a tenant id.
func parseReply(cmd *redis.Cmd) (TakeResult, int64, error) {
	vals, err := cmd.Int64Slice()
	if err != nil {
		return TakeResult{}, 0, fmt.Errorf("token bucket script: %w", err)
	}
	if len(vals) != 5 {
		return TakeResult{}, 0, fmt.Errorf("token bucket script: %d values in reply, want 5", len(vals))
	}
	if vals[0] < 0 {
		return TakeResult{}, vals[4], errExpired
	}
	return TakeResult{Granted: vals[0], Remaining: vals[1], WaitMs: vals[2], ResetMs: vals[3]}, vals[4], nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// redisClock estimates the offset between Redis's clock and this process's,
// from the time each reply carries, so that a caller's deadline can be sent
// in Redis time. The estimate errs late by up to one round trip, which only
// lets a call run slightly after its caller gave up (taking a token nobody
// uses: fewer admissions, never more).
type redisClock struct {
	offsetMs atomic.Int64 // Redis ms − local ms
	known    atomic.Bool
}

// observe records Redis's time redisMs seen in a reply received at recv.
func (c *redisClock) observe(redisMs int64, recv time.Time) {
	c.offsetMs.Store(redisMs - recv.UnixMilli())
	c.known.Store(true)
}

// deadline is ctx's deadline in Redis milliseconds (with slack for the
// estimate), or 0 when either is unknown.
func (c *redisClock) deadline(ctx context.Context) int64 {
	d, ok := ctx.Deadline()
	if !ok || !c.known.Load() {
		return 0
	}
	const slackMs = 2
	return d.UnixMilli() + c.offsetMs.Load() + slackMs
}
