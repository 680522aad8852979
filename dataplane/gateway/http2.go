package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/httpguard"
)

// HTTP/2 from clients: h2 on the HTTPS port (ALPN, httpguard.TLSListener),
// h2c on --listen with --h2c (httpguard.H2CListener), both served by
// net/http's HTTP/2 server with the proxy's own bounds: the streams a
// connection may have open at once (--h2-max-concurrent-streams, which
// also bounds the handlers running for it, and the streams reset before
// their handler started to 4x that), the header list (the proxy's
// MaxHeaderBytes, 64 KiB: larger is answered 431), and the streams a
// client may reset while their handlers run (--h2-reset-rate: a rapid
// reset flood closes its connection).

// maxH2Streams bounds --h2-max-concurrent-streams.
const maxH2Streams = 10000

// http2Config is the HTTP/2 configuration of the proxy's servers.
func (g *Gateway) http2Config() *http.HTTP2Config {
	return &http.HTTP2Config{
		MaxConcurrentStreams: g.opts.H2MaxStreams,
		CountError:           func(errType string) { g.h2.Errors.WithLabelValues(errType).Inc() },
	}
}

// resetBurst is the streams a connection may reset at once, beyond which
// --h2-reset-rate applies: two connections' worth of concurrent streams.
func (g *Gateway) resetBurst() float64 { return 2 * float64(g.opts.H2MaxStreams) }

// resetBudget is what one connection may still reset: a token bucket of
// resetBurst, refilled at --h2-reset-rate per second.
type resetBudget struct {
	conn   net.Conn
	mu     sync.Mutex
	tokens float64
	last   time.Time
	closed bool
}

type resetBudgetKey struct{}

// connContext is the proxy servers' ConnContext: httpguard's, and the
// connection's reset budget.
func (g *Gateway) connContext(ctx context.Context, c net.Conn) context.Context {
	ctx = httpguard.ConnContext(ctx, c)
	if g.opts.H2ResetRate > 0 {
		ctx = context.WithValue(ctx, resetBudgetKey{}, &resetBudget{conn: c, tokens: g.resetBurst(), last: time.Now()})
	}
	return ctx
}

// spend takes one reset from b at now and reports whether b ran dry
// for the first time: the connection is then to be closed.
func (b *resetBudget) spend(now time.Time, rate, burst float64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	b.tokens--
	if b.tokens >= 0 || b.closed {
		return false
	}
	b.closed = true
	return true
}

// guardResets counts, per HTTP/2 connection, the requests whose client
// reset their stream (or dropped the connection) before the handler was
// done: each costs the gateway a handler, identification and a decision,
// however early it is canceled. A connection past its budget is closed at
// once (its TCP connection, below TLS: a flooding peer is not owed a
// close_notify). Requests over HTTP/1.x are not counted: a client that
// cancels one closes its connection.
func (g *Gateway) guardResets(next http.Handler) http.Handler {
	if g.opts.H2ResetRate <= 0 {
		return next
	}
	rate, burst := g.opts.H2ResetRate, g.resetBurst()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			next.ServeHTTP(w, r)
			return
		}
		// Deferred: the reverse proxy panics (http.ErrAbortHandler) when
		// the client is gone in the middle of a response.
		defer func() {
			if r.Context().Err() == nil || g.stopping.Load() {
				return
			}
			b, _ := r.Context().Value(resetBudgetKey{}).(*resetBudget)
			if b != nil && b.spend(time.Now(), rate, burst) {
				g.h2.ResetFloods.Inc()
				conn := b.conn
				if tc, ok := conn.(*tls.Conn); ok {
					conn = tc.NetConn()
				}
				_ = conn.Close()
			}
		}()
		next.ServeHTTP(w, r)
	})
}
