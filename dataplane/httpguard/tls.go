package httpguard

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// ProtoH2 is HTTP/2's ALPN protocol id.
const ProtoH2 = "h2"

// TLSListener accepts TLS connections on ln with config. Each handshake
// runs on a goroutine of its own, within handshakeTimeout, so that a slow
// client delays no other; Accept then returns a connection that chose
// HTTP/2 by ALPN (ProtoH2 in config.NextProtos) as the *tls.Conn itself,
// which net/http's HTTP/2 server requires and whose binary frames are not
// scanned, and every other as a Conn around it, scanned as HTTP/1.x, whose
// requests net/http gives the connection's TLS state. A failed handshake
// closes its connection. Closing the listener ends the handshakes in
// flight and closes the connections not yet accepted.
func TLSListener(ln net.Listener, config *tls.Config, handshakeTimeout time.Duration) net.Listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &tlsListener{Listener: ln, config: config, timeout: handshakeTimeout,
		conns: make(chan net.Conn), errs: make(chan error), ctx: ctx, cancel: cancel}
}

type tlsListener struct {
	net.Listener
	config  *tls.Config
	timeout time.Duration
	conns   chan net.Conn
	errs    chan error
	// ctx ends when the listener is closed.
	ctx    context.Context
	cancel context.CancelFunc
	start  sync.Once
}

// Accept returns the next connection whose handshake succeeded, or the
// listener's error.
func (l *tlsListener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops accepting and ends the handshakes in flight.
func (l *tlsListener) Close() error {
	l.cancel()
	return l.Listener.Close()
}

// acceptLoop accepts TCP connections and starts their handshakes. An
// accept error goes to the next Accept (net/http backs off on temporary
// ones before it calls Accept again, and this loop waits for that call).
func (l *tlsListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err:
			case <-l.ctx.Done():
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.handshake(c)
	}
}

// handshake runs raw's TLS handshake and hands the connection to Accept.
func (l *tlsListener) handshake(raw net.Conn) {
	tc := tls.Server(raw, l.config)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		_ = raw.Close()
		return
	}
	var c net.Conn = tc
	if tc.ConnectionState().NegotiatedProtocol != ProtoH2 {
		c = tlsConn{Conn: &Conn{Conn: tc}, tc: tc}
	}
	select {
	case l.conns <- c:
	case <-l.ctx.Done():
		_ = c.Close()
	}
}
