package limiter

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// worker sends one pipeline at a time; what it reuses from one pipeline to
// the next is its own.
type worker struct {
	bt    *Batcher
	batch []*op
	// pipe is the worker's own connection to a single server; nil: the
	// pipelines go through go-redis, with the calls' commands in cmds.
	pipe *pipe
	cmds []scriptCmd
}

func (w *worker) run() {
	bt := w.bt
	defer func() {
		if w.pipe != nil {
			w.pipe.close()
		}
	}()
	for {
		var o *op
		select {
		case o = <-bt.queue:
		case <-bt.closed:
			return
		}
		w.batch = append(w.batch[:0], o)
	fill:
		for len(w.batch) < bt.opts.MaxBatch {
			select {
			case o := <-bt.queue:
				w.batch = append(w.batch, o)
			default:
				break fill
			}
		}
		w.send(w.batch)
		clear(w.batch)
	}
}

// send pipelines a batch's calls and answers their ops. A watchdog fails the
// ops early when Redis stays silent for Timeout after the pipeline was
// written.
func (w *worker) send(batch []*op) {
	bt := w.bt
	bt.inFlight.Add(1)
	defer bt.inFlight.Add(-1)
	sent := time.Now()
	calls := bt.group(batch, sent)
	if len(calls) == 0 {
		return
	}
	var finished atomic.Bool
	watchdog := time.AfterFunc(bt.opts.Timeout, func() { bt.watch(calls, sent, sent.Add(bt.opts.Timeout), &finished) })
	defer watchdog.Stop()

	deadline := sent.Add(bt.opts.ExecTimeout)
	w.exec(calls, passFirst, deadline)
	// Redis lost its scripts (restart, failover, SCRIPT FLUSH) where some
	// calls went: send those again with EVAL, which carries the script and
	// caches it for the next EVALSHA. A NOSCRIPT call did not run, so
	// nothing counts twice; calls that ran are not sent again.
	w.exec(calls, passNoScript, deadline)
	if anyTryAgain(calls) {
		// Sent again apart, so that this worker goes on with the next
		// pipeline: a migration must not stall every other bucket's calls.
		now := time.Now()
		for i := range calls {
			if calls[i].retried = isTryAgain(calls[i].err); !calls[i].retried {
				bt.answer(&calls[i], now)
			}
		}
		go bt.retryTryAgain(calls, sent.Add(bt.opts.MaxWait), deadline, &finished)
		return
	}
	finished.Store(true)
	now := time.Now()
	for i := range calls {
		bt.answer(&calls[i], now)
	}
}

// retryTryAgain sends again, on a goroutine of its own, the calls a slot
// in migration answered TRYAGAIN (Redis refuses a call of several keys
// there, before running it, unless all of them exist: the bucket's hash
// with its 0.1 key or a quota's counters), after a pause that doubles from
// 1ms to 10ms, until they run or until their callers stop waiting (by
// until); a new owner of the slot may lack the script, so each round has
// its NOSCRIPT pass too. Such a call did not run: sending it again counts
// nothing twice. It then answers them (one still refused fails with its
// TRYAGAIN) and marks the batch finished for the watchdog. The other
// calls of the batch were answered already.
func (bt *Batcher) retryTryAgain(calls []call, until, deadline time.Time, finished *atomic.Bool) {
	w := &worker{bt: bt} // go-redis's pool: only a Cluster answers TRYAGAIN
	for wait := time.Millisecond; anyTryAgain(calls); wait = min(2*wait, 10*time.Millisecond) {
		if time.Now().Add(wait).After(until) {
			break
		}
		time.Sleep(wait)
		w.exec(calls, passTryAgain, deadline)
		w.exec(calls, passNoScript, deadline)
	}
	finished.Store(true)
	now := time.Now()
	for i := range calls {
		if calls[i].retried {
			bt.answer(&calls[i], now)
		}
	}
}

// anyTryAgain reports whether Redis answered TRYAGAIN to one of calls.
func anyTryAgain(calls []call) bool {
	for i := range calls {
		if isTryAgain(calls[i].err) {
			return true
		}
	}
	return false
}

// exec sends one pipeline of the script calls due in pass ps (by SHA, or
// with the script's text to resend those Redis answered NOSCRIPT; nothing
// when none is due), on the worker's own connection or through go-redis,
// all before deadline.
func (w *worker) exec(calls []call, ps pass, deadline time.Time) {
	bt := w.bt
	var n int
	if w.pipe != nil {
		n = w.pipe.exec(calls, ps, bt.opts.Layout, deadline)
	} else {
		n = w.execRedis(calls, ps, deadline)
	}
	bt.counted(n, ps)
}

// counted counts a pipeline of n script calls of pass ps (none: nothing
// was sent).
func (bt *Batcher) counted(n int, ps pass) {
	if n > 0 {
		bt.roundTrips.Add(1)
		bt.commands.Add(int64(n))
		if ps == passNoScript {
			bt.stackLoaded.Store(false) // Redis lost the stack script too
		}
	}
}

// execRedis is exec through go-redis (a Cluster, or Sentinel); it returns
// the number of calls sent.
func (w *worker) execRedis(calls []call, ps pass, deadline time.Time) int {
	var pipe redis.Pipeliner
	n := 0
	for i := range calls {
		if calls[i].due(ps) {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if cap(w.cmds) < n {
		w.cmds = make([]scriptCmd, n)
	}
	cmds := make([]*redis.Cmd, 0, n)
	for i := range calls {
		c := &calls[i]
		if !c.due(ps) {
			continue
		}
		if pipe == nil {
			pipe = w.bt.client.Pipeline()
		}
		cmd := w.cmds[:n][len(cmds)].command(ctx, &c.ops[0].b, c.cost, c.want, c.deadlineMs, w.bt.opts.Layout, ps == passNoScript)
		cmds = append(cmds, cmd)
		// noRetry: go-redis must not send the pipeline again itself.
		_ = pipe.Process(ctx, noRetry{cmd}) // queued; Exec answers it
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	k := 0
	for i := range calls {
		c := &calls[i]
		if !c.due(ps) {
			continue
		}
		c.n, c.err = int64s(cmds[k], &c.reply)
		k++
	}
	clear(w.cmds[:n]) // no bucket's strings kept alive until the next pipeline
	return n
}

// isNetworkError reports whether err came from the connection rather than
// from Redis.
func isNetworkError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
