package limiter

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/lua"
)

// tokenBucket is the embedded script; Run sends EVALSHA and re-sends the
// script with EVAL when Redis answers NOSCRIPT (after a restart, a failover
// or SCRIPT FLUSH).
var tokenBucket = redis.NewScript(lua.TokenBucket)

// Redis decides with the token bucket script: one atomic round trip per call.
type Redis struct {
	client Client
	calls  atomic.Int64
}

// Client is the part of a go-redis client the limiter uses; single-node,
// Sentinel and Cluster clients all satisfy it.
type Client interface {
	redis.Scripter
	Ping(ctx context.Context) *redis.StatusCmd
}

// NewRedis returns a limiter that uses client.
func NewRedis(client Client) *Redis {
	return &Redis{client: client}
}

// Ping checks that Redis answers; it implements Pinger.
func (l *Redis) Ping(ctx context.Context) error {
	return l.client.Ping(ctx).Err()
}

// Allow implements Limiter.
func (l *Redis) Allow(ctx context.Context, b Bucket, cost int64) (Decision, error) {
	res, err := l.Take(ctx, b, cost, cost)
	if err != nil {
		return Decision{}, err
	}
	return res.Decision(b, cost), nil
}

// Stats returns the script calls sent; each is one round trip and one command
// per decision (the same shape as Batcher.Stats).
func (l *Redis) Stats() (roundTrips, commands, decisions int64) {
	n := l.calls.Load()
	return n, n, n
}

// TakeResult is the script's reply.
type TakeResult struct {
	// Granted tokens were taken: 0, or between cost and want.
	Granted int64
	// Remaining whole tokens are left.
	Remaining int64
	// WaitMs is the time until cost tokens exist after the call (the wait
	// before retrying a rejected call); -1 when cost exceeds capacity.
	WaitMs int64
	// ResetMs is the time until the bucket is full.
	ResetMs int64
}

// Take takes between cost and want tokens from b, or none when fewer than
// cost are there.
func (l *Redis) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	l.calls.Add(1)
	vals, err := tokenBucket.Run(ctx, l.client, []string{b.Key},
		b.Capacity, b.RefillTokens, b.RefillPeriodMs, cost, want).Int64Slice()
	if err != nil {
		return TakeResult{}, fmt.Errorf("token bucket script on %s: %w", b.Key, err)
	}
	if len(vals) != 4 {
		return TakeResult{}, fmt.Errorf("token bucket script on %s: %d values in reply, want 4", b.Key, len(vals))
	}
	return TakeResult{Granted: vals[0], Remaining: vals[1], WaitMs: vals[2], ResetMs: vals[3]}, nil
}

// Decision turns the reply for one request of cost into a Decision.
func (r TakeResult) Decision(b Bucket, cost int64) Decision {
	d := Decision{
		Allowed:    r.Granted >= cost,
		Limit:      int64(b.Capacity),
		Remaining:  r.Remaining,
		ResetAfter: time.Duration(r.ResetMs) * time.Millisecond,
		Source:     SourceRedis,
	}
	if !d.Allowed {
		d.RetryAfter = time.Duration(r.WaitMs) * time.Millisecond
	}
	return d
}
