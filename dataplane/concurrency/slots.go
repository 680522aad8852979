// Package concurrency caps the requests a tenant has in flight on a route
// across all gateway replicas (spec.concurrency). Each request holds a slot:
// a member of a Redis sorted set whose score is the slot's lease expiry, in
// Redis time (lua/concurrency.lua). The gateway renews the leases of its
// running requests in the background, one pipelined call per due key, and
// releases a slot when its request ends; the slots of a gateway that dies
// expire at most one lease after its last renewal.
//
// When Redis cannot answer (or the script fails on the key: a value of
// another type there), the rule's failure mode decides: LocalFallback
// caps each gateway at max(1, limit/N) requests in flight (N live
// replicas), FailOpen admits, FailClosed rejects.
package concurrency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/lib/redistime"
	"github.com/tollgate-dev/tollgate/lua"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

var script = redis.NewScript(lua.Concurrency)

// errDown stands for the failure of a call not made because Redis is known
// to be down.
var errDown = errors.New("redis is down (circuit breaker open)")

// Client is the part of a go-redis client the slots use; single-node,
// Sentinel and Cluster clients all satisfy it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// Options configure Slots.
type Options struct {
	// Client is Redis; nil keeps every slot local (--limiter=local): each
	// gateway then allows max(1, limit/N) at once.
	Client Client
	// GatewayID names this gateway in slot members; a random suffix is
	// added so a restarted gateway of the same name never reuses a member.
	GatewayID string
	// Replicas returns the number of live replicas N. Default: 1.
	Replicas func() int
	// Timeout bounds one Redis call (acquire, release, one renewal
	// pipeline). Default 100ms.
	Timeout time.Duration
	// Down reports that the Redis node holding key is known to be down
	// (the limiter's circuit breaker for that node is not closed:
	// limiter.Chain.Down). The acquire then makes no call and follows the
	// failure mode; otherwise only a refused or closed connection does,
	// and a slow call is rejected (it may still have taken its slot in
	// Redis). In a Cluster only the tenants on a failed master are down.
	Down func(ctx context.Context, key string) bool
	// Tick is how often the renewal loop looks for due keys. Default 100ms.
	Tick time.Duration
	// OnRenew observes each renewal pipeline: the keys renewed and the
	// error, if any (for logs).
	OnRenew func(keys int, err error)
	// ScriptError observes an acquire of the slot set key that failed in
	// the script (limiter.IsScriptError: a key of another type...): Redis
	// answered, and the acquire followed the failure mode. Optional.
	ScriptError func(key string, err error)
}

// Limit is what one request asks for.
type Limit struct {
	// Key is the slot set (Key or RegionKey).
	Key string
	// Max is the number of slots (cluster-wide).
	Max int64
	// Lease is the slot lease.
	Lease time.Duration
	// FailureMode is what to do when Redis cannot answer.
	FailureMode snapshot.FailureMode
}

// Outcome is the answer to one Acquire.
type Outcome struct {
	// Allowed is true when the request got a slot (or the rule fails open).
	Allowed bool
	// Held is the number of slots held after the call, as the deciding
	// side counts them (Redis, or this gateway's local count).
	Held int64
	// Limit is the cap that decided: Limit.Max, or the local share.
	Limit int64
	// Source says who decided.
	Source limiter.Source
}

// Key is the slot set of tenant on route: mi:{tenant}:route. The braces are
// the Redis Cluster hash tag of the tenant's token buckets (limiter.Key).
func Key(tenant, route string) string { return "mi:{" + tenant + "}:" + route }

// RegionKey is the slot set of a region's share: mi:{tenant}:route@region.
func RegionKey(tenant, route, region string) string { return Key(tenant, route) + "@" + region }

// Slots acquires, renews and releases concurrency slots. Safe for
// concurrent use.
type Slots struct {
	opts Options
	id   string
	seq  atomic.Uint64

	// clock estimates Redis's clock from the "now" of script replies, so
	// a call carries its caller's deadline in Redis time, without the
	// token bucket's slack: a deadline it computes is never later than
	// the caller's, so a call that ran within it ran before the caller
	// gave up, and so before the release the caller sends then.
	clock redistime.Clock

	mu    sync.Mutex
	held  map[string]*heldKey // Redis slots of this gateway, by key
	local map[string]int64    // local fallback slots in use, by key
	count int64               // slots of this gateway, Redis and local
}

// heldKey is this gateway's slots in one set, renewed together.
type heldKey struct {
	lease   time.Duration
	members map[string]struct{}
	next    time.Time // when the next renewal is due
}

