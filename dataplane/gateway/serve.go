package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/tollgate-dev/tollgate/dataplane/httpguard"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/rls"
	"github.com/tollgate-dev/tollgate/dataplane/tlscerts"
	"github.com/tollgate-dev/tollgate/internal/lib/urlpath"
)

// loop is a background task that runs until its context ends.
type loop struct {
	name string
	run  func(context.Context) error
}

// loops are the gateway's background tasks: watching files and ConfigMaps,
// counting replicas, probing Redis while the breaker is open.
func (g *Gateway) loops() []loop {
	ls := []loop{
		{"replica counting", g.members.Run},
		{"Redis probe", g.chain.Run},
		{"concurrency slot renewal", g.slots.Run},
	}
	for _, s := range g.sources {
		ls = append(ls, loop{s.name, s.Run})
	}
	if g.rls != nil {
		ls = append(ls, loop{"gRPC health", g.followHealth})
	}
	return ls
}

// server is one listener's server: serve blocks until it stops, shutdown
// stops it gracefully within ctx.
type server struct {
	name     string
	serve    func() error
	shutdown func(ctx context.Context)
	// last servers stop after the others have drained.
	last bool
}

// servers are the proxy, the rate limit service and the admin listener, as
// configured.
func (g *Gateway) servers() []server {
	var ss []server
	if g.handler != nil {
		// HTTP/1.x header blocks with a bare LF or CR are refused with 400;
		// with --h2c, HTTP/2 connections (binary frames) are not scanned.
		ln := httpguard.Listener(g.proxyLn)
		if g.opts.H2C {
			ln = httpguard.H2CListener(g.proxyLn)
		}
		ss = append(ss, g.proxyServer("proxy", g.guardResets(g.handler), ln, g.opts.H2C))
	}
	if g.handler != nil && g.tlsLn != nil {
		// TLS below the header check: it scans the decrypted bytes of
		// HTTP/1.1 connections; h2 ones go to net/http's HTTP/2 server.
		ln := httpguard.TLSListener(g.tlsLn, g.certs.Config(), g.opts.ReadHeaderTimeout)
		ss = append(ss, g.proxyServer("HTTPS proxy", withTLSState(g.guardResets(g.handler), g.certs), ln, false))
	}
	if g.rls != nil {
		// Health reports NOT_SERVING until Ready, like /readyz.
		g.health = health.NewServer()
		g.setHealth()
		gs := rls.NewGRPCServer(g.rls, g.health, g.rlsOpts...)
		ss = append(ss, server{name: "rate limit service", serve: func() error { return gs.Serve(g.rlsLn) }, shutdown: func(ctx context.Context) { g.stopGRPC(ctx, gs) }})
	}
	if g.adminLn != nil {
		admin := &http.Server{Handler: g.adminMux(), ReadHeaderTimeout: 10 * time.Second}
		// The admin listener stays up during the drain, so probes see
		// "not ready" rather than a refused connection.
		ss = append(ss, server{name: "admin", serve: func() error { return admin.Serve(g.adminLn) }, shutdown: func(context.Context) { _ = admin.Close() }, last: true})
	}
	return ss
}

// proxyServer serves handler on ln, an httpguard listener: HTTP/1.1, and
// HTTP/2 over TLS (ALPN) or, with h2c, without.
func (g *Gateway) proxyServer(name string, handler http.Handler, ln net.Listener, h2c bool) server {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: g.opts.ReadHeaderTimeout,
		IdleTimeout:       g.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       g.connContext,
		HTTP2:             g.http2Config(),
	}
	if h2c {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	return server{name: name, serve: func() error { return srv.Serve(ln) }, shutdown: func(ctx context.Context) {
		if err := srv.Shutdown(ctx); err != nil {
			g.log.Error(err, "in-flight requests cut off at the end of the grace period", "server", name)
			_ = srv.Close()
		}
	}}
}

// withTLSState answers a request whose Host would get another certificate
// than the connection's server name (SNI) got with 421 Misdirected Request
// (RFC 9110): a connection made for one HTTPS listener does not serve
// another's hosts. (r.TLS is set over HTTP/2 and, through httpguard's
// connection, over HTTP/1.1: routing sees the request came over TLS.)
func withTLSState(next http.Handler, certs *tlscerts.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && r.TLS.ServerName != "" {
			host, set := urlpath.Host(r.Host), certs.Current()
			if !strings.EqualFold(host, r.TLS.ServerName) && set.Lookup(host) != set.Lookup(r.TLS.ServerName) {
				const msg = "misdirected request: the Host is served with another certificate than this connection's server name"
				if proxy.IsGRPC(r) {
					proxy.WriteGRPCStatus(w, http.StatusMisdirectedRequest, msg)
					return
				}
				http.Error(w, msg, http.StatusMisdirectedRequest)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Run serves until ctx ends, then drains in-flight requests for up to
// ShutdownGrace and releases everything.
func (g *Gateway) Run(ctx context.Context) error {
	defer g.close()
	bg, stopLoops := context.WithCancel(context.Background())
	if g.events != nil {
		// Before the loops start: an Event recorded while the broadcaster
		// has no sink yet would be dropped. It stops after the loops.
		if err := g.events.StartRecordingToSinkWithContext(bg); err != nil {
			stopLoops()
			return fmt.Errorf("recording Kubernetes Events: %w", err)
		}
		defer g.events.Shutdown()
	}
	var loops errgroup.Group
	for _, l := range g.loops() {
		loops.Go(func() error {
			if err := l.run(bg); err != nil && bg.Err() == nil {
				g.log.Error(err, "background task stopped", "task", l.name)
			}
			return nil
		})
	}
	defer func() { stopLoops(); _ = loops.Wait() }()

	servers := g.servers()
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			if err := s.serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("%s stopped: %w", s.name, err)
			}
		}()
	}
	g.listening.Store(true)
	if g.health != nil {
		g.setHealth()
	}
	g.log.Info("gateway serving", "listen", g.Addr(), "tls", g.TLSAddr(), "rls", g.RLSAddr(), "admin", g.AdminAddr(), "limiter", g.opts.Limiter,
		"redis", g.opts.Redis.String(), "replicas", g.members.Replicas())

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	g.drain(servers)
	return err
}

// drain stops taking requests and lets those in flight finish within
// ShutdownGrace: not ready from now on, so a load balancer stops sending new
// requests.
func (g *Gateway) drain(servers []server) {
	g.stopping.Store(true)
	if g.health != nil {
		g.health.Shutdown() // NOT_SERVING from now on
	}
	g.log.Info("shutting down", "grace", g.opts.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), g.opts.ShutdownGrace)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		if !s.last {
			wg.Go(func() { s.shutdown(sctx) })
		}
	}
	wg.Wait()
	for _, s := range servers {
		if s.last {
			s.shutdown(sctx)
		}
	}
}

// stopGRPC stops the rate limit service gracefully: no new calls, calls in
// flight finish until ctx ends; then the rest is cut off.
func (g *Gateway) stopGRPC(ctx context.Context, gs *grpc.Server) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		g.log.Error(ctx.Err(), "rate limit calls cut off at the end of the grace period")
		gs.Stop()
		<-done
	}
}
