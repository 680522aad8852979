package limiter

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Chain is the limiter the gateway decides with. NewChain assembles it; a
// request passes its layers in this order, each below Allow a Taker with
// one Take:
//
//	Chain.Allow         on failure, the rule's failure mode
//	  → Cache.Take      empty buckets, prefetched tokens and late grants,
//	                    answered locally
//	  → Breakers.Take   a circuit breaker per Redis node: fails at once while
//	                    the bucket's node is down
//	  → Mirror.Take     keeps Local in step with the calls that go to Redis:
//	                    the owed quota tokens a marked call carries, Sending
//	                    before it, Observe of Redis's answer, Unsure or
//	                    NotSent after a failure (before the breaker counts it)
//	  → Batcher.Take    the deadline (MaxWait, one timer for all Takes),
//	                    coalescing, pipelining, the Redis deadline; a reply
//	                    after its Take returned goes to the Cache (KeepLate,
//	                    the Batcher's Late handler)
//	  → Redis           lua/token_bucket.lua, one atomic script call
//
// Charge, AllowSpread and the give-backs of Refund are no decisions the
// Cache answers: they call Breakers.Take themselves (and so pass the Mirror
// and the Batcher). AllowAll, a request's stacked limits in one call, passes
// the breaker of the node and the Mirror too, then goes to Redis through
// go-redis beside the Batcher's pipelines (stack.go). When any layer below fails or the breaker is open, the
// rule's failure mode decides: for LocalFallback rules, Local (buckets of
// 1/N, mirroring what Redis last said), which the Chain uses only to
// decide. A breaker's change of state reaches OnStateChange as a
// StateChange. Without a Redis client the chain is Local alone.
//
// A failed call is not a license to admit on top of what Redis grants:
//
//   - breaker open (Redis known down), Redis is gone (the connection was
//     refused or closed by the server), or the script fails on this bucket
//     (IsScriptError: the same call fails the same way on every replica,
//     so Redis decides nothing for it):
//     the local bucket decides; it continues from Redis's last answer for
//     the bucket, starts empty (refilling at rate/N) for a bucket whose
//     last call went unanswered or is still out (whatever Redis said
//     before: the other replicas may still be draining it), and starts at
//     capacity/N only for a bucket this gateway never sent to Redis (or
//     whose calls Redis refused, or the script failed on: they admitted
//     nothing);
//   - breaker closed (this one call failed or was too late, while Redis is
//     not known to be down; it may still take its token there): the request
//     is rejected with Retry-After: 1s. A stalled Redis or a starved
//     machine costs a few rejections, never admissions beyond the limit.
type Chain struct {
	opts    ChainOptions
	local   *Local
	cache   *Cache    // nil without Redis
	breaker *Breakers // nil without Redis
	mirror  *Mirror   // nil without Redis
	batcher *Batcher  // nil without Redis
}

