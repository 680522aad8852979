package identity

import (
	"math"
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
	// MaxAddresses bounds the addresses tracked at once, and the prefixes:
	// when the address table is full, the address with the least recent
	// failure leaves it and its failures go to its prefix (IPv4 /24, IPv6
	// /56), in a table of at most as many prefixes.
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
// Memory is bounded by two tables of MaxAddresses buckets each. The address
// table keeps the addresses with the most recent failures; when it is full,
// a new failing address takes the place of the one whose last failure is the
// oldest, and that one's spent tokens are charged to its prefix (IPv4 /24,
// IPv6 /56) in the prefix table, where in turn the least recent prefix is
// forgotten when it is full. A client is judged by its own bucket while its
// address is in the table; otherwise, while its prefix holds failures of
// addresses that left the table, by the prefix's bucket (same burst and
// rate, so the prefix is refused only once those failures reach the burst);
// otherwise it is not refused. So an address is never refused for the
// failures of addresses outside its prefix, however many there are: one
// IPv6 /48 that keeps the table full locks out none but itself. A bucket
// full again is forgotten (at the latest Burst/PerSecond after its last
// failure). Each bucket costs about 90 bytes: 12 MB at most for 65,536
// addresses and 65,536 prefixes, nothing while no address has failures.
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
	base      time.Time    // bucket times are nanoseconds since base
	refillAll int64        // nanoseconds in which a bucket earns back Burst tokens
	tracked   atomic.Int32 // buckets in both tables
	mu        sync.Mutex
	addrs     failTable // by address (IPv4, IPv6 /64)
	prefixes  failTable // by prefix (IPv4 /24, IPv6 /56), of addresses that left addrs
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
	refillAll := int64(math.MaxInt64)
	if opts.PerSecond > 0 {
		refillAll = int64(min(float64(opts.Burst)/opts.PerSecond*1e9, math.MaxInt64/2))
	}
	return &FailureLimiter{
		opts: opts, base: opts.Clock(), refillAll: refillAll,
		addrs: newFailTable(opts.MaxAddresses), prefixes: newFailTable(opts.MaxAddresses),
	}
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

// failKeys are the limiter's keys of a client address from ClientAddr: the
// address (IPv6 already its /64) and its prefix, IPv4 /24 or IPv6 /56.
func failKeys(a netip.Addr) (addr, prefix failKey) {
	addr = a.As16()
	prefix = addr
	if a.Is4() {
		prefix[15] = 0
	} else {
		prefix[7] = 0
	}
	return addr, prefix
}

// Blocked reports whether the client at remoteAddr has no failure left, and
// if so how long until it has one.
func (l *FailureLimiter) Blocked(remoteAddr string) (time.Duration, bool) {
	a, ok := ClientAddr(remoteAddr)
	if !ok {
		return 0, false
	}
	return l.BlockedAddr(a)
}

// limiterKey is a client address as the limiter keys it: IPv4-mapped
// IPv6 unmapped, IPv6 reduced to its /64 prefix; ok is false for the zero
// Addr.
func limiterKey(a netip.Addr) (netip.Addr, bool) {
	if !a.IsValid() {
		return a, false
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	return a, true
}

// BlockedAddr is Blocked for a client address (the trusted one the proxy
// found, clientaddr.Resolver).
func (l *FailureLimiter) BlockedAddr(a netip.Addr) (time.Duration, bool) {
	if l == nil || l.tracked.Load() == 0 {
		return 0, false
	}
	a, ok := limiterKey(a)
	if !ok {
		return 0, false
	}
	key, prefix := failKeys(a)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.expire(now)
	t, i, found := l.bucket(key, prefix)
	if !found {
		return 0, false
	}
	if tokens := l.level(t.entries[i], now); tokens < 1 {
		return l.wait(tokens), true
	}
	return 0, false
}

// Fail records a failed identification of the client at remoteAddr. It
// returns false, and how long until the next failure is allowed, when the
// client had none left: answer 429 then.
func (l *FailureLimiter) Fail(remoteAddr string) (time.Duration, bool) {
	a, _ := ClientAddr(remoteAddr)
	return l.FailAddr(a)
}

// FailAddr is Fail for a client address (the trusted one the proxy
// found); the zero Addr is one bucket for every unparsable peer.
func (l *FailureLimiter) FailAddr(a netip.Addr) (time.Duration, bool) {
	if l == nil {
		return 0, true
	}
	a, ok := limiterKey(a)
	if !ok {
		a = netip.IPv4Unspecified() // unparsable peers share one bucket
	}
	key, prefix := failKeys(a)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.expire(now)
	defer l.count()
	if t, i, found := l.bucket(key, prefix); found {
		tokens := l.level(t.entries[i], now)
		allowed := tokens >= 1
		if allowed {
			tokens--
		}
		t.update(i, tokens, now)
		if !allowed {
			return l.wait(tokens), false
		}
		return 0, true
	}
	if l.addrs.full() {
		l.evict(now)
	}
	l.addrs.insert(key, float64(l.opts.Burst-1), now)
	return 0, true
}

// Len is the number of addresses tracked (not counting prefixes).
func (l *FailureLimiter) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addrs.len()
}

// bucket finds the bucket that judges a client: its address's, or else its
// prefix's; the caller holds l.mu.
func (l *FailureLimiter) bucket(key, prefix failKey) (*failTable, int32, bool) {
	if i, ok := l.addrs.get(key); ok {
		return &l.addrs, i, true
	}
	if i, ok := l.prefixes.get(prefix); ok {
		return &l.prefixes, i, true
	}
	return nil, 0, false
}

// evict makes room in the full address table: the address with the least
// recent failure leaves it, and the tokens it had spent are taken from its
// prefix's bucket (a new one, in place of the least recent prefix if that
// table is full too); the caller holds l.mu.
func (l *FailureLimiter) evict(now int64) {
	i := l.addrs.tail
	e := l.addrs.entries[i]
	l.addrs.remove(i)
	spent := float64(l.opts.Burst) - l.level(e, now)
	if spent <= 0 {
		return
	}
	_, prefix := failKeys(netip.AddrFrom16(e.key).Unmap())
	if j, ok := l.prefixes.get(prefix); ok {
		l.prefixes.update(j, max(0, l.level(l.prefixes.entries[j], now)-spent), now)
		return
	}
	if l.prefixes.full() {
		l.prefixes.remove(l.prefixes.tail)
	}
	l.prefixes.insert(prefix, max(0, float64(l.opts.Burst)-spent), now)
}

// expire forgets the buckets that are full again for sure (their last
// failure is Burst/PerSecond old), least recent first: each step is one
// bucket removed, so it costs nothing while none is due; the caller holds
// l.mu.
func (l *FailureLimiter) expire(now int64) {
	for _, t := range []*failTable{&l.addrs, &l.prefixes} {
		for t.tail >= 0 && now-t.entries[t.tail].at >= l.refillAll {
			t.remove(t.tail)
		}
	}
	l.count()
}

func (l *FailureLimiter) count() {
	l.tracked.Store(int32(l.addrs.len() + l.prefixes.len()))
}

func (l *FailureLimiter) now() int64 { return int64(l.opts.Clock().Sub(l.base)) }

// level is e's tokens at now.
func (l *FailureLimiter) level(e failEntry, now int64) float64 {
	if dt := now - e.at; dt > 0 {
		return min(float64(l.opts.Burst), e.tokens+float64(dt)/1e9*l.opts.PerSecond)
	}
	return e.tokens
}

// wait is the time until a bucket at tokens has one.
func (l *FailureLimiter) wait(tokens float64) time.Duration {
	if l.opts.PerSecond <= 0 {
		return time.Hour
	}
	return time.Duration((1 - tokens) / l.opts.PerSecond * float64(time.Second))
}
