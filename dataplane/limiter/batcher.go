package limiter

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batcher is the Taker the gateway sends its Redis calls through:
//
//   - requests queued for the same bucket with cost 1 share one script call
//     that takes as many tokens as there are requests (the first ones get
//     them), so a hot bucket costs one call per batch, not per request
//     (unless NoCoalesce: then every request is a call of its own, the
//     classic design);
//   - calls for different buckets go to Redis together in one pipeline.
//
// Workers take whatever is queued, send it as one pipeline and take the next
// batch when it returns, so at low load a request is sent at once (a batch of
// one) and at high load batches grow instead of queues.
//
// How long a call waits, and what counts as Redis failing:
//
//   - Time spent queued in the gateway is not Redis's: a request waits for a
//     worker as long as its own context allows, and MaxWait (the chain's),
//     and a request that gives up before its call was written is never
//     sent.
//   - Once a call is written, Timeout measures Redis: when Redis (the node
//     that holds the key) has sent nothing at all, on any connection, for
//     Timeout since the call was written, and the kernel holds no unread
//     reply from it either, the Batcher PINGs it. No answer within
//     PingTimeout fails the call (ErrRedisSilent); an answer means Redis is
//     late, not gone, and the call keeps waiting within its context. A dead
//     Redis thus fails calls after Timeout + PingTimeout.
//   - Every call carries its caller's deadline in Redis time: a call that
//     reaches Redis after its caller gave up (a frozen server resuming) takes
//     nothing.
//
// Decisions stay exact: every granted token was taken in Redis, and no token
// is taken in Redis for a request decided elsewhere, but for calls written
// before their caller gave up and run before its deadline (those tokens are
// lost: fewer admissions, never more).
type Batcher struct {
	client BatchClient
	// direct, when set, is how workers open connections of their own to
	// the one Redis server (see pipe); nil: pipelines go through client.
	direct *directOptions
	queue  chan *op
	opts   BatcherOptions
	clock  redisClock
	// conns are the open connections to Redis (*heardConn keys).
	conns sync.Map
	// nodes maps a node's address ("" for a single server) to its
	// *nodeState; nodeClients a Cluster node's address to its *redis.Client.
	nodes, nodeClients sync.Map
	// closed is closed by Close; queue never is, so a Take racing with
	// Close (a breaker probe still in flight at shutdown) gets ErrClosed
	// instead of a send on a closed channel.
	closed    chan struct{}
	closeOnce sync.Once
	waits     waitList

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
	// NoCoalesce sends every request as a script call of its own (requests
	// for one bucket do not share a call).
	NoCoalesce bool
	// Timeout is how long Redis may stay silent after a call was written
	// before the Batcher PINGs it. Default 5ms.
	Timeout time.Duration
	// PingTimeout is how long that PING may take: without an answer the
	// calls fail with ErrRedisSilent; with one they keep waiting. Default
	// 50ms.
	PingTimeout time.Duration
	// ExecTimeout bounds one pipeline. Requests give up earlier, on their
	// own deadline. Default 1s.
	ExecTimeout time.Duration
	// MaxWait bounds a Take whose context allows longer (or has no
	// deadline), as if its context ended MaxWait after the Take began: the
	// chain's --redis-max-wait, kept by one timer for all Takes instead of a
	// context with a timer of its own per Take. 0: the context alone.
	MaxWait time.Duration
	// Layout is how buckets are stored in Redis (default LayoutPacked).
	Layout Layout
	// Late receives the successful replies that arrive after their Take
	// returned (the caller gave up, or Redis was silent for a while), for
	// Takes of buckets that keep them (the Cache's calls: see
	// Bucket.keepsLate). Optional.
	Late LateFunc

	// ViaGoRedis sends the pipelines through the go-redis client's pool
	// even to a single server. By default the workers then have
	// connections of their own (see pipe); a Cluster or Sentinel client
	// always goes through go-redis.
	ViaGoRedis bool
}

