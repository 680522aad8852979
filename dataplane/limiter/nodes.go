package limiter

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/lib/ticker"
)

// Breakers keeps one Breaker per Redis node: in a Cluster, a node that
// fails opens its own breaker, and buckets on the other nodes stay exact on
// Redis. With a single server (or Sentinel) there is one breaker. It
// implements Taker by routing each call to the breaker of the node that
// holds the bucket's key.
type Breakers struct {
	next    Taker
	opts    BreakerOptions
	cluster *redis.ClusterClient // nil: one server
	single  Pinger

	// nodes maps a node's address to its *Breaker; mu serializes creation.
	mu    sync.Mutex
	nodes sync.Map
	// state is the aggregate state last reported to OnStateChange; reportMu
	// serializes the reports.
	state    string
	reportMu sync.Mutex
}

// NewBreakers wraps next (the Batcher) with per-node breakers. pinger
// probes a single server; in a Cluster each node's own client is pinged.
func NewBreakers(next Taker, client BatchClient, pinger Pinger, opts BreakerOptions) *Breakers {
	bs := &Breakers{next: next, opts: opts, single: pinger, state: "closed"}
	if c, ok := client.(*redis.ClusterClient); ok {
		bs.cluster = c
	}
	return bs
}

// nodeOf is the node that holds key ("" for a single server, or when the
// Cluster's slot map cannot say) and its pinger.
func (bs *Breakers) nodeOf(ctx context.Context, key string) (string, Pinger) {
	if bs.cluster != nil {
		if c, err := bs.cluster.MasterForKey(ctx, key); err == nil {
			return c.Options().Addr, clientPinger{c}
		}
	}
	return "", bs.single
}

// forKey returns the breaker of the node that holds key, and the node.
func (bs *Breakers) forKey(ctx context.Context, key string) (*Breaker, string) {
	node, pinger := bs.nodeOf(ctx, key)
	if br, ok := bs.nodes.Load(node); ok {
		return br.(*Breaker), node
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if br, ok := bs.nodes.Load(node); ok {
		return br.(*Breaker), node
	}
	opts := bs.opts
	opts.OnStateChange = bs.report
	br := NewBreaker(bs.next, pinger, opts)
	br.node = node
	bs.nodes.Store(node, br)
	return br, node
}

// Take implements Taker.
func (bs *Breakers) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	br, node := bs.forKey(ctx, b.Key)
	b.node = node
	return br.Take(ctx, b, cost, want)
}

// each calls f for every node's breaker.
func (bs *Breakers) each(f func(*Breaker)) {
	bs.nodes.Range(func(_, br any) bool {
		f(br.(*Breaker))
		return true
	})
}

// Run probes every open node until ctx ends.
func (bs *Breakers) Run(ctx context.Context) {
	ticker.Every(ctx, max(bs.opts.OpenFor/2, 10*time.Millisecond), func() {
		bs.each(func(br *Breaker) { br.probe(ctx) })
	})
}

// Down reports whether the breaker of the node that holds key is not
// closed (open, or half-open while its probe runs): a call for key would
// fail at once with ErrOpen. A node no call went to yet is not down. Other
// Redis calls on key (the concurrency slots: mi:{tenant}:route shares the
// hash tag of the tenant's buckets) ask it, so that a dead master sends
// only its own tenants to their failure mode.
func (bs *Breakers) Down(ctx context.Context, key string) bool {
	node, _ := bs.nodeOf(ctx, key)
	br, ok := bs.nodes.Load(node)
	return ok && !br.(*Breaker).closed.Load()
}

// State is the worst state among the nodes: "open" when any node's breaker
// is open, "half-open" when any is probing, else "closed".
func (bs *Breakers) State() string {
	state := "closed"
	bs.each(func(br *Breaker) {
		switch s := br.State(); {
		case s == "open":
			state = s
		case s == "half-open" && state == "closed":
			state = s
		}
	})
	return state
}

// report is a node's breaker's OnStateChange: it tells OnStateChange when
// the aggregate state changed, with the most recent error of any node.
func (bs *Breakers) report(StateChange) {
	if bs.opts.OnStateChange == nil {
		return
	}
	// A node's breaker calls this from inside its own state change; the
	// aggregate is read once that has settled.
	go func() {
		bs.reportMu.Lock()
		defer bs.reportMu.Unlock()
		to := bs.State()
		if from := bs.state; from != to {
			bs.state = to
			bs.opts.OnStateChange(StateChange{From: from, To: to, LastError: bs.LastError()})
		}
	}()
}

// Waited is the number of calls that went to Redis, all nodes together.
func (bs *Breakers) Waited() int64 {
	var n int64
	bs.each(func(br *Breaker) { n += br.Waited() })
	return n
}

// LastError is the most recent error of any node.
func (bs *Breakers) LastError() error {
	var err error
	bs.each(func(br *Breaker) {
		if e := br.LastError(); e != nil {
			err = e
		}
	})
	return err
}

// clientPinger pings one Cluster node.
type clientPinger struct{ c *redis.Client }

func (p clientPinger) Ping(ctx context.Context) error { return p.c.Ping(ctx).Err() }