// New returns Slots; Run renews their leases.
func New(opts Options) *Slots {
	if opts.Replicas == nil {
		opts.Replicas = func() int { return 1 }
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 100 * time.Millisecond
	}
	if opts.Down == nil {
		opts.Down = func(context.Context, string) bool { return false }
	}
	if opts.Tick <= 0 {
		opts.Tick = 100 * time.Millisecond
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return &Slots{
		opts: opts, id: opts.GatewayID + "-" + hex.EncodeToString(suffix[:]),
		held: map[string]*heldKey{}, local: map[string]int64{},
	}
}

// ID is this gateway's prefix of slot members.
func (s *Slots) ID() string { return s.id }

// InFlight is the number of slots this gateway holds (Redis and local).
func (s *Slots) InFlight() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Slot is one acquired slot. Release frees it; calls after the first do
// nothing.
type Slot struct {
	s      *Slots
	key    string
	member string // "" for a local slot
	once   sync.Once
}

// Acquire takes a slot of l for one request. The Slot is nil when the
// request is not allowed, or when it is allowed without holding a slot
// (the rule fails open during an outage).
func (s *Slots) Acquire(ctx context.Context, l Limit) (*Slot, Outcome) {
	if s.opts.Client == nil {
		return s.acquireLocal(l)
	}
	if s.opts.Down(ctx, l.Key) {
		// Known down: no call waits for a Redis that does not answer.
		return s.failed(ctx, l, errDown)
	}
	member := s.id + ":" + strconv.FormatUint(s.seq.Add(1), 36)
	call, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	// Held before the call, so a renewal due meanwhile covers it.
	s.track(l, member)
	vals, err := script.Run(call, s.opts.Client, []string{l.Key}, "acquire", member, l.Max, l.Lease.Milliseconds(), s.clock.Deadline(call, 0)).Int64Slice()
	if err == nil && len(vals) < 3 {
		err = errors.New("concurrency.lua: short reply")
	}
	if err == nil {
		s.clock.Observe(vals[2], time.Now())
		if vals[0] < 0 {
			err = context.DeadlineExceeded // ran too late: took nothing
		}
	}
	if err != nil {
		s.untrack(l.Key, member)
		if limiter.IsScriptError(err) && s.opts.ScriptError != nil {
			s.opts.ScriptError(l.Key, err)
		}
		if !limiter.RedisGone(err) {
			// The call may have taken the slot before failing: give it
			// back, else it stays taken until its lease ends. (A refused
			// or closed connection ran nothing, barring a crash in that
			// instant, which the lease covers.)
			go s.releaseRedis(l.Key, member)
		}
		return s.failed(ctx, l, err)
	}
	out := Outcome{Allowed: vals[0] == 1, Held: vals[1], Limit: l.Max, Source: limiter.SourceRedis}
	if !out.Allowed {
		s.untrack(l.Key, member)
		return nil, out
	}
	return &Slot{s: s, key: l.Key, member: member}, out
}

// failed decides by the failure mode after a failed acquire.
func (s *Slots) failed(ctx context.Context, l Limit, err error) (*Slot, Outcome) {
	switch l.FailureMode {
	case snapshot.FailOpen:
		return nil, Outcome{Allowed: true, Limit: l.Max, Source: limiter.SourceFailOpen}
	case snapshot.FailClosed:
		return nil, Outcome{Limit: l.Max, Source: limiter.SourceFailClosed}
	}
	if errors.Is(err, errDown) || s.opts.Down(ctx, l.Key) || limiter.RedisGone(err) || limiter.IsScriptError(err) {
		// Redis cannot decide: the key's node is down, gone, or the script
		// fails on this key on every gateway (it holds no slot any gateway
		// could count).
		return s.acquireLocal(l)
	}
	// Redis is not known to be down and the call may have taken a slot:
	// reject rather than admit on top of what Redis grants.
	return nil, Outcome{Limit: l.Max, Source: limiter.SourceLocal}
}

// LocalLimit is the local share of a limit of slots with n replicas:
// max(1, slots/n).
func LocalLimit(slots int64, n int) int64 {
	return max(1, slots/int64(max(1, n)))
}

// acquireLocal takes a slot of this gateway's local share of l.
func (s *Slots) acquireLocal(l Limit) (*Slot, Outcome) {
	limit := LocalLimit(l.Max, s.opts.Replicas())
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.local[l.Key]
	if held >= limit {
		return nil, Outcome{Held: held, Limit: limit, Source: limiter.SourceLocal}
	}
	s.local[l.Key] = held + 1
	s.count++
	return &Slot{s: s, key: l.Key}, Outcome{Allowed: true, Held: held + 1, Limit: limit, Source: limiter.SourceLocal}
}

// track adds member to the slots this gateway renews.
func (s *Slots) track(l Limit, member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[l.Key]
	if h == nil {
		h = &heldKey{lease: l.Lease, members: map[string]struct{}{}, next: time.Now().Add(l.Lease / 3)}
		s.held[l.Key] = h
	}
	// A rule changed to a shorter lease renews at its pace from now on.
	if l.Lease < h.lease {
		h.lease = l.Lease
		h.next = time.Now().Add(l.Lease / 3)
	}
	h.members[member] = struct{}{}
	s.count++
}

// untrack stops renewing member.
func (s *Slots) untrack(key, member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[key]
	if h == nil {
		return
	}
	if _, ok := h.members[member]; !ok {
		return
	}
	delete(h.members, member)
	s.count--
	if len(h.members) == 0 {
		delete(s.held, key)
	}
}

// Release frees the slot, once: it stops renewing it and removes it from
// Redis (a failed removal leaves it to expire with its lease), or gives
// back the local slot.
func (sl *Slot) Release() {
	if sl == nil {
		return
	}
	sl.once.Do(func() {
		s := sl.s
		if sl.member == "" {
			s.mu.Lock()
			if s.local[sl.key]--; s.local[sl.key] <= 0 {
				delete(s.local, sl.key)
			}
			s.count--
			s.mu.Unlock()
			return
		}
		s.untrack(sl.key, sl.member)
		s.releaseRedis(sl.key, sl.member)
	})
}

// releaseRedis removes member from the set key.
func (s *Slots) releaseRedis(key, member string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	_ = script.Run(ctx, s.opts.Client, []string{key}, "release", member).Err()
}
