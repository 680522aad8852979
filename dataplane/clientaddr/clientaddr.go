// Package clientaddr finds the client address of a request that a rule
// can trust: the TCP peer, or, when the peer is a trusted proxy
// (--trusted-proxies), the address the proxies recorded in
// X-Forwarded-For (or RFC 7239 Forwarded), read from the right past the
// trusted hops. A header from an untrusted peer changes nothing.
package clientaddr

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// MaxHops bounds the hops a walk reads from the right: a header with more
// untrusted-free hops than this gives the address found there.
const MaxHops = 32

// Resolver finds client addresses. The zero value and nil trust no proxy
// (the peer is always the client). Safe for concurrent use.
type Resolver struct {
	trusted []netip.Prefix
}

// Parse reads --trusted-proxies: comma-separated CIDRs ("10.0.0.0/8") or
// addresses ("192.0.2.7", a /32 or /128). "" trusts no proxy.
func Parse(list string) (*Resolver, error) {
	r := &Resolver{}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("trusted proxies: %q is neither a CIDR nor an address", f)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		r.trusted = append(r.trusted, p.Masked())
	}
	return r, nil
}

// Trusted reports whether a is in a trusted CIDR.
func (r *Resolver) Trusted(a netip.Addr) bool {
	if r == nil {
		return false
	}
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Peer is the address of remoteAddr ("ip:port", as net/http sets
// Request.RemoteAddr), IPv4-mapped IPv6 as IPv4; the zero Addr when it
// does not parse.
func Peer(remoteAddr string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(remoteAddr); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}

// Client is the client address of a request from remoteAddr with headers
// h: the peer unless the peer is trusted; then the first untrusted hop of
// X-Forwarded-For from the right (or of Forwarded's for= when there is no
// X-Forwarded-For), the leftmost when every hop is trusted. malformed is
// true when a trusted peer sent a header that does not parse: the peer is
// the client then. It does not allocate.
func (r *Resolver) Client(remoteAddr string, h http.Header) (addr netip.Addr, malformed bool) {
	peer := Peer(remoteAddr)
	if !peer.IsValid() || !r.Trusted(peer) {
		return peer, false
	}
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		return r.walk(peer, xff, parseXFF)
	}
	if fwd := h.Values("Forwarded"); len(fwd) > 0 {
		return r.walk(peer, fwd, parseForwarded)
	}
	return peer, false
}

// walk reads the hops of the header lines from the right with parse (a
// hop's text to its address).
func (r *Resolver) walk(peer netip.Addr, lines []string, parse func(string) (netip.Addr, bool)) (netip.Addr, bool) {
	var last netip.Addr
	hops := 0
	for i := len(lines) - 1; i >= 0; i-- {
		rest := lines[i]
		for {
			hop := rest
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				hop, rest = rest[j+1:], rest[:j]
			} else {
				rest = ""
			}
			a, ok := parse(strings.TrimSpace(hop))
			if !ok {
				return peer, true
			}
			if hops++; !r.Trusted(a) || hops >= MaxHops {
				return a, false
			}
			last = a
			if rest == "" {
				break
			}
		}
	}
	return last, false
}

// parseXFF reads one X-Forwarded-For hop: an address, optionally with a
// port ("192.0.2.1:4711", "[2001:db8::1]:4711").
func parseXFF(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// parseForwarded reads the for= parameter of one Forwarded element
// (RFC 7239: for=192.0.2.60;proto=http, for="[2001:db8::1]:4711"). An
// element without for=, or with an obfuscated or "unknown" node, does not
// parse.
func parseForwarded(elem string) (netip.Addr, bool) {
	for elem != "" {
		pair := elem
		if j := strings.IndexByte(elem, ';'); j >= 0 {
			pair, elem = elem[:j], elem[j+1:]
		} else {
			elem = ""
		}
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(k, "for") {
			continue
		}
		v = strings.Trim(v, `"`)
		if strings.HasPrefix(v, "[") {
			if end := strings.IndexByte(v, ']'); end > 0 {
				if a, err := netip.ParseAddr(v[1:end]); err == nil {
					return a.Unmap(), true
				}
			}
			return netip.Addr{}, false
		}
		return parseXFF(v)
	}
	return netip.Addr{}, false
}
