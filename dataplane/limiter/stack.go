package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/lua"
)

// Want is one bucket of an all-or-nothing decision (Chain.AllowAll): a
// request's limit, the tokens it needs, and whether its refusal refuses
// the request (Shadow: a limit that only reports).
type Want struct {
	Bucket Bucket
	Cost   int64
	Shadow bool
}

// AllowAll decides the buckets of ws together, in one script call
// (lua/token_bucket_stack.lua), when it can: every enforcing bucket admits
// and each gives its cost, or none gives anything and refused is the
// first enforcing bucket that refused (-1: none did). Each Outcome is its
// bucket's: what it has left and, refused, its Retry-After; a bucket that
// would have admitted a request another refused is Allowed with nothing
// taken (Taken is 0). A refused request thus never holds another limit's
// tokens, even for a moment.
//
// ok is false, and nothing was taken, when ws cannot be decided in one
// call (oneCall: a bucket the Cache or the local fallback decides, or
// buckets in different Cluster slots), when the Cache refuses the first
// bucket without Redis (Allow, in order, then costs no call: a flood on a
// spent limit stays off Redis), when the node's breaker is open,
// or when the call failed: the caller then decides the buckets one at a
// time (Allow), which applies each rule's failure mode. The call is
// bounded by MaxWait, passes the breaker of the node that holds the slot
// and the Mirror, and goes to Redis through go-redis (MOVED and ASK
// followed; NOSCRIPT answered with the script's text): one round trip of
// its own, not pipelined or coalesced with the Batcher's calls (for an
// admitted stack, BenchmarkDecideStack measures more CPU and allocations
// per decision than two pipelined takes; a refused one saves the refund).
// Sending these calls in the Batcher's pipelines is left to do.
func (c *Chain) AllowAll(ctx context.Context, ws []Want) (outs []Outcome, refused int, ok bool) {
	if c.cache == nil || !oneCall(ws, c.breaker.cluster != nil) {
		return nil, -1, false
	}
	if !ws[0].Shadow && c.cache.refuses(&ws[0].Bucket, ws[0].Cost) {
		return nil, -1, false // Allow refuses it without Redis
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.MaxWait)
	defer cancel()
	br, node := c.breaker.forKey(ctx, ws[0].Bucket.Key)
	done, err := br.enter()
	if err != nil {
		return nil, -1, false
	}
	start := time.Now()
	rs, refused, err := c.mirror.takeAll(ctx, c.batcher, node, ws)
	br.leave(ctx, ws[0].Bucket, start, err, done)
	if err != nil {
		return nil, -1, false
	}
	outs = make([]Outcome, len(ws))
	for i := range ws {
		if i == refused {
			c.cache.learnRefusal(ws[i].Bucket, rs[i])
		} else {
			c.cache.learn(ws[i].Bucket, rs[i])
		}
		outs[i] = rs[i].outcome(ws[i].Cost)
		if outs[i].Allowed && refused < 0 {
			outs[i].taken = taken{from: takenRedis, cost: ws[i].Cost}
		}
	}
	return outs, refused, true
}

// refuses reports whether the Cache would refuse a Take of cost on b
// itself (the empty-bucket cache), without Redis.
func (c *Cache) refuses(b *Bucket, cost int64) bool {
	sh := c.shard(b.Key)
	now := c.opts.Clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.entries[b.Key]; e != nil && e.matches(b) && now.Before(e.refuseUntil) {
		_, ok := e.refusal(b, cost, now)
		return ok
	}
	return false
}

// learnRefusal records Redis's refusal r of bucket b in an all-or-nothing
// call, as Take records one: the Cache answers the bucket's next refusals
// itself.
func (c *Cache) learnRefusal(b Bucket, r TakeResult) {
	sh := c.shard(b.Key)
	now := c.opts.Clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(b, now, c.opts.MaxEntries)
	e.observe(&b, &r, now)
	if !c.opts.NoEmptyCache && r.state.nowMs > 0 {
		e.refuse(&r, now)
	}
}

// AllowAll is Chain.AllowAll for the local buckets: never in one call
// (ok is false), so each limit is decided by Decide, one at a time.
func (l *Local) AllowAll(context.Context, []Want) ([]Outcome, int, bool) { return nil, -1, false }

// oneCall reports whether ws can be decided in one script call: plain
// takes of one request each (a cost of at least 1; no quota, shards,
// prefetch batch, fractions of a token or charge: those buckets have
// state outside the bucket's field, in this gateway or in other keys),
// each bucket once, and, in a Cluster, every key in one slot.
func oneCall(ws []Want, cluster bool) bool {
	if len(ws) == 0 {
		return false
	}
	slot := -1 // of every key, in a Cluster
	for i := range ws {
		b := &ws[i].Bucket
		if ws[i].Cost < 1 || b.Quota.Key != "" || b.Shards > 1 || b.Prefetch > 1 || b.Unit > 1 || b.Charge {
			return false
		}
		if cluster {
			s, whole := bucketSlot(b.Key)
			if !whole || slot >= 0 && int(s) != slot {
				return false
			}
			slot = int(s)
		}
		for j := range i {
			if ws[j].Bucket.Key == b.Key {
				return false // one bucket twice: the script checks each alone
			}
		}
	}
	return true
}

