package proxy

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A client that hangs up must not pay less than one that reads its answer
// to the end. So a forwarded request under a response-cost rule runs on a
// context of its own, detached from the client's: before the response
// headers, a client that leaves still cancels it (meter.clientGone); after
// them, the gateway reads the rest of the answer without the client (a
// drain) to find its cost, within bounds: drainLimits.maxBytes read after
// the client left, the route's timeout, drainLimits.max drains at once.
// When the bounds end the read first, the response costs onClientGone.

// DefaultDrainBytes and DefaultMaxDrains are the gateway's defaults of
// --response-cost-drain-bytes and --response-cost-max-drains.
const (
	DefaultDrainBytes = 1 << 20
	DefaultMaxDrains  = 1024
)

// drainTimeoutWithoutRoute bounds a drain on a route without a timeout
// (Options.UpstreamTimeout 0; the gateway always sets one).
const drainTimeoutWithoutRoute = 30 * time.Second

// drainLimits are the bounds of the drains of one Handler, and their
// count; closed ends when the Handler closes, and cuts the drains then in
// flight (a gateway that stops leaves no upstream request behind).
type drainLimits struct {
	maxBytes int64
	max      int64
	n        atomic.Int64
	inFlight prometheus.Gauge
	refused  prometheus.Counter
	closed   context.Context
	close    context.CancelFunc
}

func newDrainLimits(opts *Options) *drainLimits {
	d := &drainLimits{maxBytes: opts.DrainBytes, max: int64(opts.MaxDrains),
		inFlight: opts.Metrics.ResponseDrains, refused: opts.Metrics.ResponseDrainsRefused}
	d.closed, d.close = context.WithCancel(context.Background())
	return d
}

// acquire takes a place for one drain; false when drains are off or max
// run (counted as refused).
func (d *drainLimits) acquire() bool {
	if d.maxBytes <= 0 || d.max <= 0 {
		return false
	}
	if d.n.Add(1) > d.max {
		d.n.Add(-1)
		d.refused.Inc()
		return false
	}
	d.inFlight.Inc()
	return true
}

func (d *drainLimits) release() {
	d.n.Add(-1)
	d.inFlight.Dec()
}

// The states of a meter's forwarding (meter.state).
const (
	waiting   int32 = iota // no response headers yet
	streaming              // the answer streams to its client
	draining               // the client left; the gateway reads on alone
	stopped                // the client left; the upstream request is canceled
	finished               // the handler is done
)

// detach returns a context of its own for the upstream request, with the
// values of the client's context client, bounded as above, and watches
// client. The caller calls finish when the forwarding is over.
func (m *meter) detach(client context.Context, d *drainLimits, timeout time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.WithoutCancel(client))
	m.drains, m.cancel, m.timeout = d, cancel, timeout
	if m.timeout <= 0 {
		m.timeout = drainTimeoutWithoutRoute
	}
	m.unwatch = context.AfterFunc(client, m.clientGone)
	return ctx
}

// clientGone runs when the client's context ends (in a goroutine of its
// own): before the response headers the upstream request is canceled;
// after them the gateway reads on (leave).
func (m *meter) clientGone() {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.state.Load() {
	case waiting:
		m.cutOff.Store(true)
		m.state.Store(stopped)
		m.cancel()
	case streaming:
		m.leave()
	}
}

// leave starts reading the answer without its client: for a body field
// or a trailer that is not found yet, when a drain may start; else the
// upstream request is canceled (a header's cost is known, a 5xx costs
// onError). m.mu is held.
func (m *meter) leave() {
	if m.scan == nil && m.res == nil || !m.drains.acquire() {
		m.cutOff.Store(true)
		m.state.Store(stopped)
		m.cancel()
		return
	}
	m.state.Store(draining)
	m.timer = time.AfterFunc(m.timeout, m.cut)
	m.unclose = context.AfterFunc(m.drains.closed, m.cut)
}

// cut ends the upstream request of a drain at its bounds.
func (m *meter) cut() {
	m.cutOff.Store(true)
	m.cancel()
}

// finish ends the forwarding: the watch of the client, a drain's place and
// timer, the upstream request's context.
func (m *meter) finish() {
	m.unwatch()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state.Swap(finished) == draining {
		m.timer.Stop()
		m.unclose()
		m.drains.release()
	}
	m.cancel()
}

// drain reads the rest of an answer whose copy to the client failed (the
// client left), when it may: the body's Read scans it and stops at the
// byte bound.
func (b *meteredBody) drain() {
	m := b.m
	m.mu.Lock()
	if m.state.Load() == streaming {
		m.leave()
	}
	m.mu.Unlock()
	if m.state.Load() != draining {
		return
	}
	buf := make([]byte, 4<<10)
	for {
		if _, err := b.Read(buf); err != nil {
			return
		}
	}
}
