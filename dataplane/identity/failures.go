package identity

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// FailureOptions configure a FailureLimiter.
type FailureOptions struct {
	// Burst is the number of failed identifications an address may have in
	// a row before it is refused; 0 disables the limiter (New returns nil).
	Burst int
	// PerSecond is the rate at which an address earns failures back.
	PerSecond float64
	// MaxAddresses bounds the addresses tracked at once. When the table is
	// full of addresses with failures, new addresses share one extra
	// bucket, so memory stays bounded under a spread-out attack.
	MaxAddresses int
	// Clock defaults to time.Now.
	Clock func() time.Time
}

// FailureLimiter limits failed identifications (401 and 400) per client
// address with a local token bucket per address: every failure takes a
// token, and an address without a token left is refused (429) — for every
// request, not only for further failures, so a right guess cannot be told
// from a wrong one once the budget is spent. IPv6 addresses are grouped by
// their /64 prefix, the usual allocation of one host.
//
// The address is the TCP peer, never X-Forwarded-For (which the client
// writes). Behind a load balancer that does not keep the client address,
// all clients share the balancer's bucket; raise Burst or disable it there.
//
// A nil *FailureLimiter is valid and limits nothing. Methods are safe for
// concurrent use; while no address has failures, Blocked costs one atomic
// load.
type FailureLimiter struct {
	opts      FailureOptions
	tracked   atomic.Int32 // addresses in the table, plus 1 while overflow is in use
	mu        sync.Mutex
	buckets   map[netip.Addr]failBucket
	overflow  failBucket
	inUse     bool // overflow holds failures
	lastSweep time.Time
}

type failBucket struct {
	tokens float64
	at     time.Time
}

// NewFailureLimiter returns a limiter, or nil when opts.Burst is 0.
func NewFailureLimiter(opts FailureOptions) *FailureLimiter {
	if opts.Burst <= 0 {
		return nil
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.MaxAddresses < 1 {
		opts.MaxAddresses = 1
	}
	return &FailureLimiter{opts: opts, buckets: map[netip.Addr]failBucket{}}
}

// ClientAddr is the limiter's key for a request's RemoteAddr ("ip:port"):
// the IP, IPv4-mapped IPv6 unmapped, IPv6 reduced to its /64 prefix. ok is
// false for an address it cannot parse.
func ClientAddr(remoteAddr string) (addr netip.Addr, ok bool) {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	return a, true
}

// Blocked reports whether the client at remoteAddr has no failure left, and
// if so how long until it has one.
func (l *FailureLimiter) Blocked(remoteAddr string) (time.Duration, bool) {
	if l == nil || l.tracked.Load() == 0 {
		return 0, false
	}
	addr, ok := ClientAddr(remoteAddr)
	if !ok {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.opts.Clock()
	b, found := l.buckets[addr]
	switch {
	case found:
	case l.inUse && len(l.buckets) >= l.opts.MaxAddresses:
		b = l.overflow
	default:
		return 0, false
	}
	b = l.refill(b, now)
	if found && b.tokens >= float64(l.opts.Burst) {
		// Full again: the same as untracked.
		delete(l.buckets, addr)
		l.tracked.Store(int32(len(l.buckets)) + boolInt(l.inUse))
	}
	if b.tokens >= 1 {
		return 0, false
	}
	return l.wait(b), true
}

// Fail records a failed identification of the client at remoteAddr. It
// returns false, and how long until the next failure is allowed, when the
// client had none left: answer 429 then.
func (l *FailureLimiter) Fail(remoteAddr string) (time.Duration, bool) {
	if l == nil {
		return 0, true
	}
	addr, ok := ClientAddr(remoteAddr)
	if !ok {
		addr = netip.IPv4Unspecified() // unparsable peers share one bucket
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.opts.Clock()
	l.sweep(now)
	b, found := l.buckets[addr]
	useOverflow := false
	if !found {
		if len(l.buckets) >= l.opts.MaxAddresses {
			useOverflow = true
			b = l.overflow
			if !l.inUse {
				b = failBucket{tokens: float64(l.opts.Burst), at: now}
			}
		} else {
			b = failBucket{tokens: float64(l.opts.Burst), at: now}
		}
	}
	b = l.refill(b, now)
	allowed := b.tokens >= 1
	if allowed {
		b.tokens--
	}
	if useOverflow {
		l.overflow, l.inUse = b, true
	} else {
		l.buckets[addr] = b
	}
	l.tracked.Store(int32(len(l.buckets)) + boolInt(l.inUse))
	if allowed {
		return 0, true
	}
	return l.wait(b), false
}

// Len is the number of addresses tracked.
func (l *FailureLimiter) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

func (l *FailureLimiter) refill(b failBucket, now time.Time) failBucket {
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = min(float64(l.opts.Burst), b.tokens+dt*l.opts.PerSecond)
		b.at = now
	}
	return b
}

func (l *FailureLimiter) wait(b failBucket) time.Duration {
	if l.opts.PerSecond <= 0 {
		return time.Hour
	}
	return time.Duration((1 - b.tokens) / l.opts.PerSecond * float64(time.Second))
}

// sweep forgets addresses whose bucket is full again (they are the same as
// untracked ones), at most once per second, so the table holds only
// addresses with recent failures; the caller holds l.mu.
func (l *FailureLimiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Second {
		return
	}
	l.lastSweep = now
	for a, b := range l.buckets {
		if l.refill(b, now).tokens >= float64(l.opts.Burst) {
			delete(l.buckets, a)
		}
	}
	if l.inUse && l.refill(l.overflow, now).tokens >= float64(l.opts.Burst) {
		l.inUse = false
	}
	l.tracked.Store(int32(len(l.buckets)) + boolInt(l.inUse))
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