// takeAll is Take for the buckets of one all-or-nothing call, sent by bt
// to node: Local hears of each bucket as of a call of its own (Sending,
// then Observe, or unanswered).
func (m *Mirror) takeAll(ctx context.Context, bt *Batcher, node string, ws []Want) ([]TakeResult, int, error) {
	for i := range ws {
		m.local.Sending(ws[i].Bucket)
	}
	rs, refused, err := bt.takeAll(ctx, node, ws)
	for i := range ws {
		if err != nil {
			m.unanswered(ws[i].Bucket, err)
		} else {
			m.local.Observe(ws[i].Bucket, rs[i].Remaining)
		}
	}
	return rs, refused, err
}

// tokenBucketStack is the embedded script of stacked limits, sent by SHA
// and, on NOSCRIPT, once more with its text.
var (
	tokenBucketStack    = redis.NewScript(lua.TokenBucketStack)
	tokenBucketStackSHA = tokenBucketStack.Hash()
)

// takeAll sends the call of ws to node (the Cluster routes it by its
// first key) through go-redis, with a deadline in Redis time from ctx's,
// and reads its reply.
func (bt *Batcher) takeAll(ctx context.Context, node string, ws []Want) ([]TakeResult, int, error) {
	select {
	case <-bt.closed:
		return nil, -1, ErrClosed
	default:
	}
	var deadlineMs int64
	if d, ok := ctx.Deadline(); ok {
		deadlineMs = bt.clock.DeadlineAt(d, deadlineSlackMs)
	}
	if !bt.stackLoaded.Load() {
		bt.loadStack()
	}
	keys, args := stackCall(ws, deadlineMs, bt.opts.Layout)
	var cmd *redis.Cmd
	for _, withText := range [2]bool{false, true} {
		v := append([]any{"evalsha", tokenBucketStackSHA, len(keys)}, keys...)
		if withText {
			v[0], v[1] = "eval", lua.TokenBucketStack
		}
		cmd = redis.NewCmd(ctx, append(v, args...)...)
		cmd.SetFirstKeyPos(3)
		pipe := bt.client.Pipeline()
		_ = pipe.Process(ctx, noRetry{cmd}) // noRetry: a call that ran is never sent again
		_, _ = pipe.Exec(ctx)
		bt.roundTrips.Add(1)
		bt.commands.Add(1)
		if !isNoScript(cmd.Err()) {
			break
		}
		bt.stackLoaded.Store(false)
		bt.loadStack()
	}
	bt.decisions.Add(int64(len(ws)))
	rs, refused, now, err := parseStack(cmd, len(ws))
	if now > 0 {
		bt.heard(node)
		bt.clock.Observe(now, time.Now())
	} else if err != nil && !isNetworkError(cmd.Err()) {
		bt.heard(node) // a Redis error reply is a sign of life too
	}
	return rs, refused, err
}

// loadStack loads the stacked-limits script into Redis (every node of a
// Cluster) in the background, bounded by ExecTimeout rather than by a
// request's MaxWait: before the first call, and after Redis answered
// NOSCRIPT (a restart, a failover, SCRIPT FLUSH). When Redis is slow,
// every call's EVALSHA may use up its wait before the NOSCRIPT reply or
// the EVAL after it, and without a load of its own no later call would
// find the script there either (the Batcher's pipelines resend their
// script the same way, past their callers' deadlines). One load at a
// time; a failed one is tried again by the next call.
func (bt *Batcher) loadStack() {
	if !bt.loadingStack.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer bt.loadingStack.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), bt.opts.ExecTimeout)
		defer cancel()
		if bt.client.ScriptLoad(ctx, lua.TokenBucketStack).Err() == nil {
			bt.stackLoaded.Store(true)
		}
	}()
}

// stackCall is the KEYS and ARGV of lua/token_bucket_stack.lua for ws.
func stackCall(ws []Want, deadlineMs int64, layout Layout) (keys []any, args []any) {
	compat := "0"
	if layout == LayoutCompat {
		compat = "1"
	}
	keys = make([]any, 0, 2*len(ws))
	args = make([]any, 0, 3+6*len(ws))
	args = append(args, len(ws), deadlineMs, compat)
	for i := range ws {
		b := &ws[i].Bucket
		hash, field := Storage(b.Key)
		keys = append(keys, hash, b.Key)
		enforce := "1"
		if ws[i].Shadow {
			enforce = "0"
		}
		args = append(args, b.Capacity, b.RefillTokens, b.RefillPeriodMs, ws[i].Cost, field, enforce)
	}
	return keys, args
}

// parseStack reads the stack script's reply {refused, n x 8 integers}
// into one TakeResult per bucket and the refused bucket (0-based, -1:
// none), with Redis's time; a call that reached Redis after its deadline
// fails with context.DeadlineExceeded (it took nothing). Errors never
// quote a key.
func parseStack(cmd *redis.Cmd, n int) ([]TakeResult, int, int64, error) {
	vals, err := cmd.Int64Slice()
	if err != nil {
		return nil, -1, 0, fmt.Errorf("token bucket stack script: %w", err)
	}
	if len(vals) == 5 && vals[0] < 0 {
		return nil, -1, vals[4], context.DeadlineExceeded
	}
	if len(vals) != 1+8*n || vals[0] < 0 || vals[0] > int64(n) {
		return nil, -1, 0, fmt.Errorf("token bucket stack script: %d values in reply, want %d", len(vals), 1+8*n)
	}
	rs := make([]TakeResult, n)
	var now int64
	for i := range rs {
		if rs[i], now, err = parseInts(vals[1+8*i : 9+8*i]); err != nil {
			return nil, -1, 0, err
		}
	}
	return rs, int(vals[0]) - 1, now, nil
}
