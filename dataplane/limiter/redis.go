package limiter

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/lib/redistime"
)

// Redis takes tokens with one script call per Take, sent from the caller's
// goroutine: the simplest Taker, for tools and tests. The gateway uses
// Batcher, which can also send one call per request (the classic design)
// while bounding how long a call may wait for Redis.
type Redis struct {
	client Client
	clock  redistime.Clock
	calls  atomic.Int64
	// Layout is how buckets are stored (default LayoutPacked).
	Layout Layout
}

// NewRedis returns a Taker that uses client.
func NewRedis(client Client) *Redis {
	return &Redis{client: client}
}

// Ping checks that Redis answers; it implements Pinger.
func (l *Redis) Ping(ctx context.Context) error {
	return l.client.Ping(ctx).Err()
}

// Stats returns the script calls sent; each is one round trip and one command
// per decision (the same shape as Batcher.Stats).
func (l *Redis) Stats() (roundTrips, commands, decisions int64) {
	n := l.calls.Load()
	return n, n, n
}

// Take implements Taker.
func (l *Redis) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	l.calls.Add(1)
	keys, args := ScriptCall(&b, cost, want, l.clock.Deadline(ctx, deadlineSlackMs), l.Layout)
	cmd := tokenBucket.Run(ctx, l.client, keys, args...)
	res, now, err := parseReply(cmd)
	res.countIn(&b, now)
	if now > 0 {
		l.clock.Observe(now, time.Now())
	}
	if errors.Is(err, errExpired) {
		return TakeResult{}, context.DeadlineExceeded
	}
	return res, err
}

// Client is the part of a go-redis client the limiter uses; single-node,
// Sentinel and Cluster clients all satisfy it.
type Client interface {
	redis.Scripter
	Ping(ctx context.Context) *redis.StatusCmd
}
