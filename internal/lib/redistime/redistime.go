// Package redistime estimates Redis's clock from the times its replies
// carry (a script's TIME), so that a caller's deadline can travel to Redis
// in Redis's own time. It imports nothing from this module.
//
// Every reply gives a lower bound of the offset between Redis's clock and
// this process's: Redis read its clock before the reply arrived, so
// Redis's time minus the local arrival time is the true offset minus that
// reply's delay. The estimate is the largest bound seen over the last 10
// to 20 seconds: one slow reply (a loaded machine, a pause for garbage
// collection) no longer pulls every deadline earlier until the next reply,
// and the estimate never runs ahead of Redis's clock unless that clock
// goes back, which a drop of more than a second is taken for (a failover
// to a server whose clock is behind): the estimate then starts over.
package redistime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Window is how long a best offset is kept: for the window it was seen in
// and the next one.
const Window = 10 * time.Second

// jumpBack is the drop in offset taken for Redis's clock going back.
const jumpBack = int64(time.Second / time.Millisecond)

// Clock is the estimate. The zero value knows nothing; safe for concurrent
// use.
type Clock struct {
	mu        sync.Mutex
	cur, prev int64 // the largest offsets (ms) of this window and the last
	curStart  int64 // when this window began (local unix ms)

	known atomic.Bool
	best  atomic.Int64 // max(cur, prev): Redis ms − local ms
}

// Observe records Redis's time redisMs (ms since the epoch) read in a reply
// that arrived at recv.
func (c *Clock) Observe(redisMs int64, recv time.Time) {
	now := recv.UnixMilli()
	off := redisMs - now
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.known.Load() || off < c.best.Load()-jumpBack:
		c.cur, c.prev, c.curStart = off, off, now
	case now-c.curStart >= Window.Milliseconds():
		c.prev, c.cur, c.curStart = c.cur, off, now
	case off > c.cur:
		c.cur = off
	}
	c.best.Store(max(c.cur, c.prev))
	c.known.Store(true)
}

// Offset is the estimated offset, Redis ms − local ms; ok is false before
// the first Observe.
func (c *Clock) Offset() (ms int64, ok bool) {
	if !c.known.Load() {
		return 0, false
	}
	return c.best.Load(), true
}

// At is the local time t in Redis milliseconds; ok is false before the
// first Observe.
func (c *Clock) At(t time.Time) (ms int64, ok bool) {
	off, ok := c.Offset()
	if !ok {
		return 0, false
	}
	return t.UnixMilli() + off, true
}

// Deadline is ctx's deadline in Redis milliseconds plus slackMs, or 0 when
// ctx has none or Redis's clock is not known yet (a call without a
// deadline in Redis time).
func (c *Clock) Deadline(ctx context.Context, slackMs int64) int64 {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return c.DeadlineAt(d, slackMs)
}

// DeadlineAt is the local time d in Redis milliseconds plus slackMs, or 0
// before the first Observe.
func (c *Clock) DeadlineAt(d time.Time, slackMs int64) int64 {
	ms, ok := c.At(d)
	if !ok {
		return 0
	}
	return ms + slackMs
}
