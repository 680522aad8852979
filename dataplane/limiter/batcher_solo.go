package limiter

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// A Take that comes SoloGap or more after the one before and finds nothing
// queued and no pipeline in flight sends its own
// call (a solo send) on the Batcher's solo connection, from its own
// goroutine, instead of handing it to a worker and waiting to be woken:
// at low rates, where every decision is a pipeline of one anyway, that is
// two goroutine hand-offs (the queue, the answer) and the watchdog's timer
// fewer per decision. As soon as a pipeline is in flight, Takes queue as
// before and batches form behind it, so high rates keep their pipelines.
//
// The Take's own goroutine does only what its wait bounds: it writes on
// a connection already open (the write's deadline is the wait's end) and
// waits on the socket for the first byte of the reply at most Timeout,
// and never past its own deadline or MaxWait. Most replies come well
// within it; then it reads the reply and answers itself. Otherwise the
// call goes on exactly as a worker's would, on a goroutine of its own:
// dialling the solo connection (a worker's whole send), reading a reply
// later than that (the watchdog judging Redis from then on, late replies
// going to the Late handler), or resending the script after NOSCRIPT,
// while the Take waits for its answer, MaxWait or its context, as a
// queued Take does (TestSoloKeepsTheWaitBound). Nothing about exactness,
// the wait bound or late replies changes; only who reads the reply.

// soloReady is how long a solo Take waits on the socket itself: Timeout,
// cut to the Take's own deadline.
func (bt *Batcher) soloReady(sent time.Time, o *op, ctx context.Context) time.Time {
	until := sent.Add(bt.opts.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		until = d
	}
	if !o.expires.IsZero() && o.expires.Before(until) {
		until = o.expires
	}
	return until
}

// DefaultSoloGap is BatcherOptions.SoloGap's default: at a steady rate
// under about 2,000 decisions per second a decision is a pipeline of its
// own anyway, and a solo send saves the two hand-offs; above it a worker's
// wake-up gives the next decisions time to join its pipeline, which costs
// less per decision than one round trip each (BenchmarkChainSteady).
const DefaultSoloGap = 500 * time.Microsecond

// trySolo takes the solo connection when the previous Take came at least
// SoloGap ago and nothing is queued or in flight; nil otherwise.
func (bt *Batcher) trySolo() *worker {
	if bt.solo == nil {
		return nil
	}
	now := int64(time.Since(bt.epoch))
	if prev := bt.lastTake.Swap(now); now-prev < int64(bt.opts.SoloGap) || len(bt.queue) > 0 || bt.inFlight.Load() > 0 {
		return nil
	}
	select {
	case w := <-bt.solo:
		return w
	default:
		return nil
	}
}

// releaseSolo gives the solo connection back, or closes it when the
// Batcher was closed meanwhile.
func (bt *Batcher) releaseSolo(w *worker) {
	bt.solo <- w
	select {
	case <-bt.closed:
		bt.closeSolo()
	default:
	}
}

// closeSolo closes the solo connection if it is not in use (a solo send
// in progress closes it when it gives it back).
func (bt *Batcher) closeSolo() {
	if bt.solo == nil {
		return
	}
	select {
	case w := <-bt.solo:
		w.pipe.close()
	default:
	}
}

// takeSolo sends o on w's connection and answers it: itself when the
// reply starts before soloReady, else as a queued Take waits. The Take's
// own goroutine does only what soloReady bounds: the write on a
// connection already open and the wait on the socket. Dialling, a reply
// later than that and a resend after NOSCRIPT go on on a goroutine of
// their own, under the watchdog, while the Take waits for its answer,
// MaxWait or its context, as a queued Take does.
func (bt *Batcher) takeSolo(ctx context.Context, w *worker, o *op) (TakeResult, error) {
	if !w.pipe.open() {
		// A dial is bounded by the dial timeout only: a worker's way, on
		// the solo connection.
		go func() {
			w.send([]*op{o})
			bt.releaseSolo(w)
		}()
		return bt.wait(ctx, o)
	}
	bt.inFlight.Add(1)
	bt.soloSends.Add(1)
	sent := time.Now()
	w.batch = append(w.batch[:0], o)
	calls := bt.group(w.batch, sent)
	clear(w.batch)
	ready, deadline := bt.soloReady(sent, o, ctx), sent.Add(bt.opts.ExecTimeout)
	n, err := w.pipe.send(calls, passFirst, bt.opts.Layout, ready)
	bt.counted(n, passFirst)
	if err == nil && n > 0 {
		err = w.pipe.awaitReply(ready, deadline)
		if errors.Is(err, errNotYet) {
			// Redis is slower than Timeout: a worker's ways from here.
			go bt.finishSolo(w, calls, sent, deadline, true)
			return bt.wait(ctx, o)
		}
	}
	if n > 0 {
		w.pipe.receive(calls, passFirst, err)
	}
	if anyDue(calls, passNoScript) {
		// Redis lost its scripts: the resend carries the script's text
		// and may take longer than this Take may wait.
		go bt.finishSolo(w, calls, sent, deadline, false)
		return bt.wait(ctx, o)
	}
	bt.endSolo(w, calls)
	<-o.done
	return o.res, o.err
}

// finishSolo finishes a solo call whose Take stopped waiting on the
// socket (read: its reply is still to be read) or whose script Redis
// lost, under the watchdog as a worker's pipeline is: the NOSCRIPT pass,
// then the answers.
func (bt *Batcher) finishSolo(w *worker, calls []call, sent, deadline time.Time, read bool) {
	var finished atomic.Bool
	watchdog := time.AfterFunc(time.Until(sent.Add(bt.opts.Timeout)), func() { bt.watch(calls, sent, sent.Add(bt.opts.Timeout), &finished) })
	defer watchdog.Stop()
	if read {
		w.pipe.receive(calls, passFirst, nil)
	}
	w.exec(calls, passNoScript, deadline)
	finished.Store(true) // before the answers: the watchdog must not fail them now
	bt.endSolo(w, calls)
}

// anyDue reports whether a call is due in pass ps.
func anyDue(calls []call, ps pass) bool {
	for i := range calls {
		if calls[i].due(ps) {
			return true
		}
	}
	return false
}

// endSolo answers the calls and gives the connection back.
func (bt *Batcher) endSolo(w *worker, calls []call) {
	now := time.Now()
	for i := range calls {
		bt.answer(&calls[i], now)
	}
	bt.inFlight.Add(-1)
	bt.releaseSolo(w)
}

// errNotYet: no byte of the reply arrived before the solo Take's own wait
// ended; the connection is intact and the reply still to be read.
var errNotYet = errors.New("limiter: reply not started")

// awaitReply waits until the first byte of the next reply is buffered, at
// most until ready; errNotYet when it is not by then (the connection's
// deadline is back at deadline, for whoever reads the reply), any other
// error as the connection gave it.
func (p *pipe) awaitReply(ready, deadline time.Time) error {
	if err := p.conn.SetReadDeadline(ready); err != nil {
		return err
	}
	_, err := p.rd.Peek(1)
	if err2 := p.conn.SetReadDeadline(deadline); err == nil {
		err = err2
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && time.Now().Before(deadline) {
		return errNotYet
	}
	return err
}
