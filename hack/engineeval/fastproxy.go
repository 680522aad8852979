// Package engineeval is issue 18's HTTP engine evaluation: a bare reverse
// proxy on valyala/fasthttp (server + HostClient), which the benchmark
// measures next to nginx and a bare httputil.ReverseProxy
// (`go run ./hack/bench -serve-fasthttp-floor ADDR UPSTREAM`), and the tests
// that record, on real sockets, which of the gateway's HTTP behaviours
// fasthttp can provide. The gateway does not use it: the tests show why
// (docs/bench/http-engine.md).
package engineeval

import (
	"bytes"
	"net"
	"net/url"
	"time"

	"github.com/valyala/fasthttp"
)

// FastProxy is a bare reverse proxy to one upstream on fasthttp, with the
// gateway's settings where fasthttp has them (see NewFastProxy).
type FastProxy struct {
	Server *fasthttp.Server
	Client *fasthttp.HostClient
}

// NewFastProxy returns a proxy to upstream (http://host:port). Its settings
// mirror proxy.NewTransport and the gateway's http.Server where they map:
//
//   - dial timeout 5 s, TCP keep-alive 30 s; idle upstream connections
//     kept 90 s; no cap on upstream connections (net/http has none; the
//     HostClient's default of 512 would refuse requests past it);
//   - responseTimeout: the transport's ResponseHeaderTimeout. fasthttp has
//     no time-to-headers timeout: its ReadTimeout bounds the whole
//     response, body included, even when the body is streamed;
//   - the server: request headers within 10 s (fasthttp's ReadTimeout also
//     covers a buffered body), idle client connections closed after 120 s,
//     request headers up to 64 KiB (fasthttp bounds them by its read
//     buffer), request and response bodies streamed, not buffered
//     (StreamRequestBody, StreamResponseBody), no multipart parsing, no
//     header of its own (Server, Content-Type), and on Shutdown its
//     responses say Connection: close.
//
// TLS to upstreams, HTTP/2 and Expect: 100-continue towards the upstream
// have no counterpart (the HostClient speaks HTTP/1.1 only).
func NewFastProxy(upstream string, responseTimeout time.Duration) (*FastProxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	p := &FastProxy{Client: &fasthttp.HostClient{
		Addr:                     u.Host,
		Dial:                     func(addr string) (net.Conn, error) { return dialer.Dial("tcp", addr) },
		MaxConns:                 1 << 20,
		MaxIdleConnDuration:      90 * time.Second,
		ReadTimeout:              responseTimeout,
		StreamResponseBody:       true,
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true,
	}}
	p.Server = &fasthttp.Server{
		Handler:                      p.handle,
		ReadTimeout:                  10 * time.Second,
		IdleTimeout:                  120 * time.Second,
		ReadBufferSize:               64 << 10,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		CloseOnShutdown:              true,
	}
	return p, nil
}

// Serve serves the proxy on ln until Shutdown.
func (p *FastProxy) Serve(ln net.Listener) error { return p.Server.Serve(ln) }

// ListenAndServe serves the proxy on addr.
func (p *FastProxy) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return p.Serve(ln)
}

// hopByHop are the headers a proxy must not forward (RFC 9110 7.6.1), as
// httputil.ReverseProxy drops them; the headers the Connection header names
// go too.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// handle forwards one request as httputil.NewSingleHostReverseProxy does:
// hop-by-hop headers dropped both ways, the client's address appended to
// X-Forwarded-For, the Host header kept, 502 when the upstream fails.
func (p *FastProxy) handle(ctx *fasthttp.RequestCtx) {
	req, res := &ctx.Request, &ctx.Response
	dropHopByHop(req.Header.Peek("Connection"), req.Header.Del)
	ip := ctx.RemoteIP().String()
	if prior := req.Header.Peek("X-Forwarded-For"); len(prior) > 0 {
		ip = string(prior) + ", " + ip
	}
	req.Header.Set("X-Forwarded-For", ip)
	if err := p.Client.Do(req, res); err != nil {
		res.Reset()
		res.SetStatusCode(fasthttp.StatusBadGateway)
		res.Header.SetContentType("application/json")
		res.SetBodyString(`{"error":"upstream unavailable"}` + "\n")
		return
	}
	dropHopByHop(res.Header.Peek("Connection"), res.Header.Del)
}

// dropHopByHop deletes the hop-by-hop headers and those connection (the
// Connection header's value) names.
func dropHopByHop(connection []byte, del func(string)) {
	for _, name := range bytes.Split(connection, []byte(",")) {
		if name = bytes.TrimSpace(name); len(name) > 0 {
			del(string(name))
		}
	}
	for _, h := range hopByHop {
		del(h)
	}
}
