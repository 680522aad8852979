package limiter

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

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
