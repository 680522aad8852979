package limiter

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batcher is a Taker that saves Redis round trips under load:
//
//   - requests queued for the same bucket with cost 1 share one script call
//     that takes as many tokens as there are requests (the first ones get
//     them), so a hot bucket costs one call per batch, not per request;
//   - calls for different buckets go to Redis together in one pipeline.
//
// Workers take whatever is queued, send it as one pipeline and take the next
// batch when it returns, so at low load a request is sent at once (a batch of
// one) and at high load batches grow instead of queues. Decisions stay exact:
// every granted token was taken in Redis.
type Batcher struct {
	client BatchClient
	queue  chan *op
	opts   BatcherOptions
	// closed is closed by Close; queue never is, so a Take racing with
	// Close (a breaker probe still in flight at shutdown) gets ErrClosed
	// instead of a send on a closed channel.
	closed    chan struct{}
	closeOnce sync.Once

	roundTrips, commands, decisions atomic.Int64
}

// BatchClient is the part of a go-redis client the Batcher uses; single
// node, Sentinel and Cluster clients satisfy it (a Cluster pipeline is split
// by node).
type BatchClient interface {
	Client
	Pipeline() redis.Pipeliner
}

// BatcherOptions configure a Batcher.
type BatcherOptions struct {
	// Workers is the number of pipelines in flight at once. Default 4.
	Workers int
	// MaxBatch bounds the requests in one pipeline. Default 256.
	MaxBatch int
	// ExecTimeout bounds one pipeline. Requests give up earlier, on their
	// own deadline. Default 1s.
	ExecTimeout time.Duration
}

// op is one queued Take.
type op struct {
	b          Bucket
	cost, want int64
	res        TakeResult
	err        error
	done       chan struct{}
}

// NewBatcher starts a Batcher's workers; Close stops them.
func NewBatcher(client BatchClient, opts BatcherOptions) *Batcher {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.ExecTimeout <= 0 {
		opts.ExecTimeout = time.Second
	}
	bt := &Batcher{client: client, queue: make(chan *op, 4*opts.MaxBatch), opts: opts, closed: make(chan struct{})}
	for range opts.Workers {
		go bt.work()
	}
	return bt
}

// ErrClosed is returned by Takes on a closed Batcher.
var ErrClosed = errors.New("limiter: batcher closed")

// Close stops the workers: pipelines in flight finish, Takes still queued
// and any later Take fail with ErrClosed. Safe to call more than once and
// concurrently with Take.
func (bt *Batcher) Close() { bt.closeOnce.Do(func() { close(bt.closed) }) }

// Ping checks that Redis answers; it implements Pinger.
func (bt *Batcher) Ping(ctx context.Context) error { return bt.client.Ping(ctx).Err() }

// Take implements Taker.
func (bt *Batcher) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	o := &op{b: b, cost: cost, want: want, done: make(chan struct{})}
	select {
	case <-bt.closed:
		return TakeResult{}, ErrClosed
	default:
	}
	select {
	case bt.queue <- o:
	case <-bt.closed:
		return TakeResult{}, ErrClosed
	case <-ctx.Done():
		return TakeResult{}, ctx.Err()
	}
	select {
	case <-o.done:
		return o.res, o.err
	case <-bt.closed:
		// Queued after the workers stopped, or in a pipeline that may
		// still finish: either way no answer is coming in time.
		return TakeResult{}, ErrClosed
	case <-ctx.Done():
		// The call may still run in Redis; its tokens are then lost, which
		// errs on the side of admitting less.
		return TakeResult{}, ctx.Err()
	}
}

// Allow implements Limiter.
func (bt *Batcher) Allow(ctx context.Context, b Bucket, cost int64) (Decision, error) {
	r, err := bt.Take(ctx, b, cost, cost)
	if err != nil {
		return Decision{}, err
	}
	return r.Decision(b, cost), nil
}

// Stats returns the pipelines sent, script calls in them, and the Takes they
// answered.
func (bt *Batcher) Stats() (roundTrips, commands, decisions int64) {
	return bt.roundTrips.Load(), bt.commands.Load(), bt.decisions.Load()
}

