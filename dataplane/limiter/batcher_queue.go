package limiter

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// op states.
const (
	opQueued int32 = iota
	opSent
	opAbandoned // given up while queued: never sent
)

// op is one queued Take.
type op struct {
	b          Bucket
	cost, want int64
	deadlineMs int64     // Redis time; 0: none
	expires    time.Time // MaxWait's deadline, for the waitList
	state      atomic.Int32
	sentAt     atomic.Int64 // unix ns, set before state becomes opSent
	// finished is set by whoever answers first: the worker (a reply), the
	// watchdog (Redis silent) or the caller (gave up).
	finished atomic.Bool
	res      TakeResult
	err      error
	done     chan struct{}
	// late, when set, receives a successful reply that arrived after the
	// op was answered otherwise (prefetched tokens must not be lost): the
	// Batcher's Late for a bucket that keeps late replies.
	late LateFunc
}

// finish answers o unless it was answered already; it reports whether it
// did.
func (o *op) finish(res TakeResult, err error) bool {
	if !o.finished.CompareAndSwap(false, true) {
		return false
	}
	o.res, o.err = res, err
	close(o.done)
	return true
}

// LateFunc receives a successful reply for bucket b that arrived after its
// Take had returned. It is one function for all buckets (the bucket is an
// argument), set once when the Batcher is made.
type LateFunc func(b *Bucket, r TakeResult)

// Take implements Taker. A successful reply that arrives after Take
// returned goes to the Late handler, if b keeps late replies.
func (bt *Batcher) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	o := &op{b: b, cost: cost, want: want, done: make(chan struct{})}
	if b.keepsLate {
		o.late = bt.opts.Late
	}
	select {
	case <-bt.closed:
		return TakeResult{}, ErrClosed
	default:
	}
	deadline, ok := ctx.Deadline()
	if mw := bt.opts.MaxWait; mw > 0 && (!ok || time.Until(deadline) > mw) {
		deadline, ok = bt.await(o), true
	}
	if ok {
		o.deadlineMs = bt.clock.DeadlineAt(deadline, deadlineSlackMs)
	}
	if w := bt.trySolo(); w != nil {
		return bt.takeSolo(ctx, w, o)
	}
	select {
	case bt.queue <- o:
	case <-bt.closed:
		return TakeResult{}, ErrClosed
	case <-ctx.Done():
		return TakeResult{}, errors.Join(ErrNotSent, ctx.Err())
	case <-o.done: // MaxWait, while the queue was full
		return o.res, o.err
	}
	return bt.wait(ctx, o)
}

// wait waits for the answer to o, sent or queued, within ctx.
func (bt *Batcher) wait(ctx context.Context, o *op) (TakeResult, error) {
	select {
	case <-o.done:
		return o.res, o.err
	case <-bt.closed:
		// Queued after the workers stopped, or in a pipeline that may
		// still finish: either way no answer is coming in time.
		o.state.CompareAndSwap(opQueued, opAbandoned)
		if o.finish(TakeResult{}, ErrClosed) {
			return TakeResult{}, ErrClosed
		}
		<-o.done
		return o.res, o.err
	case <-ctx.Done():
		bt.giveUp(o, ctx.Err())
		<-o.done // by giveUp, or answered at the same moment
		return o.res, o.err
	}
}

// giveUp answers o with cause (its caller stops waiting: its context ended,
// or MaxWait passed), said more precisely when it can be: never sent, or
// sent and Redis silent since. Nothing when o was answered already.
func (bt *Batcher) giveUp(o *op, cause error) {
	err := cause
	switch {
	case o.state.CompareAndSwap(opQueued, opAbandoned):
		err = errors.Join(ErrNotSent, err)
	case bt.lastHeard(o.b.node) < o.sentAt.Load():
		// Written, and Redis has sent nothing since.
		err = errors.Join(ErrRedisSilent, err)
	}
	o.finish(TakeResult{}, err)
}

// pass is one round of a batch's pipelines: the first sends every call;
// the others send again only the calls that did not run (sendPass).
type pass uint8