// ChainOptions configure a Chain. Zero values take the documented defaults.
type ChainOptions struct {
	// Client is Redis; nil makes a local-only chain (each replica enforces
	// 1/N of every rule on its own).
	Client BatchClient
	// Replicas returns the number of live gateway replicas (N) the local
	// buckets divide the rules by. Default: 1.
	Replicas func() int
	// Clock is the local clock (local buckets and the cache). Default
	// time.Now.
	Clock func() time.Time

	// Timeout is how long Redis may stay silent after a call was written
	// before the call fails (--redis-timeout). Default 5ms.
	Timeout time.Duration
	// MaxWait bounds one decision's wait for Redis, queueing in the gateway
	// included (--redis-max-wait); a late answer is waited for up to it.
	// Default 100ms.
	MaxWait time.Duration
	// Coalesce lets requests for one bucket share a script call; false sends
	// one call per request (the classic design).
	Coalesce bool
	// Pipelines is the number of pipelines in flight at once. Default 4; at
	// least 64 without coalescing (one call per request).
	Pipelines int
	// PipelinesViaGoRedis sends the pipelines through the client's pool
	// even to a single server (see BatcherOptions.ViaGoRedis).
	PipelinesViaGoRedis bool
	// NoSolo sends every call through the Batcher's workers (see
	// BatcherOptions.NoSolo); by default a decision with nothing queued or
	// in flight is sent by its own goroutine.
	NoSolo bool
	// EmptyBucketCache: after Redis refused a request of a bucket, the
	// Cache answers the requests the script would refuse, each with the
	// script's answer for its cost (see Cache).
	EmptyBucketCache bool
	// PrefetchTTL is how long prefetched tokens, and tokens Redis granted
	// to a call after its request was answered (a stall), stay usable.
	// Default 250ms.
	PrefetchTTL time.Duration

	// FailuresToOpen, OpenFor: see BreakerOptions.
	FailuresToOpen uint32
	OpenFor        time.Duration
	// FailClosedRetryAfter is the Retry-After of fail-closed rejections.
	// Default 1s.
	FailClosedRetryAfter time.Duration
	// Layout is how buckets are stored in Redis (--redis-layout).
	Layout Layout
	// OnStateChange (the worst state of the nodes' breakers), ObserveRedis
	// and ScriptError: see BreakerOptions.
	OnStateChange func(StateChange)
	ObserveRedis  func(time.Duration, error)
	ScriptError   func(b Bucket, err error)
}

// NewChain assembles the chain from opts. Close releases it (not the Redis
// client, which the caller owns); Run probes Redis while the breaker is
// open.
func NewChain(opts ChainOptions) *Chain {
	if opts.Replicas == nil {
		opts.Replicas = func() int { return 1 }
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 100 * time.Millisecond
	}
	if opts.FailClosedRetryAfter <= 0 {
		opts.FailClosedRetryAfter = time.Second
	}
	c := &Chain{opts: opts, local: NewLocal(LocalOptions{Replicas: opts.Replicas, Clock: opts.Clock})}
	if opts.Client == nil {
		return c
	}
	workers := opts.Pipelines
	if !opts.Coalesce {
		workers = max(workers, 64)
	}
	// One PING bound for the Batcher's "silent or late?" check and the
	// breaker's probes.
	ping := max(50*time.Millisecond, opts.Timeout)
	c.batcher = NewBatcher(opts.Client, BatcherOptions{
		Workers: workers, NoCoalesce: !opts.Coalesce, Timeout: opts.Timeout, PingTimeout: ping,
		ExecTimeout: max(time.Second, 2*opts.MaxWait), Layout: opts.Layout, MaxWait: opts.MaxWait,
		ViaGoRedis: opts.PipelinesViaGoRedis, NoSolo: opts.NoSolo, Late: c.keepLate,
	})
	c.mirror = NewMirror(c.local, c.batcher)
	c.breaker = NewBreakers(c.mirror, opts.Client, c.batcher, BreakerOptions{
		FailuresToOpen: opts.FailuresToOpen, MinFailingFor: max(25*time.Millisecond, opts.Timeout), OpenFor: opts.OpenFor,
		ProbeTimeout:  ping,
		OnStateChange: opts.OnStateChange, ObserveRedis: opts.ObserveRedis, ScriptError: opts.ScriptError,
	})
	c.cache = NewCache(c.breaker, CacheOptions{
		TTL: opts.PrefetchTTL, NoEmptyCache: !opts.EmptyBucketCache, Clock: opts.Clock, MaxWait: opts.MaxWait,
		NextBoundsWait: true,
	})
	return c
}

// keepLate is the Batcher's Late handler: the Cache keeps the tokens of
// its calls that Redis granted after their requests were answered. It is
// set before any Take can reach the Batcher.
func (c *Chain) keepLate(b *Bucket, r TakeResult) { c.cache.KeepLate(b, r) }

