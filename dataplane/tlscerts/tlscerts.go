// Package tlscerts holds the certificates of the gateway's HTTPS port
// (Gateway API HTTPS listeners): it watches the TLS Secret the controller
// writes (pkg/routetable.TLSSecretName), combines it with the route table's
// HTTPS listeners, and picks a certificate per TLS handshake by the client's
// server name (SNI). Every change builds a new certificate set that is
// swapped in atomically; a certificate that does not parse keeps its last
// good version.
package tlscerts

import (
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// Set is an immutable certificate choice by server name.
type Set struct {
	exact    map[string]*tls.Certificate // host
	wildcard map[string]*tls.Certificate // ".suffix" of "*.suffix"
	any      *tls.Certificate            // a listener without hostname
	fallback *tls.Certificate            // for a handshake without SNI
	n        int                         // listeners with a certificate
}

// Build makes the set of the listeners from the parsed certificates (by
// Secret, "namespace/name"). A listener serves its first certificate that
// parsed; a listener without one is left out. When two listeners have the
// same hostname the first wins (the controller reports the later one
// Conflicted unless they are on different Gateways).
func Build(listeners []routetable.TLSListener, certs map[string]*tls.Certificate) *Set {
	s := &Set{exact: map[string]*tls.Certificate{}, wildcard: map[string]*tls.Certificate{}}
	for _, l := range listeners {
		var c *tls.Certificate
		for _, ref := range l.Certificates {
			if c = certs[ref]; c != nil {
				break
			}
		}
		if c == nil {
			continue
		}
		s.n++
		h := strings.ToLower(l.Hostname)
		switch {
		case h == "":
			if s.any == nil {
				s.any = c
			}
		case strings.HasPrefix(h, "*."):
			if s.wildcard[h[1:]] == nil {
				s.wildcard[h[1:]] = c
			}
		default:
			if s.exact[h] == nil {
				s.exact[h] = c
			}
		}
		if s.fallback == nil {
			s.fallback = c
		}
	}
	if s.any != nil {
		s.fallback = s.any
	}
	return s
}

// Len is the number of listeners with a certificate.
func (s *Set) Len() int { return s.n }

// Lookup returns the certificate for a server name: the listener with that
// exact hostname, else the longest wildcard that covers it ("*.example.com"
// covers "a.example.com" and "a.b.example.com", not "example.com"), else a
// listener without hostname. Without a server name (clients that send no
// SNI, e.g. when dialling an IP address) it is the certificate of a listener
// without hostname, else of the first listener. nil when none fits.
func (s *Set) Lookup(serverName string) *tls.Certificate {
	name := strings.ToLower(strings.TrimSuffix(serverName, "."))
	if name == "" {
		return s.fallback
	}
	if c := s.exact[name]; c != nil {
		return c
	}
	for i := strings.IndexByte(name, '.'); i >= 0 && len(s.wildcard) > 0; {
		if c := s.wildcard[name[i:]]; c != nil {
			return c
		}
		j := strings.IndexByte(name[i+1:], '.')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return s.any
}

// Store keeps the current set: SetListeners (from the route table) and
// SetSecret (from the TLS Secret) rebuild it.
type Store struct {
	mu        sync.Mutex
	listeners []routetable.TLSListener
	certs     map[string]*tls.Certificate // last good, by Secret
	cur       atomic.Pointer[Set]
	onError   func(error)
}

// NewStore returns an empty store; onError (may be nil) hears about
// certificates that do not parse.
func NewStore(onError func(error)) *Store {
	s := &Store{certs: map[string]*tls.Certificate{}, onError: onError}
	s.cur.Store(Build(nil, nil))
	return s
}

// Current is the set in force.
func (s *Store) Current() *Set { return s.cur.Load() }

// SetListeners sets the HTTPS listeners (a new route table).
func (s *Store) SetListeners(ls []routetable.TLSListener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = ls
	s.cur.Store(Build(s.listeners, s.certs))
}

// SetSecret loads the TLS Secret's data. A certificate that does not parse
// keeps its last good version; Secrets no longer in the data are dropped.
func (s *Store) SetSecret(data map[string][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	certs := map[string]*tls.Certificate{}
	for k, crt := range data {
		base, ok := strings.CutSuffix(k, ".crt")
		if !ok {
			continue
		}
		ns, name, _ := strings.Cut(base, ".")
		ref := ns + "/" + name
		_, keyKey := routetable.CertKeys(ref)
		c, err := tls.X509KeyPair(crt, data[keyKey])
		if err != nil {
			if last := s.certs[ref]; last != nil {
				certs[ref] = last
			}
			s.report(fmt.Errorf("certificate of Secret %s does not load (its last good version, if any, stays in use): %w", ref, err))
			continue
		}
		certs[ref] = &c
	}
	s.certs = certs
	s.cur.Store(Build(s.listeners, s.certs))
}

// GetCertificate is a tls.Config GetCertificate that picks from the
// current set.
func (s *Store) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.Current().Lookup(hello.ServerName); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no HTTPS listener has a certificate for server name %q", hello.ServerName)
}

// Config is the TLS configuration of the HTTPS port: TLS 1.2 and later,
// the certificate chosen per handshake, HTTP/2 or HTTP/1.1 by ALPN (h2
// first: a client that offers both gets HTTP/2).
func (s *Store) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.GetCertificate, NextProtos: []string{"h2", "http/1.1"}}
}
