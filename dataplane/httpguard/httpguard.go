// Package httpguard refuses HTTP/1.x header blocks that split lines on
// anything but CRLF, before net/http parses them.
//
// net/http accepts a bare LF as a line end, so "X-Note: a\nX-Injected: 1"
// is two headers to tollgate, while a front proxy that splits only on CRLF
// sees one header: a request smuggling gap. A Conn (from Listener) scans the
// bytes of every header block as net/http reads them and, at the first bare
// LF or bare CR, replaces that byte with NUL, ends the block with CRLF CRLF
// and then reports end of stream. net/http then refuses the block itself
// with 400 (a NUL is invalid in a request line, a field name and a field
// value) and closes the connection; it stays the only writer on the
// connection, so pipelined answers are never interleaved.
//
// Only header blocks are scanned. A Conn follows the request framing to skip
// bodies: Content-Length bodies are skipped by length. A body it cannot
// follow (Transfer-Encoding, or an unclear Content-Length that net/http will
// refuse anyway) ends scanning for the connection and marks it Unchecked:
// the handler answers that request with "Connection: close", so no later
// request on it goes unscanned. After a protocol switch (101) the handler
// calls Passthrough.
//
// HTTP/2 is binary: its frames are never scanned, and its server checks
// header fields itself (Go's refuses a CR, LF or NUL in a name or value).
// An H2CListener lets a connection that opens with the HTTP/2 preface
// through unscanned from there on (h2c with prior knowledge); every other
// connection on it is scanned as HTTP/1.x. A TLSListener hands the
// connections that chose "h2" by ALPN to net/http as the *tls.Conn itself
// (its HTTP/2 server takes nothing else), and wraps the others.
package httpguard

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
)

// Listener wraps ln so that every accepted connection is a *Conn.
func Listener(ln net.Listener) net.Listener { return listener{Listener: ln} }

// H2CListener is Listener for a server that also speaks HTTP/2 without TLS
// (http.Protocols.SetUnencryptedHTTP2): a connection that opens with the
// HTTP/2 preface is not scanned after it.
func H2CListener(ln net.Listener) net.Listener { return listener{Listener: ln, h2c: true} }

type listener struct {
	net.Listener
	h2c bool
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &Conn{Conn: c}
	gc.s.H2C = l.h2c
	return gc, nil
}

// Conn is a connection whose header blocks are checked; see the package
// documentation. Read is called by one goroutine at a time (net/http's
// connection reader); Unchecked and Passthrough are safe from any
// goroutine.
type Conn struct {
	net.Conn
	s         Scanner
	unchecked atomic.Bool
	pass      atomic.Bool
	tail      []byte // what is left to return after a refused block
	refused   bool
}

// refusedTail ends a refused header block.
const refusedTail = "\r\n\r\n"

// Read reads from the connection and checks header blocks.
func (c *Conn) Read(p []byte) (int, error) {
	if c.refused {
		if len(c.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(p, c.tail)
		c.tail = c.tail[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if n == 0 || c.pass.Load() {
		return n, err
	}
	m, verdict := c.s.Scan(p[:n])
	switch verdict {
	case Refused:
		c.refused, c.tail = true, []byte(refusedTail)
		return m, nil
	case Unfollowable:
		c.unchecked.Store(true)
		c.pass.Store(true)
	case Preface:
		c.pass.Store(true)
	}
	return n, err
}

// tlsConn is a Conn around a *tls.Conn: net/http sets Request.TLS from its
// ConnectionState, as it does for a *tls.Conn (a plain Conn has none, so
// that its requests have no TLS state).
type tlsConn struct {
	*Conn
	tc *tls.Conn
}

func (c tlsConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// Unchecked reports whether scanning stopped at a body this Conn cannot
// follow; the current request must then be the connection's last.
func (c *Conn) Unchecked() bool { return c.unchecked.Load() }

// Passthrough stops scanning: the connection switched protocols.
func (c *Conn) Passthrough() { c.pass.Store(true) }

type connKey struct{}

// ConnContext is an http.Server ConnContext that makes the *Conn available
// to handlers through FromContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	switch gc := c.(type) {
	case *Conn:
		return context.WithValue(ctx, connKey{}, gc)
	case tlsConn:
		return context.WithValue(ctx, connKey{}, gc.Conn)
	}
	return ctx
}

// FromContext returns the request's *Conn, or nil when the server does not
// use Listener and ConnContext.
func FromContext(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}