// Errors of Take.
var (
	// ErrClosed is returned by Takes on a closed Batcher.
	ErrClosed = errors.New("limiter: batcher closed")
	// ErrRedisSilent: the call was written, and Redis sent nothing for the
	// whole Timeout since. It may still run in Redis.
	ErrRedisSilent = errors.New("limiter: Redis sent nothing within the deadline")
	// ErrNotSent: the caller gave up while its call was still queued in
	// the gateway; it was never sent. This says nothing about Redis.
	ErrNotSent = errors.New("limiter: call given up before it was sent (gateway busy)")
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

// NewBatcher starts a Batcher's workers; Close stops them.
func NewBatcher(client BatchClient, opts BatcherOptions) *Batcher {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Millisecond
	}
	if opts.ExecTimeout <= 0 {
		opts.ExecTimeout = time.Second
	}
	if opts.PingTimeout <= 0 {
		opts.PingTimeout = 50 * time.Millisecond
	}
	bt := &Batcher{client: client, queue: make(chan *op, 4*opts.MaxBatch), opts: opts, closed: make(chan struct{})}
	if !opts.ViaGoRedis {
		bt.direct = directFor(client)
	}
	bt.waits.timer = time.AfterFunc(time.Hour, bt.reap)
	bt.waits.timer.Stop()
	bt.listen(client)
	for range opts.Workers {
		w := &worker{bt: bt, batch: make([]*op, 0, opts.MaxBatch)}
		if bt.direct != nil {
			w.pipe = &pipe{opts: bt.direct, bt: bt}
		}
		go w.run()
	}
	return bt
}

// listen makes every connection to Redis report reads as signs of life, so
// that a call waiting behind others on a busy server is known to be late,
// not lost. Connections dialled before this (a pool's first idle ones) do
// not report; replies to whole pipelines still do.
func (bt *Batcher) listen(client BatchClient) {
	switch c := client.(type) {
	case *redis.Client:
		c.AddHook(heardHook{bt: bt})
	case *redis.ClusterClient:
		hook := heardHook{bt: bt, cluster: true}
		c.OnNewNode(func(n *redis.Client) {
			n.AddHook(hook)
			bt.nodeClients.Store(n.Options().Addr, n)
		})
	}
}

// heard records a sign of life from node.
func (bt *Batcher) heard(node string) { bt.node(node).heard.Store(time.Now().UnixNano()) }

// lastHeard is when node last sent anything (0: never).
func (bt *Batcher) lastHeard(node string) int64 { return bt.node(node).heard.Load() }

// Close stops the workers: pipelines in flight finish, Takes still queued
// and any later Take fail with ErrClosed. Safe to call more than once and
// concurrently with Take.
func (bt *Batcher) Close() error {
	bt.closeOnce.Do(func() { close(bt.closed) })
	return nil
}

// Ping checks that Redis answers; it implements Pinger.
func (bt *Batcher) Ping(ctx context.Context) error { return bt.client.Ping(ctx).Err() }

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
		o.deadlineMs = bt.clock.deadlineAt(deadline)
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

// waitList holds the Takes bounded by MaxWait, in the order of their
// deadlines (each is MaxWait after it was added, under mu), and one timer
// set to the first deadline of a Take not answered yet.
type waitList struct {
	mu    sync.Mutex
	ops   []*op
	armed bool
	timer *time.Timer
}

// await adds o to the waitList; it returns o's deadline.
func (bt *Batcher) await(o *op) time.Time {
	w := &bt.waits
	w.mu.Lock()
	defer w.mu.Unlock()
	o.expires = time.Now().Add(bt.opts.MaxWait)
	w.ops = append(w.ops, o)
	if !w.armed {
		w.armed = true
		w.timer.Reset(bt.opts.MaxWait)
	}
	return o.expires
}

// reap runs on the waitList's timer: it drops the answered Takes at its
// head, gives up on those past their deadline, and sets the timer for the
// next one.
func (bt *Batcher) reap() {
	w := &bt.waits
	w.mu.Lock()
	now := time.Now()
	var due []*op
	n := 0
	for ; n < len(w.ops); n++ {
		o := w.ops[n]
		if !o.finished.Load() && now.Before(o.expires) {
			break
		}
		if !o.finished.Load() {
			due = append(due, o)
		}
	}
	clear(w.ops[:n])
	w.ops = w.ops[n:]
	if len(w.ops) > 0 {
		w.timer.Reset(w.ops[0].expires.Sub(now))
	} else {
		w.armed = false
	}
	w.mu.Unlock()
	for _, o := range due {
		bt.giveUp(o, context.DeadlineExceeded)
	}
}

// Stats returns the pipelines sent, script calls in them, and the Takes they
// answered.
func (bt *Batcher) Stats() (roundTrips, commands, decisions int64) {
	return bt.roundTrips.Load(), bt.commands.Load(), bt.decisions.Load()
}

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

// due reports whether c goes in a pipeline: every call the first time, only
// those Redis answered NOSCRIPT when resending.
func (c *call) due(resend bool) bool { return !resend || isNoScript(c.err) }

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