const (
	// passFirst sends every call, by SHA.
	passFirst pass = iota
	// passNoScript sends again, with the script's text, the calls Redis
	// answered NOSCRIPT (it lost its scripts: a restart, a failover,
	// SCRIPT FLUSH, a new Cluster master).
	passNoScript
	// passTryAgain sends again, by SHA, the calls Redis answered TRYAGAIN
	// (a slot in migration refused a call of several keys before running
	// it).
	passTryAgain
)

// due reports whether c goes in a pipeline of pass p: every call the
// first time, later only those that did not run for the pass's reason.
func (c *call) due(p pass) bool {
	switch p {
	case passNoScript:
		return isNoScript(c.err)
	case passTryAgain:
		return isTryAgain(c.err)
	}
	return true
}

// call is one script call: a group of ops on one bucket, and its reply.
type call struct {
	ops        []*op
	one        [1]*op // ops of a call of one op, without an allocation
	cost, want int64
	deadlineMs int64
	// The reply: n integers, or err (as the connection or Redis gave it:
	// a network error, NOSCRIPT, a script error).
	reply replyInts
	n     int
	err   error
	// retried: Redis answered TRYAGAIN, and the call is sent again apart
	// (Batcher.retryTryAgain), which answers it.
	retried bool
}

// group turns a batch into script calls, leaving out ops whose caller gave
// up while they were queued. Single-token requests on one bucket share a
// call (unless NoCoalesce); anything else (a prefetch, a cost above one, a
// charge) gets its own. The calls are one allocation (pointers to its
// elements stay valid: it never grows), since the watchdog may still read
// them after the worker has moved on.
func (bt *Batcher) group(batch []*op, now time.Time) []call {
	calls := make([]call, 0, len(batch))
	var byKey map[string]int // index in calls
	for _, o := range batch {
		o.sentAt.Store(now.UnixNano())
		if !o.state.CompareAndSwap(opQueued, opSent) {
			continue
		}
		shared := !bt.opts.NoCoalesce && o.cost == 1 && o.want == 1 && !o.b.Charge && len(batch) > 1
		if shared {
			if byKey == nil {
				byKey = make(map[string]int, len(batch))
			}
			if i, ok := byKey[o.b.Key]; ok && calls[i].ops[0].b == o.b {
				calls[i].add(o)
				continue
			}
			byKey[o.b.Key] = len(calls)
		}
		calls = append(calls, call{cost: o.cost, want: o.want, deadlineMs: o.deadlineMs})
		c := &calls[len(calls)-1]
		c.one[0] = o
		c.ops = c.one[:]
	}
	return calls
}

// add makes o share c (one more token, the later of the deadlines).
func (c *call) add(o *op) {
	c.ops = append(c.ops, o)
	c.want++
	if c.deadlineMs != 0 && (o.deadlineMs == 0 || o.deadlineMs > c.deadlineMs) {
		c.deadlineMs = o.deadlineMs
	}
}

// answer hands the result of a call to its ops: with several ops sharing a
// call, the first ones get the granted tokens.
func (bt *Batcher) answer(c *call, now time.Time) {
	res, redisNow, err := c.result()
	res.countIn(&c.ops[0].b, redisNow)
	if redisNow > 0 {
		bt.heard(c.ops[0].b.node)
		bt.clock.Observe(redisNow, now)
	} else if err != nil && !isNetworkError(c.err) {
		bt.heard(c.ops[0].b.node) // a Redis error reply is a sign of life too
	}
	if errors.Is(err, errExpired) {
		err = context.DeadlineExceeded
	}
	bt.decisions.Add(int64(len(c.ops)))
	if len(c.ops) == 1 {
		bt.deliver(c.ops[0], res, err)
		return
	}
	for i, o := range c.ops {
		r := TakeResult{}
		if err == nil {
			r = TakeResult{Remaining: res.Remaining, ResetMs: res.ResetMs, Quota: res.Quota, state: res.state}
			if int64(i) < res.Granted {
				r.Granted = 1
			} else {
				// The bucket ran dry within this batch; the script's wait
				// is the time until the next token.
				r.WaitMs = res.WaitMs
			}
		}
		bt.deliver(o, r, err)
	}
}

// deliver answers o, or hands a successful reply to its late handler when o
// was answered already.
func (bt *Batcher) deliver(o *op, res TakeResult, err error) {
	if !o.finish(res, err) && err == nil && o.late != nil {
		o.late(&o.b, res)
	}
}