func (bt *Batcher) work() {
	batch := make([]*op, 0, bt.opts.MaxBatch)
	for {
		var o *op
		select {
		case o = <-bt.queue:
		case <-bt.closed:
			return
		}
		batch = append(batch[:0], o)
	fill:
		for len(batch) < bt.opts.MaxBatch {
			select {
			case o := <-bt.queue:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		bt.send(batch)
	}
}

// call is one script call: a group of ops on one bucket.
type call struct {
	ops  []*op
	cmd  *redis.Cmd
	cost int64
	want int64
}

// send groups a batch into script calls, pipelines them and answers the ops.
func (bt *Batcher) send(batch []*op) {
	var calls []*call
	byKey := map[string]*call{}
	for _, o := range batch {
		// Single-token requests on one bucket share a call; anything else
		// (a prefetch, a cost above one) gets its own.
		if o.cost == 1 && o.want == 1 {
			if c := byKey[o.b.Key]; c != nil && c.ops[0].b == o.b {
				c.ops = append(c.ops, o)
				c.want++
				continue
			}
			c := &call{ops: []*op{o}, cost: 1, want: 1}
			byKey[o.b.Key] = c
			calls = append(calls, c)
			continue
		}
		calls = append(calls, &call{ops: []*op{o}, cost: o.cost, want: o.want})
	}
	ctx, cancel := context.WithTimeout(context.Background(), bt.opts.ExecTimeout)
	defer cancel()
	err := bt.exec(ctx, calls, false)
	if err != nil && isNoScript(err) {
		// Redis lost its scripts (restart, failover, SCRIPT FLUSH): send the
		// batch again with EVAL, which carries the script and caches it for
		// the next EVALSHA. A NOSCRIPT call did not run, so nothing counts
		// twice.
		err = bt.exec(ctx, calls, true)
	}
	bt.decisions.Add(int64(len(batch)))
	for _, c := range calls {
		bt.answer(c, err)
	}
}

// exec sends one pipeline of script calls, by SHA or with the script.
func (bt *Batcher) exec(ctx context.Context, calls []*call, withScript bool) error {
	pipe := bt.client.Pipeline()
	for _, c := range calls {
		b := c.ops[0].b
		args := []any{b.Capacity, b.RefillTokens, b.RefillPeriodMs, c.cost, c.want}
		if withScript {
			c.cmd = tokenBucket.Eval(ctx, pipe, []string{b.Key}, args...)
		} else {
			c.cmd = tokenBucket.EvalSha(ctx, pipe, []string{b.Key}, args...)
		}
	}
	bt.roundTrips.Add(1)
	bt.commands.Add(int64(len(calls)))
	_, err := pipe.Exec(ctx)
	if err != nil {
		for _, c := range calls {
			if e := c.cmd.Err(); e != nil && isNoScript(e) {
				return e
			}
		}
	}
	return err
}

// answer hands the result of a call to its ops: with several ops sharing a
// call, the first ones get the granted tokens.
func (bt *Batcher) answer(c *call, execErr error) {
	var res TakeResult
	err := c.cmd.Err()
	if err == nil {
		var vals []int64
		vals, err = c.cmd.Int64Slice()
		if err == nil && len(vals) != 4 {
			err = errors.New("token bucket script: unexpected reply")
		}
		if err == nil {
			res = TakeResult{Granted: vals[0], Remaining: vals[1], WaitMs: vals[2], ResetMs: vals[3]}
		}
	} else if execErr != nil && !errors.Is(err, execErr) {
		err = errors.Join(err, execErr)
	}
	if len(c.ops) == 1 {
		o := c.ops[0]
		o.res, o.err = res, err
		close(o.done)
		return
	}
	for i, o := range c.ops {
		o.err = err
		if err == nil {
			o.res = TakeResult{Remaining: res.Remaining, ResetMs: res.ResetMs}
			if int64(i) < res.Granted {
				o.res.Granted = 1
			} else {
				// The bucket ran dry within this batch; the script's wait
				// is the time until the next token.
				o.res.WaitMs = res.WaitMs
			}
		}
		close(o.done)
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