// send pipelines a batch's calls and answers their ops. A watchdog fails the
// ops early when Redis stays silent for Timeout after the pipeline was
// written.
func (w *worker) send(batch []*op) {
	bt := w.bt
	sent := time.Now()
	calls := bt.group(batch, sent)
	if len(calls) == 0 {
		return
	}
	var finished atomic.Bool
	watchdog := time.AfterFunc(bt.opts.Timeout, func() { bt.watch(calls, sent, sent.Add(bt.opts.Timeout), &finished) })
	defer watchdog.Stop()

	deadline := sent.Add(bt.opts.ExecTimeout)
	w.exec(calls, false, deadline)
	// Redis lost its scripts (restart, failover, SCRIPT FLUSH) where some
	// calls went: send those again with EVAL, which carries the script and
	// caches it for the next EVALSHA. A NOSCRIPT call did not run, so
	// nothing counts twice; calls that ran are not sent again.
	w.exec(calls, true, deadline)
	finished.Store(true)
	now := time.Now()
	for i := range calls {
		bt.answer(&calls[i], now)
	}
}

// watch runs Timeout after a pipeline was written, and again while it is
// out: if Redis has sent nothing in the last Timeout, the calls' ops fail
// with ErrRedisSilent (their replies, if they ever come, go to the ops'
// late handlers). due is when this check was meant to run: a check that
// runs much later than that says this process is starved of CPU, and then
// the silence may be ours (replies unread), not Redis's: it looks again.
func (bt *Batcher) watch(calls []call, sent time.Time, due time.Time, finished *atomic.Bool) {
	if finished.Load() {
		return
	}
	now := time.Now()
	again := func(after time.Duration) {
		time.AfterFunc(after, func() { bt.watch(calls, sent, now.Add(after), finished) })
	}
	if lag := now.Sub(due); lag > bt.opts.Timeout/2 {
		again(bt.opts.Timeout / 2)
		return
	}
	// Each node is judged on its own: in a Cluster one silent node fails
	// only its own calls.
	silent := map[string]bool{}
	next := bt.opts.Timeout
	for i := range calls {
		c := &calls[i] // by pointer: exec is writing c's reply
		node := c.ops[0].b.node
		is, seen := silent[node]
		if !seen {
			since := now.Sub(time.Unix(0, bt.lastHeard(node)))
			switch {
			case since < bt.opts.Timeout:
				// Redis is answering: this call is late, not lost.
				next = min(next, bt.opts.Timeout-since)
			case bt.unreadReplies(node):
				// Redis has answered; this process has not read it yet.
				bt.heard(node)
			case bt.node(node).downAt.Load() > sent.UnixNano():
				// Silent, and a PING sent after this call went
				// unanswered too: Redis is not answering.
				is = true
			default:
				// Silent: ask Redis directly before giving up on it. An
				// answer means our calls are only queued behind others.
				bt.suspect(node)
				next = min(next, max(bt.opts.Timeout/2, time.Millisecond))
			}
			silent[node] = is
		}
		if is {
			for _, o := range c.ops {
				o.finish(TakeResult{}, ErrRedisSilent)
			}
		}
	}
	again(next)
}

// nodeState is what the Batcher knows of one node's health.
type nodeState struct {
	// heard is when the node last sent anything (unix ns): a reply, or
	// bytes read on any of its connections.
	heard   atomic.Int64
	pinging atomic.Bool
	// downAt is when a PING to the node last went unanswered (unix ns); 0
	// once one is answered.
	downAt atomic.Int64
}

func (bt *Batcher) node(node string) *nodeState {
	if v, ok := bt.nodes.Load(node); ok {
		return v.(*nodeState)
	}
	v, _ := bt.nodes.LoadOrStore(node, new(nodeState))
	return v.(*nodeState)
}

// suspect PINGs a node that has been silent for Timeout while calls were
// out (one PING at a time per node): an answer within PingTimeout counts as
// a sign of life, no answer marks the node down for the calls sent before.
func (bt *Batcher) suspect(node string) {
	h := bt.node(node)
	if !h.pinging.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer h.pinging.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), bt.opts.PingTimeout)
		defer cancel()
		if err := bt.pingNode(ctx, node); err != nil {
			h.downAt.Store(time.Now().UnixNano())
			return
		}
		h.downAt.Store(0)
		bt.heard(node)
	}()
}

// pingNode PINGs one node: the server, or a Cluster master by address.
func (bt *Batcher) pingNode(ctx context.Context, node string) error {
	if node != "" {
		if c, ok := bt.nodeClients.Load(node); ok {
			return c.(*redis.Client).Ping(ctx).Err()
		}
	}
	return bt.client.Ping(ctx).Err()
}