// Allow implements Limiter; the error is always nil.
func (c *Chain) Allow(ctx context.Context, b Bucket, cost int64) (Outcome, error) {
	if c.cache == nil {
		return c.local.Decide(b, cost), nil
	}
	// What the local fallback admitted against the quota rides along.
	c.mirror.owing(&b)
	r, err := c.cache.Take(ctx, b, cost, cost) // bounded by MaxWait
	if err != nil {
		return c.failed(b, cost, err), nil
	}
	d := r.outcome(cost)
	if d.Allowed {
		d.taken = taken{from: takenRedis, cost: cost, quotaStart: r.Quota.Start}
		if r.Cached {
			d.taken.from = takenCache
		}
	}
	return d, nil
}

// failed decides a request of cost on b whose call to Redis failed with
// err, by the bucket's failure mode.
func (c *Chain) failed(b Bucket, cost int64, err error) Outcome {
	local := errors.Is(err, ErrOpen) || redisGone(err) || IsScriptError(err) || isTryAgain(err)
	if !local {
		// The bucket is in use and its state unknown: should Redis be
		// found down, its local bucket starts empty, not full.
		c.mirror.unsure(b)
	}
	return c.fallback(b, cost, local)
}

// fallback decides by the bucket's failure mode; local says Redis cannot
// decide for b (its breaker is open, Redis is gone, the script fails on b,
// or b's slot is being migrated and Redis refused the call unrun), so a
// LocalFallback rule's local bucket does.
func (c *Chain) fallback(b Bucket, cost int64, local bool) Outcome {
	switch b.FailureMode {
	case snapshot.FailOpen:
		return Outcome{Allowed: true, Remaining: int64(b.Capacity), Source: SourceFailOpen}
	case snapshot.FailClosed:
		return Outcome{RetryAfter: c.opts.FailClosedRetryAfter, Source: SourceFailClosed}
	}
	if local {
		return c.local.Decide(b, cost)
	}
	return Outcome{RetryAfter: time.Second, Source: SourceLocal}
}

// Run probes Redis in the background while the breaker is open, until ctx
// ends. It returns at once for a local-only chain.
func (c *Chain) Run(ctx context.Context) error {
	if c.breaker != nil {
		c.breaker.Run(ctx)
	}
	return nil
}

// Close stops the batcher's workers. Safe to call more than once.
func (c *Chain) Close() error {
	if c.batcher != nil {
		return c.batcher.Close()
	}
	return nil
}

// Stats are the Redis round trips, script calls and decisions sent.
func (c *Chain) Stats() (roundTrips, commands, decisions int64) {
	if c.batcher == nil {
		return 0, 0, 0
	}
	return c.batcher.Stats()
}

// SoloSends is how many decisions so far were sent by their own goroutine
// (BatcherOptions.SoloGap) rather than through the Batcher's workers.
func (c *Chain) SoloSends() int64 {
	if c.batcher == nil {
		return 0
	}
	return c.batcher.soloSends.Load()
}

// State is the breaker's state ("" for a local-only chain).
func (c *Chain) State() string {
	if c.breaker == nil {
		return ""
	}
	return c.breaker.State()
}

// Down reports whether the breaker of the Redis node that holds key is
// open (or probing): calls on key fail at once (see Breakers.Down). Always
// false for a local-only chain.
func (c *Chain) Down(ctx context.Context, key string) bool {
	return c.breaker != nil && c.breaker.Down(ctx, key)
}

// LastError is Redis's most recent error, for logs (a StateChange
// carries it too).
func (c *Chain) LastError() error {
	if c.breaker == nil {
		return nil
	}
	return c.breaker.LastError()
}

// Waited is the number of calls that went to Redis.
func (c *Chain) Waited() int64 {
	if c.breaker == nil {
		return 0
	}
	return c.breaker.Waited()
}

// redisGone reports whether err says Redis is not there: the connection
// could not be made, or Redis closed it (the process died or restarted).
// Such a call took no token (barring a crash in the instant between running
// it and answering), so the local bucket decides at once.
func redisGone(err error) bool {
	var op *net.OpError
	return (errors.As(err, &op) && op.Op == "dial") || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}
