package limiter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/lib/redistime"
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
	clock  redistime.Clock
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
	// loadingStack: a load of the stacked-limits script is under way;
	// stackLoaded: the last one succeeded, and no NOSCRIPT came since
	// (loadStack).
	loadingStack, stackLoaded atomic.Bool

	roundTrips, commands, decisions atomic.Int64

	// solo holds the connection of solo sends (batcher_solo.go) while no
	// Take uses it; nil: none (NoSolo, or no connection of its own).
	solo chan *worker
	// inFlight counts the pipelines being sent, solo ones included.
	inFlight atomic.Int32
	// lastTake is when the last Take came, in ns since epoch (the
	// Batcher's creation): solo sends only after a quiet gap.
	lastTake atomic.Int64
	epoch    time.Time
	// soloSends counts the Takes sent solo.
	soloSends atomic.Int64
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

	// NoSolo makes every Take go through the queue and the workers, even
	// when nothing is queued or in flight (see batcher_solo.go).
	NoSolo bool
	// SoloGap: a Take is sent solo only when the one before it came at
	// least this long before (default DefaultSoloGap), so that only
	// decisions further apart than pipelines could batch go solo.
	SoloGap time.Duration

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
	if bt.opts.SoloGap <= 0 {
		bt.opts.SoloGap = DefaultSoloGap
	}
	bt.epoch = time.Now()
	if bt.direct != nil && !bt.direct.tls && !opts.NoSolo {
		bt.solo = make(chan *worker, 1)
		bt.solo <- &worker{bt: bt, batch: make([]*op, 0, 1), pipe: &pipe{opts: bt.direct, bt: bt}}
	}
	return bt
}

// Close stops the workers: pipelines in flight finish, Takes still queued
// and any later Take fail with ErrClosed. Safe to call more than once and
// concurrently with Take.
func (bt *Batcher) Close() error {
	bt.closeOnce.Do(func() {
		close(bt.closed)
		bt.closeSolo()
	})
	return nil
}

// Ping checks that Redis answers; it implements Pinger.
func (bt *Batcher) Ping(ctx context.Context) error { return bt.client.Ping(ctx).Err() }

// Stats returns the pipelines sent, script calls in them, and the Takes they
// answered.
func (bt *Batcher) Stats() (roundTrips, commands, decisions int64) {
	return bt.roundTrips.Load(), bt.commands.Load(), bt.decisions.Load()
}