// exec sends one pipeline of script calls by SHA or, to resend those Redis
// answered NOSCRIPT, with the script (nothing when there are none), on the
// worker's own connection or through go-redis, all before deadline.
func (w *worker) exec(calls []call, resend bool, deadline time.Time) {
	bt := w.bt
	var n int
	if w.pipe != nil {
		n = w.pipe.exec(calls, resend, bt.opts.Layout, deadline)
	} else {
		n = w.execRedis(calls, resend, deadline)
	}
	if n > 0 {
		bt.roundTrips.Add(1)
		bt.commands.Add(int64(n))
	}
}

// execRedis is exec through go-redis (a Cluster, or Sentinel); it returns
// the number of calls sent.
func (w *worker) execRedis(calls []call, resend bool, deadline time.Time) int {
	var pipe redis.Pipeliner
	n := 0
	for i := range calls {
		if calls[i].due(resend) {
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
		if !c.due(resend) {
			continue
		}
		if pipe == nil {
			pipe = w.bt.client.Pipeline()
		}
		cmd := w.cmds[:n][len(cmds)].command(ctx, &c.ops[0].b, c.cost, c.want, c.deadlineMs, w.bt.opts.Layout, resend)
		cmds = append(cmds, cmd)
		_ = pipe.Process(ctx, cmd) // queued; Exec answers it
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	k := 0
	for i := range calls {
		c := &calls[i]
		if !c.due(resend) {
			continue
		}
		c.n, c.err = int64s(cmds[k], &c.reply)
		k++
	}
	clear(w.cmds[:n]) // no bucket's strings kept alive until the next pipeline
	return n
}

// answer hands the result of a call to its ops: with several ops sharing a
// call, the first ones get the granted tokens.
func (bt *Batcher) answer(c *call, now time.Time) {
	res, redisNow, err := c.result()
	res.countIn(&c.ops[0].b, redisNow)
	if redisNow > 0 {
		bt.heard(c.ops[0].b.node)
		bt.clock.observe(redisNow, now)
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

// isNetworkError reports whether err came from the connection rather than
// from Redis.
func isNetworkError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// heardHook wraps every new connection so reads count as signs of life, and
// keeps the open connections so the watchdog can ask the kernel whether
// Redis has sent bytes this process has not read yet (a starved process
// reads late; that is not Redis's silence).
type heardHook struct {
	bt      *Batcher
	cluster bool
}

// node is the node a connection to addr belongs to: addr in a Cluster, ""
// (the one server) otherwise.
func (h heardHook) node(addr string) string {
	if h.cluster {
		return addr
	}
	return ""
}

func (h heardHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return h.bt.newHeardConn(c, h.node(addr)), nil
	}
}

func (heardHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (heardHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type heardConn struct {
	net.Conn
	bt   *Batcher
	node string
	// raw is the socket below the connection (below TLS), nil if it has
	// none; isTLS says bytes may wait there that no request asked for
	// (TLS records such as session tickets).
	raw   syscall.RawConn
	isTLS bool
}

// newHeardConn wraps a new connection to node and registers it with the
// watchdog; its socket is resolved once, here, not at every check.
func (bt *Batcher) newHeardConn(c net.Conn, node string) *heardConn {
	hc := &heardConn{Conn: c, bt: bt, node: node}
	sock := c
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		sock, hc.isTLS = tc.NetConn(), true
	}
	if sc, ok := sock.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			hc.raw = raw
		}
	}
	bt.conns.Store(hc, struct{}{})
	return hc
}

func (c *heardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.bt.heard(c.node)
	}
	return n, err
}

func (c *heardConn) Close() error {
	c.bt.conns.Delete(c)
	return c.Conn.Close()
}

// unread reports whether the kernel holds bytes received on c that were
// not read yet.
func (c *heardConn) unread() bool {
	n := 0
	c.control(func(fd uintptr) { n = pendingBytes(fd) })
	return n > 0
}

// peerClosed reports whether Redis has closed c (see peerClosed).
func (c *heardConn) peerClosed() bool {
	closed := false
	c.control(func(fd uintptr) { closed = peerClosed(fd, c.isTLS) })
	return closed
}

// control runs f on c's socket, if it has one.
func (c *heardConn) control(f func(fd uintptr)) {
	if c.raw != nil {
		_ = c.raw.Control(f)
	}
}

// unreadReplies reports whether a connection to node holds bytes not read
// yet.
func (bt *Batcher) unreadReplies(node string) bool {
	found := false
	bt.conns.Range(func(k, _ any) bool {
		if c := k.(*heardConn); c.node == node {
			found = c.unread()
		}
		return !found
	})
	return found
}
